"""Graceful shutdown: SIGTERM while many clients push, and every push the sink acknowledged is in
Delta afterwards; every listener stops accepting at once; a push handed to the exporter is answered,
never cut off while it may land; a stalled upload does not hold the shutdown past its grace period;
a flush that hangs ends at its bound with exit status 75 (F17, the shutdown half of F15)."""

from __future__ import annotations

import asyncio
import base64
import signal
import socket
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import grpc
import grpc.aio
import httpx
import pytest
from deltalake import DeltaTable
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest

from ingest.config import SinkConfig, SinkConfigError
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.server import SHUTDOWN_INCOMPLETE_EXIT_CODE, Sink
from ingest.wire import GET_PATH, PUSH_PATH, parse_instance_id
from subscriptions import Errors
from tests.support.kafka import KafkaClient, push_request
from tests.support.otlp import metrics_data
from tests.support.paths import LIBRDKAFKA_FIXTURES, REPO
from tests.support.process import running_sink
from tests.support.slow_storage import ObservedDeltaExporter

pytestmark = pytest.mark.integration

FIXTURE = LIBRDKAFKA_FIXTURES / "librdkafka-producer-push001-zstd.bin"
FAST = 'subscriptions:\n  fast: {metrics: "org.apache.kafka.", interval.ms: 100}\n'
CLIENTS = 40
ACKS_BEFORE_SIGTERM = 300


async def run_client(stub: pb_grpc.ClientTelemetryStub, acked: Counter[UUID], payload: bytes) -> None:
    """A KIP-714 client pushing at its interval until the sink goes away."""
    metadata = (("x-kafka-client-id", "shutdown-test"),)
    try:
        got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=metadata)
        instance = UUID(bytes=got.client_instance_id)
        while True:
            pushed = await stub.PushTelemetry(
                pb.PushTelemetryRequest(
                    client_instance_id=got.client_instance_id,
                    subscription_id=got.subscription_id,
                    compression_type=4,
                    metrics=payload,
                ),
                metadata=metadata,
                timeout=30,
            )
            if pushed.error_code == Errors.NONE:
                acked[instance] += 1
            # the client's own pacing (its push interval, or the throttle it was given)
            await asyncio.sleep(max(got.push_interval_ms, pushed.throttle_time_ms) / 1000)
    except grpc.aio.AioRpcError:
        return  # the sink stopped accepting


async def test_sigterm_under_load_loses_no_acknowledged_push(tmp_path: Path) -> None:
    acked: Counter[UUID] = Counter()
    with running_sink(tmp_path, tmp_path / "data", extra=FAST) as sink:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
            stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
            payload = FIXTURE.read_bytes()
            clients = [asyncio.create_task(run_client(stub, acked, payload)) for _ in range(CLIENTS)]
            async with asyncio.timeout(120):
                while acked.total() < ACKS_BEFORE_SIGTERM:
                    await asyncio.wait(clients, timeout=0.05)
                    assert not all(c.done() for c in clients), sink.log.read_text()
                sink.process.send_signal(signal.SIGTERM)
                await asyncio.gather(*clients)
                code = await asyncio.to_thread(sink.process.wait)
    assert code == 0, sink.log.read_text()
    landed = Counter(
        parse_instance_id(row["client_instance_id"])
        for row in DeltaTable(sink.table_uri).to_pyarrow_table().to_pylist()
    )
    assert acked.total() >= ACKS_BEFORE_SIGTERM
    missing = {instance: n - landed[instance] for instance, n in acked.items() if landed[instance] < n}
    assert missing == {}


REPOSITORY = REPO
PATIENCE_S = 30.0
"""A hang guard, and the bound the old shutdown exceeded: aiohttp's own 60 s wait for a stalled
upload; a flush that hangs, forever."""
HELD_IN_BATCH = 600_000
"""``max_batch_latency_ms`` that keeps a push queued in the exporter until the shutdown flushes it."""


def _sink_config(tmp_path: Path, exporter: str, **server: Any) -> SinkConfig:
    return SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, **server},
            "kafka_listener": {"port": 0},
            "subscriptions": {"all": {"metrics": "org.apache.kafka.", "interval.ms": 100}},
            "exporter": {
                "name": exporter,
                "options": {"table_uri": str(tmp_path / "pushes"), "max_batch_latency_ms": HELD_IN_BATCH},
                "quota_sample_period_s": 0,
            },
        }
    )


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except (ConnectionRefusedError, ConnectionResetError):  # reset: the listener closed mid-handshake
        return True
    return False


async def _grpc_push(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
        request = pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            metrics=metrics_data(),
        )
        pushed = await stub.PushTelemetry(request, timeout=PATIENCE_S)
        return int(pushed.error_code)


async def _kafka_push(port: int) -> int:
    client = await KafkaClient.connect(port)
    try:
        got: Any = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=UUID(int=0)))
        pushed: Any = await client.request(
            push_request(got.client_instance_id, got.subscription_id, metrics_data())
        )
        return int(pushed.error_code.value)
    finally:
        client.close()


