"""Turning a request's payload into what lands, within the limits, without holding the event loop.

Three decodes, each a pure function of the request's bytes and the limits (picklable, so that they can
run in another process):

- ``decode_push``: a KIP-714 push's payload decompressed, scanned (``otlp_scan``) and parsed, all or
  nothing: the ``MetricsData`` bytes that land;
- ``decode_export``: an OTLP protobuf export decompressed, scanned, parsed, stripped of its invalid
  points (``otlp_points``) and split by the client each part belongs to (``ingest.security.attribution``),
  at most ``limits.max_clients_per_export`` of them (else ``StructureLimitError``, as the scan's
  limits): a ``DecodedExport``;
- ``decode_export_tolerant``: ``decode_export``, repairing what raw forwarders send (a compressed body
  without ``Content-Encoding``, trailing zero bytes), for ``server.otlp_tolerant_intake``;
- ``decode_json_export``: the same for an OTLP JSON body, converted within the limits (``json_bodies``).

Each raises a ``codec.PayloadError`` carrying the Kafka code to answer.

``PayloadDecoders`` runs them. A payload of at most ``INLINE_DECODE_BYTES``, as sent and once
decompressed (every librdkafka push: 1.4 to 2.4 KB), is decoded on the event loop, where the worst such
payload costs well under a millisecond and a hop to another process would cost more. Bigger payloads (as
sent: a megabyte of empty compressed frames inflates to nothing but takes the decompressor a while to
walk), and every OTLP JSON body, are decoded in a pool of ``server.decode_processes`` worker processes
(started on first use, with ``spawn``, so no thread of the sink is forked): their CPU time never
competes with the event loop for the GIL, and the loop only pickles the request's bytes across. The
pool's size bounds how many large payloads are decoded at once (the rest queue, each in its admission
slot) and so their memory. A worker that dies (killed for memory, say) breaks the pool: it is replaced,
and the decode is tried once more on the new one; if that fails too the request is answered as a storage
failure would be (retried later), never as the client's fault. The CPU a worker spends on a request's
payload, whether it decodes or refuses it, is charged to that request's handler time
(``handler_time.charge``), as a broker's request-handler thread spends it: a client sending large
payloads is held to its ``request_percentage`` like any other."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

from ingest.handler_time import charge, waiting
from ingest.limits import RequestLimits
from ingest.push.codec import (
    InvalidPayloadError,
    PayloadError,
    PayloadTooLargeError,
    declared_size,
    decompress,
    parse_metrics_data,
    sniff_compression,
)
from ingest.push.json_bodies import otlp_json_to_protobuf
from ingest.push.otlp_points import Rejected, drop_invalid_points
from ingest.push.otlp_scan import StructureLimitError, scan_metrics, strip_zero_padding
from ingest.security.attribution import ClientGroup, TooManyClientsError, split_by_client
from subscriptions import CompressionType

if TYPE_CHECKING:
    from ingest.push.metrics import Repair

__all__ = [
    "DEFAULT_DECODE_PROCESSES",
    "INLINE_DECODE_BYTES",
    "DecodedExport",
    "DecoderUnavailableError",
    "PayloadDecoders",
    "decode_export",
    "decode_json_export",
    "decode_push",
]

log = logging.getLogger(__name__)

INLINE_DECODE_BYTES: Final = 4096
"""Payloads up to this size, as sent and once decompressed, are decoded on the event loop; bigger ones
in a worker process."""
DEFAULT_DECODE_PROCESSES: Final = 2
_Decoded = TypeVar("_Decoded")
Decode = Callable[[bytes, int, int, RequestLimits], _Decoded]


class DecodedExport(NamedTuple):
    """A decoded OTLP export: its valid part, one ``ClientGroup`` per client it carries
    (``ingest.security.attribution``), whether anything is left to land, and what was refused."""

    groups: tuple[ClientGroup, ...]
    has_metrics: bool
    rejected: Rejected
    repairs: tuple[Repair, ...] = ()
    """What ``decode_export_tolerant`` repaired to read it."""


class DecoderUnavailableError(Exception):
    """No worker process could decode the payload (the pool broke twice): the sink's fault, retried."""


