"""``decoding``: the decodes are pure functions that run in worker processes, and the pools those
processes form are shared by the ``PayloadDecoders`` of one process until the last one closes."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import zstandard

from ingest.handler_time import metering
from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push import decoding as decoding_module
from ingest.push.codec import PayloadTooLargeError, decompress
from ingest.push.decoding import INLINE_DECODE_BYTES, PayloadDecoders, decode_export, decode_push
from ingest.push.otlp_scan import StructureLimitError
from subscriptions import Errors
from tests.support import attacks
from tests.support.otlp import resource_payload

MIB = 1 << 20
LARGE = resource_payload(padding="x" * 2 * INLINE_DECODE_BYTES)


async def test_decoders_sharing_a_pool_stop_it_only_when_the_last_of_them_closes() -> None:
    first, second = PayloadDecoders(3), PayloadDecoders(3)
    assert await first.in_worker(decode_push, LARGE, 0, MIB, DEFAULT_LIMITS) == LARGE
    pool = first.pool
    assert pool is not None
    assert await second.in_worker(decode_push, LARGE, 0, MIB, DEFAULT_LIMITS) == LARGE
    await first.close()
    await first.close()  # twice: still one user gone, not two
    assert second.pool is pool  # still the second's
    assert await second.in_worker(decode_push, LARGE, 0, MIB, DEFAULT_LIMITS) == LARGE
    await second.close()
    assert second.pool is None


async def test_decoders_that_never_used_a_worker_hold_no_pool_open() -> None:
    never_used = PayloadDecoders(3)  # and never closed, as a pipeline that only saw small payloads
    user = PayloadDecoders(3)
    assert await user.in_worker(decode_push, LARGE, 0, MIB, DEFAULT_LIMITS) == LARGE
    assert never_used.pool is user.pool is not None
    await user.close()
    assert never_used.pool is None


async def test_a_refusal_in_a_worker_reaches_the_loop_as_the_same_error_with_its_limit() -> None:
    decoders = PayloadDecoders(3)
    limits = RequestLimits(max_resource_metrics=1)
    two = resource_payload(padding="x" * INLINE_DECODE_BYTES) * 2  # two resources, over the limit
    try:
        with pytest.raises(StructureLimitError) as refused:
            await decoders.in_worker(decode_export, two, 0, MIB, limits)
    finally:
        await decoders.close()
    assert refused.value.limit == "max_resource_metrics"
    assert isinstance(refused.value, PayloadTooLargeError)


async def test_QUO_11_the_cpu_a_worker_spends_on_a_payload_is_charged_to_the_request() -> None:
    """Decoded or refused, what a payload cost the worker is the request's handler time, as it is on a
    broker's request-handler thread; the wait for the worker is not (here the loop's clock stands
    still, so all a meter holds is what was charged to it)."""
    decoders = PayloadDecoders(3)
    two = resource_payload(padding="x" * INLINE_DECODE_BYTES) * 2
    try:
        with metering(clock=lambda: 0) as decoded:
            assert await decoders.in_worker(decode_push, LARGE, 0, MIB, DEFAULT_LIMITS) == LARGE
        with metering(clock=lambda: 0) as refused, pytest.raises(StructureLimitError):
            await decoders.in_worker(decode_export, two, 0, MIB, RequestLimits(max_resource_metrics=1))
    finally:
        await decoders.close()
    assert decoded.total_ns() > 0
    assert refused.total_ns() > 0


async def test_F5_a_large_payload_that_inflates_to_little_is_decompressed_in_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A megabyte of empty zstd frames inflates to nothing: the decompressor walks it in a worker, never
    on the loop (the spy, set in this process only, sees no call)."""
    on_the_loop: list[int] = []

    def spied(data: bytes, *args: int, **kwargs: int) -> bytes:
        on_the_loop.append(len(data))
        return decompress(data, *args, **kwargs)

    monkeypatch.setattr(decoding_module, "decompress", spied)
    decoders = PayloadDecoders(3)
    try:
        with pytest.raises(PayloadTooLargeError):
            await decoders.decode(decode_push, attacks.zstd_frames(MIB), 4, MIB, DEFAULT_LIMITS)
        small = attacks.zstd_bomb(resource_payload(padding="x" * 1000))
        assert await decoders.decode(decode_push, small, 4, MIB, DEFAULT_LIMITS) != b""
    finally:
        await decoders.close()
    assert on_the_loop == [len(small)]  # the small one, and only it, on the loop