async def _http_push(port: int) -> int:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=PATIENCE_S) as client:
        got = (await client.post(GET_PATH, json={})).json()
        body = {
            "client_instance_id": got["client_instance_id"],
            "subscription_id": got["subscription_id"],
            "metrics": base64.b64encode(metrics_data()).decode(),
        }
        return int((await client.post(PUSH_PATH, json=body)).json()["error_code"])


async def test_F17_every_listener_stops_accepting_at_once_and_pushes_in_the_exporter_are_answered(
    tmp_path: Path,
) -> None:
    exporter = f"{ObservedDeltaExporter.__module__}:{ObservedDeltaExporter.__name__}"
    sink = Sink(_sink_config(tmp_path, exporter, shutdown_grace_s=0.5, shutdown_flush_s=PATIENCE_S))
    await sink.start()
    assert isinstance(sink.exporter, ObservedDeltaExporter)
    assert sink.kafka_port is not None
    ports = (sink.grpc_port, sink.http_port, sink.kafka_port)
    pushes = [
        asyncio.create_task(_grpc_push(sink.grpc_port)),
        asyncio.create_task(_kafka_push(sink.kafka_port)),
        asyncio.create_task(_http_push(sink.http_port)),
    ]
    async with asyncio.timeout(PATIENCE_S):
        for _ in pushes:
            await sink.exporter.entered.get()  # queued in a batch that only the shutdown commits
        stopping = asyncio.create_task(sink.stop())
        while not all([await asyncio.to_thread(_refuses_connections, port) for port in ports]):
            await asyncio.sleep(0)  # the listeners' stops run on the loop
        # every port refuses while the requests on all three are still in flight
        assert not any(push.done() for push in pushes)
        answers = await asyncio.gather(*pushes)
        assert await stopping is True
    # past the grace period, answered once their batch landed: no client retries a landed push
    assert answers == [Errors.NONE] * 3
    assert len(DeltaTable(str(tmp_path / "pushes")).to_pyarrow_table()) == 3


def _sink_env(monkeypatch: pytest.MonkeyPatch, **server: object) -> None:
    """Server settings for ``running_sink`` through the environment, and ``tests.support`` importable."""
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))
    for key, value in server.items():
        monkeypatch.setenv(f"TELEMETRY_SINK_SERVER__{key.upper()}", str(value))


def _exit_code(process: subprocess.Popen[str]) -> int:
    try:
        return process.wait(timeout=PATIENCE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve still running {PATIENCE_S} s after SIGTERM")


async def test_F17_a_stalled_http_upload_does_not_hold_the_shutdown_past_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the body timeout, aiohttp's own shutdown wait (60 s) and the flush bound are all beyond the test
    _sink_env(monkeypatch, shutdown_grace_s=1, shutdown_flush_s=2 * PATIENCE_S, http_body_timeout_ms=600_000)
    with running_sink(tmp_path, tmp_path / "data") as sink:
        reader, writer = await asyncio.open_connection("127.0.0.1", sink.http_port)
        writer.write(
            f"POST {PUSH_PATH} HTTP/1.1\r\nHost: sink\r\nContent-Type: application/octet-stream\r\n"
            "Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        async with asyncio.timeout(PATIENCE_S):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(bytes(1000))  # and the rest never comes: the handler is reading the body
        await writer.drain()
        sink.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(_exit_code, sink.process)
        async with asyncio.timeout(PATIENCE_S):
            assert await reader.read() == b""  # the upload was cut, never answered
        writer.close()
    assert code == 0, sink.log.read_text()


async def test_F15_a_flush_that_hangs_ends_at_its_bound_with_exit_status_75_and_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sink_env(monkeypatch, shutdown_grace_s=0.5, shutdown_flush_s=1)
    exporter = (
        "exporter:\n  name: tests.support.slow_storage:HungDeltaExporter\n"
        f"  options: {{table_uri: {tmp_path / 'pushes'}, max_batch_latency_ms: {HELD_IN_BATCH}}}\n"
        f"{FAST}"
    )
    with running_sink(tmp_path, tmp_path / "data", extra=exporter) as sink:
        push = asyncio.create_task(_grpc_push(sink.grpc_port))
        async with httpx.AsyncClient(base_url=sink.http_url) as client, asyncio.timeout(PATIENCE_S):
            # the push is in flight: queued in a batch only the shutdown would commit
            while "telemetry_sink_requests_in_flight 1.0" not in (await client.get("/metrics")).text:
                await asyncio.sleep(0.05)
        sink.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(_exit_code, sink.process)
        with pytest.raises(grpc.aio.AioRpcError):  # cut off: its client sends it again
            await push
    assert code == SHUTDOWN_INCOMPLETE_EXIT_CODE, sink.log.read_text()
    assert "not flushed within server.shutdown_flush_s" in sink.log.read_text()


def test_the_flush_bound_must_be_a_positive_number_of_seconds(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigError, match=r"server\.shutdown_flush_s must be a number of seconds > 0"):
        SinkConfig.from_document({"data_root": str(tmp_path), "server": {"shutdown_flush_s": 0}})
