"""Fuzzed frames never crash the Kafka listener: every frame is answered with a well-formed response
to its correlation id or refused with ``FrameError`` (the connection closes), and over real sockets
the listener goes on serving everyone else.

Frames come from hypothesis: raw bytes, headers of every implemented API and version (and the ones
around them) with arbitrary bodies, and valid requests cut short, extended or with bytes flipped.
The length check's work, counted in steps, stays within a constant times the frame's size however
the frame declares its arrays (F10)."""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.serial import entity_reader
from kio.static.primitive import f64, i8, i32

from ingest.transports.kafka import SUPPORTED_VERSIONS
from ingest.transports.kafka.protocol import FrameError, check_lengths, peek_header
from subscriptions import ClientContext
from tests.support.attacks import varint
from tests.support.kafka import KafkaClient, KafkaServed, encode_request, serving_kafka
from tests.support.otlp import metrics_data

pytestmark = pytest.mark.integration

VALID = [
    encode_request(request, 7)[4:]
    for request in (
        ApiVersionsV3(client_software_name="librdkafka", client_software_version="2.16.0"),
        MetadataRequest(topics=None, include_topic_authorized_operations=False),
        GetTelemetrySubscriptionsRequest(client_instance_id=None),
        PushTelemetryRequest(
            client_instance_id=uuid.UUID(int=5),
            subscription_id=i32(3),
            terminating=False,
            compression_type=i8(0),
            metrics=metrics_data(),
        ),
        describe_v1.DescribeClientQuotasRequest(components=(), strict=False),
        alter_v1.AlterClientQuotasRequest(
            entries=(
                alter_v1.EntryData(
                    entity=(alter_v1.EntityData(entity_type="user", entity_name="u"),),
                    ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(10.0), remove=False),),
                ),
            ),
            validate_only=True,
        ),
    )
]

headers = st.builds(
    lambda key, version, correlation, client_id, body: (
        struct.pack(">hhi", key, version, correlation)
        + (struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id)
        + body
    ),
    st.sampled_from([*SUPPORTED_VERSIONS, 0, 17, 36, 999, -1]),
    st.integers(-1, 14),
    st.integers(-(2**31), 2**31 - 1),
    st.none() | st.binary(max_size=20),
    st.binary(max_size=64),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(VALID)))
    how = draw(st.sampled_from(["cut", "extend", "flip"]))
    if how == "cut":
        return bytes(frame[: draw(st.integers(0, len(frame) - 1))])
    if how == "extend":
        return bytes(frame) + draw(st.binary(min_size=1, max_size=32))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(8, len(frame) - 1))
        frame[at] = draw(st.integers(0, 255))
    return bytes(frame)


frames = st.binary(max_size=128) | headers | mutated()


class _Connection:
    """What the APIs ask of a connection, without a socket (the frames go straight to ``respond``)."""

    local_address = ("127.0.0.1", 9094)

    def client_context(self, client_id: str | None) -> ClientContext:
        return ClientContext(client_id=client_id, connection_id="fuzz", client_source_address="127.0.0.1")

    def set_client_software(self, name: str, version: str) -> None:
        return None

    def start_throttling(self) -> None:
        return None

    def end_throttling(self) -> None:
        return None


@contextmanager
def listener_on_a_loop(tmp_path: Path) -> Iterator[tuple[asyncio.AbstractEventLoop, KafkaServed]]:
    """One listener for every example: hypothesis runs the examples, the test runs them on this loop."""
    loop = asyncio.new_event_loop()
    stack = AsyncExitStack()
    try:
        served = loop.run_until_complete(stack.enter_async_context(serving_kafka(tmp_path)))
        yield loop, served
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()


