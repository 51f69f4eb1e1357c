"""The request bytes the listeners hold at once (F9): in all (Kafka's ``queued.max.request.bytes``)
and per client address; over HTTP a request over a bound is answered 503 before its body is read,
over the Kafka wire it waits unread until memory is given back. Real servers on loopback; a second
client address is 127.0.0.2, which Linux's loopback answers."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp.test_utils import TestServer
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from prometheus_client import CollectorRegistry, generate_latest

from exporters import Health, InMemoryExporter
from ingest.config import SinkConfig, SinkConfigError
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app
from ingest.transports.kafka.listener import ListenerLimits
from ingest.transports.request_memory import RequestMemory, RequestMemoryLimits
from ingest.wire import OTLP_METRICS_PATH, PROTOBUF_CONTENT_TYPE
from tests.support.attacks import declared_frame
from tests.support.clock import FakeClock, eventually
from tests.support.kafka import serving_kafka
from tests.support.otlp import sdk_metrics
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration

KIB = 1024
OTHER_IP = "127.0.0.2"


# -- the bounds ----------------------------------------------------------------------------------


async def test_F9_a_request_is_read_while_its_address_and_the_total_have_room_as_kafkas_pool() -> None:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=100, max_bytes_per_ip=60))
    assert memory.try_take("10.0.0.1", 50)
    assert memory.try_take("10.0.0.1", 20)  # 50 < 60: read, passing the bound by one request (70)
    assert not memory.try_take("10.0.0.1", 1)  # 70 >= 60
    assert (
        memory.refusal("10.0.0.1")
        == "requests from 10.0.0.1 hold 70 bytes (server.max_request_bytes_per_ip is 60)"
    )
    assert memory.try_take("10.0.0.2", 40)  # another address: 70 < 100 in all
    assert not memory.try_take("10.0.0.3", 10)  # 110 >= 100
    assert memory.refusal("10.0.0.3") == "requests hold 110 bytes (server.queued_max_request_bytes is 100)"
    assert memory.refused == 2
    memory.give_back("10.0.0.1", 50)
    assert (memory.held, memory.held_by("10.0.0.1")) == (60, 20)
    assert memory.try_take("10.0.0.3", 10)
    assert memory.try_take("10.0.0.4", 1000)  # larger than a bound: still read, or it never would be


async def test_F9_a_wait_for_memory_ends_when_enough_is_given_back() -> None:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=100, max_bytes_per_ip=100))
    memory.try_take("a", 100)
    waiting = asyncio.ensure_future(memory.take("b", 40))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert memory.waiting == 1
    memory.give_back("a", 30)  # 70 < 100: room left
    await asyncio.wait_for(waiting, 10)  # a hang guard only
    assert (memory.held, memory.held_by("b"), memory.waiting) == (110, 40, 0)


async def test_F9_a_wait_for_memory_that_is_cancelled_leaves_nothing_held() -> None:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=10, max_bytes_per_ip=10))
    memory.try_take("a", 10)
    waiting = asyncio.ensure_future(memory.take("b", 5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert memory.waiting == 0
    memory.give_back("a", 10)
    assert memory.held == 0


async def test_F9_a_give_back_wakes_one_request_of_each_address_with_room_not_every_waiting_one() -> None:
    """Thousands of requests of one address waiting cost another address's give-back nothing; that
    address's own give-back wakes its requests one after another, in order."""
    memory = RequestMemory(RequestMemoryLimits(max_bytes=10_000, max_bytes_per_ip=10))
    memory.try_take("hostile", 10)
    order: list[int] = []

    async def wait(n: int) -> None:
        await memory.take("hostile", 10)
        order.append(n)

    waits = [asyncio.ensure_future(wait(n)) for n in range(2000)]
    await asyncio.sleep(0)
    assert memory.waiting == 2000
    for _ in range(100):  # another address's requests come and go
        assert memory.try_take("other", 5)
        memory.give_back("other", 5)
    await asyncio.sleep(0)
    assert memory.waiting == 2000
    assert not order  # none of them was woken
    for n in range(3):
        memory.give_back("hostile", 10)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == list(range(n + 1))  # the next one in line, and only it
    for pending in waits:
        pending.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert memory.waiting == 0


def test_F9_what_is_held_waits_and_was_refused_is_on_the_metrics_page() -> None:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=100, max_bytes_per_ip=60))
    memory.try_take("10.0.0.1", 70)
    memory.try_take("10.0.0.1", 20)  # refused: 70 >= 60
    registry = CollectorRegistry(auto_describe=False)
    registry.register(memory)
    page = generate_latest(registry).decode()
    for line in (
        "telemetry_sink_request_memory_held_bytes 70.0",
        "telemetry_sink_request_memory_max_bytes 100.0",
        "telemetry_sink_request_memory_waiting 0.0",
        "telemetry_sink_request_memory_refused_total 1.0",
    ):
        assert line in page.splitlines()


def test_F9_the_per_address_bound_must_be_within_the_total() -> None:
    with pytest.raises(SinkConfigError) as refused:
        SinkConfig.from_document(
            {"server": {"max_request_bytes_per_ip": 1024 * KIB, "queued_max_request_bytes": 512 * KIB}}
        )
    problems = refused.value.problems
    assert problems == ["server.max_request_bytes_per_ip must be at most server.queued_max_request_bytes"]
    defaults = SinkConfig.default().server.request_memory_limits()
    assert defaults == RequestMemoryLimits(512 * KIB * KIB, 64 * KIB * KIB)


# -- HTTP: answered at once, its body never read ---------------------------------------------------