async def test_a_zstd_payload_that_declares_more_than_the_inline_bytes_goes_straight_to_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A payload small as sent whose zstd frame declares a decompressed size over
    ``INLINE_DECODE_BYTES`` (as a Java client's push does) is not first decompressed on the loop up to
    that size only to be handed to a worker; one that declares less, or nothing, still is tried there."""
    on_the_loop: list[int] = []

    def spied(data: bytes, *args: int, **kwargs: int) -> bytes:
        on_the_loop.append(len(data))
        return decompress(data, *args, **kwargs)

    monkeypatch.setattr(decoding_module, "decompress", spied)
    declaring = zstandard.ZstdCompressor().compress(LARGE)
    silent = zstandard.ZstdCompressor(write_content_size=False).compress(LARGE)
    assert len(declaring) < INLINE_DECODE_BYTES
    decoders = PayloadDecoders(3)
    try:
        assert await decoders.decode(decode_push, declaring, 4, MIB, DEFAULT_LIMITS) == LARGE
        assert await decoders.decode(decode_push, silent, 4, MIB, DEFAULT_LIMITS) == LARGE
    finally:
        await decoders.close()
    assert on_the_loop == [len(silent)]  # tried on the loop, then decoded in the worker


def test_every_payload_error_survives_the_trip_between_processes() -> None:
    error = StructureLimitError("max_metrics", "more than limits.max_metrics (3)", 4)
    back = pickle.loads(pickle.dumps(error))
    assert (str(back), back.limit, back.visited, back.error) == (str(error), "max_metrics", 4, error.error)


def test_a_decoder_process_imports_no_server_storage_or_transport_library() -> None:
    """What a spawned decoder imports to run ``decode_push``: the push and security facades export
    nothing, so importing ``decoding`` loads neither the pipeline nor the exporters."""
    probe = (
        "import sys\n"
        "import ingest.push.decoding\n"
        "heavy = ('grpc', 'aiohttp', 'httpx', 'deltalake', 'pyarrow', 'exporters', 'ingest.push.pipeline',"
        " 'ingest.transports', 'ingest.admin', 'ingest.security.authentication')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"


async def test_T3_7_an_export_of_too_many_clients_is_refused_as_a_structural_limit_in_a_worker() -> None:
    """Counted as the export is split (``attribution``), refused as the scan's limits are: 413 /
    RESOURCE_EXHAUSTED, the message naming the limits."""
    decoders = PayloadDecoders(3)
    limits = RequestLimits(max_clients_per_export=10, max_clients_per_forwarder_export=20)
    try:
        with pytest.raises(StructureLimitError) as refused:
            await decoders.in_worker(decode_export, attacks.fan_out_points(11), 0, MIB, limits)
        forwarded = await decoders.in_worker(
            decode_export, attacks.fan_out_points(20), 0, MIB, limits.for_trusted_forwarder()
        )
    finally:
        await decoders.close()
    assert (refused.value.limit, refused.value.visited) == ("max_clients_per_export", 11)
    assert refused.value.error is Errors.TELEMETRY_TOO_LARGE
    assert str(refused.value) == (
        "more than 10 clients in one export (limits.max_clients_per_export; "
        "from a trusted forwarder, limits.max_clients_per_forwarder_export)"
    )
    assert len(forwarded.groups) == 20
    with pytest.raises(StructureLimitError):
        decode_export(attacks.fan_out_points(21), 0, MIB, limits.for_trusted_forwarder())