def test_fuzzed_frames_are_answered_well_formed_or_refused(tmp_path: Path) -> None:
    with listener_on_a_loop(tmp_path) as (loop, served):
        apis = served.listener.apis
        connection = _Connection()

        @settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
        @given(frame=frames)
        def check(frame: bytes) -> None:
            try:
                response = loop.run_until_complete(apis.respond(frame, connection)).frame
            except FrameError:
                return
            (size,) = struct.unpack_from(">i", response)
            assert size == len(response) - 4
            assert response[4:8] == frame[4:8]  # the request's correlation id

        check()


def test_fuzzed_frames_over_real_sockets_never_stop_the_listener(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ingest")
    with listener_on_a_loop(tmp_path) as (loop, served):
        bystander = loop.run_until_complete(served.connect())

        async def send(frame: bytes) -> None:
            client = await served.connect()
            client.send_raw(struct.pack(">i", len(frame)) + frame)
            client.close()
            answer = await bystander.request(ApiVersionsV0())
            assert answer.error_code == ErrorCode.none

        @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
        @given(frame=frames)
        def check(frame: bytes) -> None:
            loop.run_until_complete(send(frame))

        check()
        loop.run_until_complete(_until_only_the_bystander_is_left(served, bystander))
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == []  # every frame was answered or refused as expected, never a surprise


async def _until_only_the_bystander_is_left(served: KafkaServed, bystander: KafkaClient) -> None:
    for _ in range(100_000):
        if served.listener.connections == 1:
            break
        await asyncio.sleep(0)
    assert served.listener.connections == 1
    assert (await bystander.request(ApiVersionsV0())).error_code == ErrorCode.none


STEPS_PER_BYTE = 3
"""At most this many length-check steps per byte of body (an array item, string or tagged field
takes at least one byte, and costs at most three steps)..."""
FIXED_STEPS = 4
"""...plus a few that read no byte: the request entity and the field whose length is refused."""


def _work(frame: bytes) -> tuple[int, int] | None:
    """(steps the length check took, body bytes) for a frame of a supported API version whose
    header kio reads; None for the others."""
    try:
        api_key, version, _ = peek_header(frame)
    except FrameError:
        return None
    low, high = SUPPORTED_VERSIONS.get(api_key, (0, -1))
    if not low <= version <= high:
        return None
    schema = load_request_schema(api_key, version)
    try:
        _, offset = entity_reader(schema.__header_schema__)(frame, 0)
    except Exception:  # a header kio cannot read: refused before the check
        return None
    try:
        return check_lengths(schema, frame, offset), len(frame) - offset
    except FrameError as exc:
        return exc.work, len(frame) - offset


@st.composite
def declared_arrays(draw: st.DrawFn) -> bytes:
    """Requests made of arrays: a count (up to beyond every bound) and that many items of a few
    bytes, or fewer than the count says."""
    count = draw(st.integers(0, 12_000))
    items = draw(st.integers(0, count))
    kind = draw(st.sampled_from(["metadata v0", "metadata v12", "alter v0", "describe v1"]))
    if kind == "metadata v0":
        return struct.pack(">hhih", 3, 0, 1, -1) + struct.pack(">i", count) + b"\x00\x00" * items
    if kind == "metadata v12":  # compact array of (uuid, null name, no tags)
        return (
            struct.pack(">hhih", 3, 12, 1, -1)
            + b"\x00"
            + varint(count + 1)
            + (bytes(16) + b"\x00\x00") * items
        )
    if kind == "alter v0":  # entries of no entity parts and no ops
        return struct.pack(">hhih", 49, 0, 1, -1) + struct.pack(">i", count) + bytes(8) * items
    return struct.pack(">hhih", 48, 1, 1, -1) + b"\x00" + varint(count + 1) + b"\x01\x00\x00\x00" * items


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(frame=frames | declared_arrays())
def test_F10_the_length_check_work_grows_at_most_linearly_with_the_frame(frame: bytes) -> None:
    measured = _work(frame)
    if measured is not None:
        work, body_bytes = measured
        assert work <= STEPS_PER_BYTE * body_bytes + FIXED_STEPS