async def _stalled_upload(port: int, length: int, source: str = "127.0.0.1") -> socket.socket:
    """An OTLP upload whose headers promise ``length`` bytes, of which 1 KiB is sent."""
    upload = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
    upload.sendall(
        f"POST {OTLP_METRICS_PATH} HTTP/1.1\r\nHost: sink\r\nContent-Type: {PROTOBUF_CONTENT_TYPE}\r\n"
        f"Content-Length: {length}\r\n\r\n".encode()
        + b"\0" * KIB
    )
    return upload


@pytest.fixture
async def http() -> AsyncIterator[tuple[TestServer, RequestMemory, InMemoryExporter]]:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=1000 * KIB, max_bytes_per_ip=300 * KIB))
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(FakeClock(), exporter)
    app = create_http_app(
        pipeline, ready=lambda: Health(True, "ok"), max_body_bytes=200 * KIB, request_memory=memory
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(**SERVER_OPTIONS)
    yield server, memory, exporter
    await server.close()


async def _export(server: TestServer, source: str = "127.0.0.1") -> httpx.Response:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(base_url=str(server.make_url("")), transport=transport) as client:
        return await client.post(
            OTLP_METRICS_PATH,
            content=encode_metrics(sdk_metrics("svc")).SerializeToString(),
            headers={"Content-Type": PROTOBUF_CONTENT_TYPE},
        )


async def test_F9_an_address_whose_stalled_uploads_hold_its_bound_gets_503_and_others_are_served(
    http: tuple[TestServer, RequestMemory, InMemoryExporter],
) -> None:
    server, memory, exporter = http
    assert server.port is not None
    stalled = [await _stalled_upload(server.port, 150 * KIB) for _ in range(2)]
    try:
        await eventually(lambda: memory.held_by("127.0.0.1") == 300 * KIB)

        refused = await _export(server)
        assert refused.status_code == 503
        assert int(refused.headers["Retry-After"]) >= 1
        status = Status.FromString(refused.content)
        assert status.message == (
            "requests from 127.0.0.1 hold 307200 bytes (server.max_request_bytes_per_ip is 307200): "
            "retry later"
        )

        served = await _export(server, OTHER_IP)  # another client is not held back
        assert served.status_code == 200
        assert len(exporter.pushes) == 1
    finally:
        for upload in stalled:
            upload.close()
    await eventually(lambda: memory.held == 0)
    assert (await _export(server)).status_code == 200  # its memory given back, the address is served
    assert memory.refused == 1


async def test_F9_a_chunked_body_holds_the_body_limit(
    http: tuple[TestServer, RequestMemory, InMemoryExporter],
) -> None:
    server, memory, _ = http
    assert server.port is not None
    upload = socket.create_connection(("127.0.0.1", server.port))
    try:
        upload.sendall(
            f"POST {OTLP_METRICS_PATH} HTTP/1.1\r\nHost: sink\r\nContent-Type: {PROTOBUF_CONTENT_TYPE}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n10\r\n".encode()
            + b"\0" * 16
        )
        await eventually(lambda: memory.held_by("127.0.0.1") == 200 * KIB)
    finally:
        upload.close()
    await eventually(lambda: memory.held == 0)


# -- Kafka: muted until memory is given back ------------------------------------------------------


async def test_F9_a_kafka_request_over_its_address_bound_waits_unread_until_memory_is_given_back(
    tmp_path: Path,
) -> None:
    memory = RequestMemory(RequestMemoryLimits(max_bytes=1000 * KIB, max_bytes_per_ip=200 * KIB))
    limits = ListenerLimits(socket_request_max_bytes=200 * KIB, non_push_request_max_bytes=200 * KIB)
    async with serving_kafka(tmp_path, limits=limits, request_memory=memory) as kafka:
        port = kafka.listener.port
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(declared_frame(200 * KIB))  # a request that stalls after its header: 200 KiB held
        await eventually(lambda: memory.held_by("127.0.0.1") == 200 * KIB)
        second = socket.create_connection(("127.0.0.1", port))
        second.sendall(declared_frame(150 * KIB))  # the address holds its 200 KiB: its body is not read
        await eventually(lambda: memory.waiting == 1)
        assert memory.held_by("127.0.0.1") == 200 * KIB

        other = socket.create_connection(("127.0.0.1", port), source_address=(OTHER_IP, 0))
        other.sendall(declared_frame(150 * KIB))  # another address: held at once
        await eventually(lambda: memory.held_by(OTHER_IP) == 150 * KIB)

        first.close()  # its 200 KiB given back: the second fits now
        await eventually(lambda: memory.held_by("127.0.0.1") == 150 * KIB)
        assert memory.waiting == 0
        for connection in (second, other):
            connection.close()
        await eventually(lambda: memory.held == 0)


async def test_F9_a_kafka_request_still_without_memory_at_its_read_timeout_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    memory = RequestMemory(RequestMemoryLimits(max_bytes=1000 * KIB, max_bytes_per_ip=200 * KIB))
    limits = ListenerLimits(
        socket_request_max_bytes=200 * KIB, non_push_request_max_bytes=200 * KIB, request_read_timeout_ms=300
    )
    async with serving_kafka(tmp_path, limits=limits, request_memory=memory) as kafka:
        assert memory.try_take("127.0.0.1", 200 * KIB)  # the address's other requests, in flight
        reader, writer = await asyncio.open_connection("127.0.0.1", kafka.listener.port)
        writer.write(declared_frame(150 * KIB))
        assert await asyncio.wait_for(reader.read(1), 30) == b""  # closed, after the read timeout
        writer.close()
        assert memory.waiting == 0
        assert memory.held == 200 * KIB  # the closed request never held any
    said = [r.getMessage() for r in caplog.records if r.name == "ingest.transports.kafka.listener"]
    assert any(
        "no memory for its request within 300 ms: requests from 127.0.0.1 hold 204800" in m for m in said
    )