def decode_push(data: bytes, compression_type: int, max_bytes: int, limits: RequestLimits) -> bytes:
    """A KIP-714 push's ``MetricsData`` bytes: decompressed, within ``limits``, parsed (all or nothing)."""
    payload = _decompress(data, compression_type, max_bytes, limits)
    scan_metrics(payload, limits)
    parse_metrics_data(payload)
    return payload


def decode_export(body: bytes, compression_type: int, max_bytes: int, limits: RequestLimits) -> DecodedExport:
    """An OTLP export decompressed, within ``limits``, parsed, and stripped of its invalid points."""
    return _valid_export(_decompress(body, compression_type, max_bytes, limits), limits)


def decode_export_tolerant(
    body: bytes, compression_type: int, max_bytes: int, limits: RequestLimits
) -> DecodedExport:
    """``decode_export``, and for a body sent as uncompressed protobuf that is not OTLP, what raw
    forwarders send (``server.otlp_tolerant_intake``): a client's compressed push, known by its magic
    bytes (``codec.sniff_compression``), decompressed within the same caps; and trailing zero bytes
    after the last message (``otlp_scan.strip_zero_padding``). The repairs made are in the result."""
    try:
        return decode_export(body, compression_type, max_bytes, limits)
    except InvalidPayloadError:
        if compression_type != CompressionType.NONE:
            raise
        repairs: list[Repair] = []
        sniffed = sniff_compression(body)
        if sniffed is not None:
            body = _decompress(body, sniffed, max_bytes, limits)
            repairs.append("decompressed_unlabelled")
        stripped = strip_zero_padding(body, max_resource_metrics=limits.max_resource_metrics)
        if stripped is not None:
            body = stripped
            repairs.append("zero_padding")
        if not repairs:
            raise
    return _valid_export(body, limits)._replace(repairs=tuple(repairs))


def decode_json_export(
    body: bytes, compression_type: int, max_bytes: int, limits: RequestLimits
) -> DecodedExport:
    """An OTLP JSON export decompressed, converted within ``limits`` (``json_bodies``), then as protobuf."""
    text = _decompress(body, compression_type, max_bytes, limits)
    return _valid_export(otlp_json_to_protobuf(text, limits), limits)


def _decompress(data: bytes, compression_type: int, max_bytes: int, limits: RequestLimits) -> bytes:
    return decompress(data, compression_type, max_bytes, max_compressed_frames=limits.max_compressed_frames)


def _valid_export(payload: bytes, limits: RequestLimits) -> DecodedExport:
    scan_metrics(payload, limits)
    data = parse_metrics_data(payload)
    rejected = drop_invalid_points(data)
    if rejected:
        payload = data.SerializeToString()  # what lands is the valid part only
    has_metrics = any(s.metrics for r in data.resource_metrics for s in r.scope_metrics)
    try:
        groups = split_by_client(data, payload, limits.max_clients_per_export)
    except TooManyClientsError as exc:  # a structural limit, counted where the export is split
        message = (
            f"more than {exc.max_clients} clients in one export (limits.max_clients_per_export; "
            "from a trusted forwarder, limits.max_clients_per_forwarder_export)"
        )
        raise StructureLimitError("max_clients_per_export", message, exc.seen) from None
    return DecodedExport(tuple(groups), has_metrics, rejected)


def _timed(
    decode: Decode[_Decoded], data: bytes, compression_type: int, max_bytes: int, limits: RequestLimits
) -> tuple[_Decoded | PayloadError, int]:
    """In a worker: what ``decode`` made of the payload, or the ``PayloadError`` it refused it with, and
    the CPU it took (ns of this thread's CPU clock)."""
    started = time.thread_time_ns()
    result: _Decoded | PayloadError
    try:
        result = decode(data, compression_type, max_bytes, limits)
    except PayloadError as exc:
        result = exc
    return result, time.thread_time_ns() - started


