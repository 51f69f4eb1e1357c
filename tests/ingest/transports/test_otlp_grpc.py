"""The OTLP gRPC receiver on a real loopback server, driven by the OpenTelemetry SDK's exporter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import uuid4

import grpc
import grpc.aio
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters import ExportResult, InMemoryExporter
from ingest.push.pipeline import EXPORTER_RETRY_MS, TelemetryPipeline
from ingest.transports.otlp_grpc import otlp_metrics_handler
from ingest.wire import METRICS_SERVICE
from quotas import ClientQuotaEntity
from tests.support.clock import FakeClock
from tests.support.otlp import resource_payload, sdk_metrics
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration


@dataclass
class Served:
    port: int
    channel: grpc.aio.Channel
    pipeline: TelemetryPipeline
    exporter: InMemoryExporter
    clock: FakeClock

    async def export(
        self, body: bytes, metadata: tuple[tuple[str, str], ...] = ()
    ) -> tuple[grpc.StatusCode, dict[str, str | bytes]]:
        method: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        call = method(body, metadata=metadata)
        try:
            await call
        except grpc.aio.AioRpcError as error:
            return error.code(), dict(error.trailing_metadata() or ())
        return grpc.StatusCode.OK, {}


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    clock = FakeClock()
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((otlp_metrics_handler(pipeline),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Served(port, channel, pipeline, exporter, clock)
    await server.stop(None)


async def test_the_sdk_grpc_exporter_lands_pushes_under_one_derived_instance(served: Served) -> None:
    exporter = OTLPMetricExporter(
        endpoint=f"127.0.0.1:{served.port}", insecure=True, headers=(("x-kafka-client-id", "app-1"),)
    )
    for _ in range(2):
        result = await asyncio.to_thread(exporter.export, sdk_metrics("checkout"))
        assert result is MetricExportResult.SUCCESS
    exporter.shutdown()
    first, second = served.exporter.pushes
    assert first.context.client_instance_id == second.context.client_instance_id
    assert (first.context.client_id, first.context.subscription_id) == ("app-1", 0)
    landed = MetricsData.FromString(first.payload)
    [metric] = landed.resource_metrics[0].scope_metrics[0].metrics
    assert metric.name == "org.apache.kafka.producer.record.send.total"


async def test_the_instance_comes_from_the_header_then_the_resource_attribute(served: Served) -> None:
    in_resource, in_header = uuid4(), uuid4()
    body = resource_payload(client_instance_id=str(in_resource))
    assert (await served.export(body))[0] is grpc.StatusCode.OK
    assert (await served.export(body, (("x-kafka-client-instance-id", str(in_header)),)))[
        0
    ] is grpc.StatusCode.OK
    assert [p.context.client_instance_id for p in served.exporter.pushes] == [in_resource, in_header]
    status, _ = await served.export(body, (("x-kafka-client-instance-id", "not-a-uuid"),))
    assert status is grpc.StatusCode.INVALID_ARGUMENT


async def test_QUO_14_an_over_quota_client_is_held_with_retry_info_and_others_are_not(served: Served) -> None:
    served.pipeline.quotas.alter(ClientQuotaEntity(None, "greedy"), "producer_byte_rate", 100)
    body = resource_payload(**{"service.name": "x" * 2000})
    greedy, polite = (("x-kafka-client-id", "greedy"),), (("x-kafka-client-id", "polite"),)
    assert (await served.export(body, greedy))[0] is grpc.StatusCode.OK  # recorded, then held
    status, trailers = await served.export(body, greedy)
    assert status is grpc.StatusCode.RESOURCE_EXHAUSTED
    retry = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    delay_ms = retry.retry_delay.ToMilliseconds()
    assert delay_ms > 0
    details = Status.FromString(trailers["grpc-status-details-bin"])
    assert details.details[0].Is(RetryInfo.DESCRIPTOR)
    assert (await served.export(body, polite))[0] is grpc.StatusCode.OK
    assert len(served.exporter.pushes) == 2  # the held push was neither landed nor recorded
    served.clock.advance(delay_ms)
    assert (await served.export(body, greedy))[0] is grpc.StatusCode.OK


async def test_PD_12_a_bad_payload_is_invalid_argument_and_the_server_keeps_serving(served: Served) -> None:
    status, trailers = await served.export(b"\xff\xff not protobuf")
    assert status is grpc.StatusCode.INVALID_ARGUMENT
    assert "google.rpc.retryinfo-bin" not in trailers
    assert (await served.export(resource_payload()))[0] is grpc.StatusCode.OK


async def test_PD_12_a_storage_failure_is_unavailable_with_retry_info(served: Served) -> None:
    served.exporter.result = ExportResult.RETRYABLE
    status, trailers = await served.export(resource_payload())
    assert status is grpc.StatusCode.UNAVAILABLE
    retry = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.ToMilliseconds() == EXPORTER_RETRY_MS


async def test_F2_a_parse_bomb_is_resource_exhausted_without_retry_info_and_others_carry_on(
    served: Served,
) -> None:
    bomb = b"\x0a\x00" * (1 << 20)  # a million empty ResourceMetrics in 2 MiB
    status, trailers = await served.export(bomb)
    assert status is grpc.StatusCode.RESOURCE_EXHAUSTED  # permanent for OTLP clients: no RetryInfo
    assert "google.rpc.retryinfo-bin" not in trailers
    assert "grpc-status-details-bin" not in trailers
    assert served.exporter.pushes == []
    assert (await served.export(resource_payload()))[0] is grpc.StatusCode.OK
