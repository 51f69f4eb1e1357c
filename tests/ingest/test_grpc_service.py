"""The gRPC ClientTelemetry service on a real loopback server, driven by the generated stub."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import grpc.aio
import pytest

from exporters import InMemoryExporter
from ingest.grpc_service import ClientTelemetryService
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from subscriptions import Errors
from tests.support.clock import FakeClock
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "librdkafka" / "librdkafka-producer-push001-zstd.bin"
)
METADATA = (
    ("x-kafka-client-id", "rdkafka"),
    ("x-kafka-client-software-name", "librdkafka"),
    ("x-kafka-client-software-version", "2.16.0"),
)


@pytest.fixture
async def served() -> AsyncIterator[tuple[pb_grpc.ClientTelemetryStub, InMemoryExporter, FakeClock]]:
    clock = FakeClock()
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter)
    server = grpc.aio.server()
    pb_grpc.add_ClientTelemetryServicer_to_server(ClientTelemetryService(pipeline), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.ClientTelemetryStub(channel), exporter, clock  # type: ignore[no-untyped-call]
    await server.stop(None)


async def test_a_client_gets_its_subscription_and_pushes_a_librdkafka_payload(
    served: tuple[pb_grpc.ClientTelemetryStub, InMemoryExporter, FakeClock],
) -> None:
    stub, exporter, clock = served
    got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=METADATA)
    assert got.error_code == Errors.NONE
    assert len(got.client_instance_id) == 16
    assert got.client_instance_id != bytes(16)
    assert list(got.requested_metrics) == ["org.apache.kafka."]
    assert list(got.accepted_compression_types) == [4, 3, 1, 2]
    assert (got.push_interval_ms, got.telemetry_max_bytes, got.delta_temporality) == (1000, 1048576, True)
    clock.advance(1000)
    pushed = await stub.PushTelemetry(
        pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            compression_type=4,
            metrics=FIXTURE.read_bytes(),
        ),
        metadata=METADATA,
    )
    assert (pushed.error_code, pushed.throttle_time_ms) == (Errors.NONE, 0)
    [landed] = exporter.pushes
    c = landed.context
    assert c.client_instance_id == UUID(bytes=got.client_instance_id)
    assert (c.client_id, c.client_software_name, c.client_source_address) == (
        "rdkafka",
        "librdkafka",
        "127.0.0.1",
    )
    assert c.client_source_port is not None


async def test_errors_travel_in_the_response_not_as_grpc_failures(
    served: tuple[pb_grpc.ClientTelemetryStub, InMemoryExporter, FakeClock],
) -> None:
    stub, _, _ = served
    bad_id = await stub.GetTelemetrySubscriptions(
        pb.GetTelemetrySubscriptionsRequest(client_instance_id=b"short")
    )
    assert bad_id.error_code == Errors.INVALID_REQUEST
    zero = await stub.PushTelemetry(pb.PushTelemetryRequest(client_instance_id=bytes(16), metrics=b"x"))
    assert zero.error_code == Errors.INVALID_REQUEST  # G-7: a zero id cannot push
    got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
    wrong = await stub.PushTelemetry(
        pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id, subscription_id=got.subscription_id + 1
        )
    )
    assert wrong.error_code == Errors.UNKNOWN_SUBSCRIPTION_ID
