"""Forwarding to a real OTLP receiver on loopback, over gRPC and over HTTP."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import grpc
import grpc.aio
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from exporters import ExportResult, OtlpForwardingExporter
from exporters.otlp_forward import retry_after_seconds
from tests.support.otlp import push

pytestmark = pytest.mark.integration


class Collector:
    """A gRPC OTLP metrics receiver whose answers the test scripts."""

    def __init__(self) -> None:
        self.received: list[ExportMetricsServiceRequest] = []
        self.failures: list[grpc.StatusCode] = []
        self.rejected = 0

    async def export(
        self,
        request: ExportMetricsServiceRequest,
        context: grpc.aio.ServicerContext[ExportMetricsServiceRequest, ExportMetricsServiceResponse],
    ) -> ExportMetricsServiceResponse:
        if self.failures:
            await context.abort(self.failures.pop(0), "scripted failure")
        self.received.append(request)
        return ExportMetricsServiceResponse(
            partial_success=ExportMetricsPartialSuccess(rejected_data_points=self.rejected)
        )


@pytest.fixture
async def grpc_collector() -> AsyncIterator[tuple[Collector, int]]:
    collector = Collector()
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.metrics.v1.MetricsService",
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                collector.export,
                request_deserializer=ExportMetricsServiceRequest.FromString,
                response_serializer=ExportMetricsServiceResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield collector, port
    await server.stop(None)


async def _exporter(endpoint: str, **options: object) -> OtlpForwardingExporter:
    exporter = OtlpForwardingExporter(endpoint, initial_backoff_ms=1, max_backoff_ms=2, **options)  # type: ignore[arg-type]
    await exporter.start()
    return exporter


async def test_grpc_forwarding_sends_the_payload_unchanged(grpc_collector: tuple[Collector, int]) -> None:
    collector, port = grpc_collector
    exporter = await _exporter(f"127.0.0.1:{port}")
    p = push(1)
    assert await exporter.export(p) is ExportResult.SUCCESS
    assert collector.received[0].SerializeToString() == p.payload
    await exporter.shutdown()


async def test_grpc_retries_transient_failures(grpc_collector: tuple[Collector, int]) -> None:
    collector, port = grpc_collector
    collector.failures = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED]
    exporter = await _exporter(f"127.0.0.1:{port}")
    assert await exporter.export(push()) is ExportResult.SUCCESS
    assert len(collector.received) == 1
    await exporter.shutdown()


async def test_grpc_gives_up_after_bounded_attempts(grpc_collector: tuple[Collector, int]) -> None:
    collector, port = grpc_collector
    collector.failures = [grpc.StatusCode.UNAVAILABLE] * 10
    exporter = await _exporter(f"127.0.0.1:{port}", max_attempts=3)
    assert await exporter.export(push()) is ExportResult.RETRYABLE
    assert len(collector.failures) == 7  # three attempts
    assert not exporter.health().healthy
    await exporter.shutdown()


async def test_grpc_invalid_argument_is_permanent(grpc_collector: tuple[Collector, int]) -> None:
    collector, port = grpc_collector
    collector.failures = [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAVAILABLE]
    exporter = await _exporter(f"127.0.0.1:{port}")
    assert await exporter.export(push()) is ExportResult.PERMANENT
    assert collector.failures == [grpc.StatusCode.UNAVAILABLE]  # not retried
    await exporter.shutdown()


async def test_grpc_partial_success_is_counted(grpc_collector: tuple[Collector, int]) -> None:
    collector, port = grpc_collector
    collector.rejected = 2
    exporter = await _exporter(f"127.0.0.1:{port}")
    assert await exporter.export(push()) is ExportResult.SUCCESS
    assert exporter.rejected_data_points == 2
    await exporter.shutdown()


async def test_unreachable_collector_is_retryable() -> None:
    exporter = await _exporter("127.0.0.1:1", max_attempts=2, timeout_ms=500)
    assert await exporter.export(push()) is ExportResult.RETRYABLE
    await exporter.shutdown()


class HttpCollector(BaseHTTPRequestHandler):
    statuses: ClassVar[list[int]] = []
    bodies: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.statuses.pop(0) if self.statuses else 200
        type(self).bodies.append((self.path, self.headers["Content-Type"], body))
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        if status == 200:
            self.wfile.write(ExportMetricsServiceResponse().SerializeToString())

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return


@pytest.fixture
def http_collector() -> Iterator[tuple[type[HttpCollector], int]]:
    HttpCollector.statuses, HttpCollector.bodies = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), HttpCollector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield HttpCollector, server.server_address[1]
    server.shutdown()
    server.server_close()


async def test_http_forwarding_posts_protobuf_to_v1_metrics(
    http_collector: tuple[type[HttpCollector], int],
) -> None:
    collector, port = http_collector
    collector.statuses = [503, 429, 200]
    exporter = await _exporter(f"http://127.0.0.1:{port}", protocol="http/protobuf")
    p = push(2)
    assert await exporter.export(p) is ExportResult.SUCCESS
    assert [b[0] for b in collector.bodies] == ["/v1/metrics"] * 3
    assert collector.bodies[-1][1:] == ("application/x-protobuf", p.payload)
    await exporter.shutdown()


async def test_http_400_is_permanent(http_collector: tuple[type[HttpCollector], int]) -> None:
    collector, port = http_collector
    collector.statuses = [400]
    exporter = await _exporter(f"http://127.0.0.1:{port}/v1/metrics", protocol="http/protobuf")
    assert await exporter.export(push()) is ExportResult.PERMANENT
    assert len(collector.bodies) == 1
    await exporter.shutdown()


def test_bad_protocol_is_refused() -> None:
    with pytest.raises(ValueError, match="protocol"):
        OtlpForwardingExporter("x", protocol="carrier-pigeon")  # type: ignore[arg-type]


async def test_grpc_header_names_may_have_capitals(grpc_collector: tuple[Collector, int]) -> None:
    _, port = grpc_collector
    exporter = await _exporter(f"127.0.0.1:{port}", headers={"Authorization": "Bearer t0ken"})
    assert await exporter.export(push()) is ExportResult.SUCCESS
    await exporter.shutdown()


async def test_export_after_shutdown_answers_at_once() -> None:
    exporter = OtlpForwardingExporter("127.0.0.1:1", initial_backoff_ms=60_000)
    await exporter.start()
    await exporter.shutdown()
    assert await exporter.export(push()) is ExportResult.RETRYABLE  # no minute-long backoff
    assert exporter.health().healthy


@pytest.mark.parametrize(
    ("statuses", "result"), [([204], ExportResult.SUCCESS), ([401, 403, 401], ExportResult.RETRYABLE)]
)
async def test_http_2xx_is_success_and_auth_failures_are_ours(
    http_collector: tuple[type[HttpCollector], int], statuses: list[int], result: ExportResult
) -> None:
    collector, port = http_collector
    collector.statuses = statuses
    exporter = await _exporter(f"http://127.0.0.1:{port}", protocol="http/protobuf", max_attempts=3)
    assert await exporter.export(push()) is result
    assert exporter.health().healthy is (result is ExportResult.SUCCESS)
    await exporter.shutdown()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("3", 3.0), ("1.5", 1.5), ("", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 10.0)],
)
def test_retry_after_forms(value: str, seconds: float | None) -> None:
    now = parsedate_to_datetime("Wed, 21 Oct 2015 07:27:50 GMT").timestamp()
    assert retry_after_seconds(value, now) == seconds