def _discard(pool: ProcessPoolExecutor) -> None:
    """Stop a broken pool without waiting for it, and kill what is left of its workers. A worker the
    pool was starting as another died can outlive the pool's own SIGTERM (a signal that arrives between
    the fork and the exec of a spawned process is taken by the parent's handler, which the sink has
    for SIGTERM): the pool's thread would then wait for it forever. SIGKILL cannot be taken."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # gone once shut down
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()


_POOLS: dict[int, ProcessPoolExecutor] = {}
"""The worker pools, by size: one per process however many pipelines it runs (tests run many)."""
_USERS: Counter[int] = Counter()
"""How many ``PayloadDecoders`` that have used each pool are not closed yet: the last one to close
stops it. One that never needed a worker is not counted, so it holds no pool open."""


class PayloadDecoders:
    """Runs the decodes: small payloads on the loop, the rest in ``processes`` worker processes."""

    def __init__(self, processes: int = DEFAULT_DECODE_PROCESSES) -> None:
        self.processes = processes
        self._sharing = False
        """Whether this one has used the pool, and so counts among its users until it closes."""

    @property
    def pool(self) -> ProcessPoolExecutor | None:
        """The worker processes, once started."""
        return _POOLS.get(self.processes)

    async def decode(
        self,
        decode: Decode[_Decoded],
        data: bytes,
        compression_type: int,
        max_bytes: int,
        limits: RequestLimits,
    ) -> _Decoded:
        """``decode`` a payload: on the loop if it is at most ``INLINE_DECODE_BYTES`` as sent and once
        decompressed (found by decompressing no more than that), else in a worker process; one whose
        zstd frame declares more goes to the worker without the attempt (a Java client's push does)."""
        if len(data) > INLINE_DECODE_BYTES or declared_size(data, compression_type) > INLINE_DECODE_BYTES:
            return await self.in_worker(decode, data, compression_type, max_bytes, limits)
        try:
            return decode(data, compression_type, min(max_bytes, INLINE_DECODE_BYTES), limits)
        except StructureLimitError:
            raise
        except PayloadTooLargeError:
            if max_bytes <= INLINE_DECODE_BYTES:
                raise
        return await self.in_worker(decode, data, compression_type, max_bytes, limits)

    async def in_worker(
        self,
        decode: Decode[_Decoded],
        data: bytes,
        compression_type: int,
        max_bytes: int,
        limits: RequestLimits,
    ) -> _Decoded:
        """``decode`` a payload in a worker process; ``DecoderUnavailableError`` if none can. The worker's
        CPU for it is charged to the current request."""
        loop = asyncio.get_running_loop()
        if not self._sharing:
            self._sharing = True
            _USERS[self.processes] += 1
        for attempt in (1, 2):
            pool = self.pool
            if pool is None:
                pool = _POOLS[self.processes] = ProcessPoolExecutor(
                    self.processes, mp_context=multiprocessing.get_context("spawn")
                )
            try:
                with waiting():  # the wait is not the request's handler time; the worker's CPU is
                    result, cpu_ns = await loop.run_in_executor(
                        pool, _timed, decode, data, compression_type, max_bytes, limits
                    )
            except BrokenProcessPool:
                log.warning("a payload decoder process died (attempt %d); starting new ones", attempt)
                if self.pool is pool:
                    del _POOLS[self.processes]
                _discard(pool)
                continue
            charge(cpu_ns)
            if isinstance(result, PayloadError):
                raise result
            return result
        raise DecoderUnavailableError("no decoder process could decode the payload")

    async def close(self) -> None:
        """Stop the worker processes once no other ``PayloadDecoders`` shares them (decodes in progress
        finish first). Idempotent; nothing to do for one that never used a worker."""
        if not self._sharing:
            return
        self._sharing = False
        _USERS[self.processes] -= 1
        if _USERS[self.processes] > 0:
            return
        pool = _POOLS.pop(self.processes, None)
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
