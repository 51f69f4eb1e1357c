"""Graceful shutdown of the real ``telemetry-sink serve`` process under load: SIGTERM while many
clients push, and every push the sink acknowledged is in Delta afterwards."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from uuid import UUID

import grpc
import grpc.aio
import pytest
from deltalake import DeltaTable

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from subscriptions import Errors
from tests.support.process import running_sink

pytestmark = pytest.mark.integration

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "librdkafka" / "librdkafka-producer-push001-zstd.bin"
)
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
        UUID(row["client_instance_id"]) for row in DeltaTable(sink.table_uri).to_pyarrow_table().to_pylist()
    )
    assert acked.total() >= ACKS_BEFORE_SIGTERM
    missing = {instance: n - landed[instance] for instance, n in acked.items() if landed[instance] < n}
    assert missing == {}
