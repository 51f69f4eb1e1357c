"""The gRPC ClientTelemetry service on a real loopback server, driven by the generated stub; client
text in the metadata checked before the pipeline, on the KIP-714 RPCs and on the OTLP export that
shares its ``AuthenticatedRequest`` (F4, F21)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import grpc.aio
import pytest

from exporters import InMemoryExporter
from ingest.limits import DEFAULT_LIMITS
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.transports.grpc_service import ClientTelemetryService
from ingest.wire import METRICS_SERVICE
from subscriptions import Errors
from tests.support.clock import FakeClock
from tests.support.kip714_grpc import librdkafka_push
from tests.support.otlp import resource_payload
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import serve_both

pytestmark = pytest.mark.integration

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
        librdkafka_push(got),
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


LONG_ID = "c" * (DEFAULT_LIMITS.max_client_id_chars + 1)
LONG_NAME = "n" * (DEFAULT_LIMITS.max_software_chars + 1)


@pytest.mark.parametrize(
    "metadata",
    [
        (("x-kafka-client-id", LONG_ID),),
        (("x-kafka-client-software-name", LONG_NAME),),
        (("x-kafka-client-software-version", LONG_NAME),),
    ],
)
async def test_F4_client_text_over_its_limit_is_invalid_request_in_the_response(
    served: tuple[pb_grpc.ClientTelemetryStub, InMemoryExporter, FakeClock],
    metadata: tuple[tuple[str, str], ...],
) -> None:
    """What a Kafka client reads: the Kafka code, the gRPC status OK; nothing reaches the pipeline."""
    stub, exporter, clock = served
    refused = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=metadata)
    assert (refused.error_code, refused.client_instance_id) == (Errors.INVALID_REQUEST, b"")
    got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=METADATA)
    clock.advance(1000)
    push = librdkafka_push(got)
    assert (await stub.PushTelemetry(push, metadata=metadata)).error_code == Errors.INVALID_REQUEST
    assert exporter.pushes == []
    assert (await stub.PushTelemetry(push, metadata=METADATA)).error_code == Errors.NONE  # its own are served


async def test_F21_binary_metadata_that_is_not_utf8_is_ignored(
    served: tuple[pb_grpc.ClientTelemetryStub, InMemoryExporter, FakeClock],
) -> None:
    stub, _, _ = served
    metadata = (*METADATA, ("grpc-trace-bin", b"\xff\xfe\x00"))
    got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=metadata)
    assert got.error_code == Errors.NONE


async def test_F4_an_otlp_export_with_client_text_over_its_limit_is_invalid_argument_naming_it() -> None:
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(FakeClock(), exporter)
    async with serve_both(pipeline) as endpoints:
        export: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = endpoints.channel.unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await export(resource_payload(), metadata=(("x-kafka-client-software-name", LONG_NAME),))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # not retried by OTLP clients
        assert (refused.value.details() or "").startswith(
            f"x-kafka-client-software-name is {len(LONG_NAME)} characters"
        )
        assert not dict(refused.value.trailing_metadata() or ())  # no RetryInfo
        assert exporter.pushes == []
        assert await export(resource_payload(), metadata=METADATA) == b""  # a well-behaved export lands
        assert len(exporter.pushes) == 1
