"""Admission control on real servers: over server.max_concurrent_requests every RPC is answered at
once with a wait its clients retry after, on both ports, and the OpenTelemetry SDK does retry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters import ExportResult, InMemoryExporter, TelemetryPush
from ingest.proto import client_telemetry_pb2 as pb
from ingest.push.admission import Admission
from ingest.push.pipeline import TelemetryPipeline
from ingest.wire import GET_PATH, OTLP_METRICS_PATH, PUSH_PATH
from subscriptions import Errors
from tests.support.clock import FakeClock
from tests.support.otlp import resource_payload, sdk_metrics
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import Endpoints, serve_both

pytestmark = pytest.mark.integration

PROTOBUF = {"Content-Type": "application/x-protobuf"}


class GatedExporter(InMemoryExporter):
    """Lands nothing until ``gate`` opens: requests pile up inside the sink, a fault no client can
    cause on purpose. ``busy`` is set once ``capacity`` exports are waiting."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.busy = asyncio.Event()
        self.capacity = capacity
        self.waiting = 0

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.waiting += 1
        if self.waiting >= self.capacity:
            self.busy.set()
        await self.gate.wait()
        return await super().export(push)


class SignallingAdmission(Admission):
    """Admission that says when it has refused a request."""

    def __init__(self, max_in_flight: int, retry_after_ms: int) -> None:
        super().__init__(max_in_flight, retry_after_ms)
        self.has_refused = asyncio.Event()

    def try_enter(self) -> bool:
        admitted = super().try_enter()
        if not admitted:
            self.has_refused.set()
        return admitted


@dataclass
class Overloaded:
    endpoints: Endpoints
    pipeline: TelemetryPipeline
    exporter: GatedExporter
    admission: SignallingAdmission
    blocked: list[asyncio.Task[tuple[grpc.StatusCode, bytes, dict[str, str | bytes]]]]


@pytest.fixture
async def overloaded(request: pytest.FixtureRequest) -> AsyncIterator[Overloaded]:
    """A sink with ``limit`` (the test's parameter, default 2) exports stuck in its exporter."""
    limit, retry_ms = getattr(request, "param", (2, 1500))
    exporter = GatedExporter(limit)
    admission = SignallingAdmission(limit, retry_ms)
    pipeline = kafka_pipeline(FakeClock(), exporter, admission=admission)
    async with serve_both(pipeline) as endpoints:
        blocked = [asyncio.create_task(endpoints.otlp_export(resource_payload())) for _ in range(limit)]
        await exporter.busy.wait()
        yield Overloaded(endpoints, pipeline, exporter, admission, blocked)
        exporter.gate.set()
        await asyncio.gather(*blocked)


async def test_over_the_limit_every_rpc_on_both_ports_is_answered_with_a_retry_delay(
    overloaded: Overloaded,
) -> None:
    endpoints = overloaded.endpoints
    status, _, trailers = await endpoints.otlp_export(resource_payload())
    assert status is grpc.StatusCode.UNAVAILABLE  # retried by every OTLP SDK, with or without RetryInfo
    assert RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.ToMilliseconds() == 1500
    assert Status.FromString(trailers["grpc-status-details-bin"]).details[0].Is(RetryInfo.DESCRIPTOR)
    otlp_http = await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=PROTOBUF)
    assert (otlp_http.status_code, otlp_http.headers["Retry-After"]) == (503, "2")
    # KIP-714: a code Kafka clients retry at their next interval (PD-12), with the throttle time
    got = await endpoints.stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
    assert (got.error_code, got.throttle_time_ms) == (Errors.THROTTLING_QUOTA_EXCEEDED, 1500)
    pushed = await endpoints.stub.PushTelemetry(
        pb.PushTelemetryRequest(client_instance_id=bytes(15) + b"\x07")
    )
    assert (pushed.error_code, pushed.throttle_time_ms) == (Errors.THROTTLING_QUOTA_EXCEEDED, 1500)
    for path in (GET_PATH, PUSH_PATH):
        answer = await endpoints.http.post(path, json={"client_instance_id": "0" * 32})
        assert answer.status_code == 200
        assert (answer.json()["error"], answer.json()["throttle_time_ms"]) == (
            "THROTTLING_QUOTA_EXCEEDED",
            1500,
        )
        assert answer.headers["Retry-After"] == "2"
    assert overloaded.admission.refused == 6
    assert overloaded.pipeline.manager.instance_count == 0  # refused before the core: nothing recorded


async def test_slots_come_back_when_requests_finish(overloaded: Overloaded) -> None:
    overloaded.exporter.gate.set()
    assert [status for status, _, _ in await asyncio.gather(*overloaded.blocked)] == [grpc.StatusCode.OK] * 2
    assert overloaded.admission.in_flight == 0
    assert (await overloaded.endpoints.otlp_export(resource_payload()))[0] is grpc.StatusCode.OK
    assert len(overloaded.exporter.pushes) == 3


@pytest.mark.parametrize("overloaded", [(1, 20)], indirect=True)
async def test_the_otel_sdk_grpc_exporter_treats_an_overload_answer_as_retryable(
    overloaded: Overloaded,
) -> None:
    port = overloaded.endpoints.grpc_port
    sdk = OTLPMetricExporter(
        endpoint=f"127.0.0.1:{port}", insecure=True, headers=(("x-kafka-client-id", "sdk"),)
    )
    try:
        exported = asyncio.create_task(asyncio.to_thread(sdk.export, sdk_metrics("checkout")))
        await overloaded.admission.has_refused.wait()  # its first attempt was refused...
        overloaded.exporter.gate.set()  # ...and once the sink has room again, its retry lands
        assert await exported is MetricExportResult.SUCCESS
    finally:
        sdk.shutdown()
    assert [p.context.client_id for p in overloaded.exporter.pushes if p.context.client_id] == ["sdk"]
