"""partial_success on both OTLP receivers: invalid points are refused, the valid rest lands in Delta."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from deltalake import DeltaTable
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from exporters import InMemoryExporter
from exporters.delta.landing import DeltaLandingExporter
from ingest.proto import client_telemetry_pb2 as pb
from ingest.push.otlp_points import drop_invalid_points
from ingest.wire import OTLP_METRICS_PATH
from subscriptions import Errors
from tests.support.clock import FakeClock
from tests.support.otlp import partly_invalid_payload
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import Endpoints, serve_both

pytestmark = pytest.mark.integration

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def points(data: MetricsData) -> dict[str, int]:
    metrics = data.resource_metrics[0].scope_metrics[0].metrics
    return {m.name: len(getattr(m, m.WhichOneof("data") or "gauge").data_points) for m in metrics}


@pytest.fixture
async def delta(tmp_path: Path) -> AsyncIterator[tuple[Endpoints, DeltaLandingExporter]]:
    exporter = DeltaLandingExporter(str(tmp_path / "telemetry_pushes"), writer_id="t", max_batch_rows=1)
    await exporter.start()
    async with serve_both(kafka_pipeline(FakeClock(), exporter)) as endpoints:
        yield endpoints, exporter
    await exporter.shutdown()


async def test_both_otlp_transports_land_the_valid_points_and_count_the_rest(
    delta: tuple[Endpoints, DeltaLandingExporter],
) -> None:
    endpoints, exporter = delta
    payload = partly_invalid_payload()
    status, reply, _ = await endpoints.otlp_export(payload)
    assert status is grpc.StatusCode.OK
    over_grpc = ExportMetricsServiceResponse.FromString(reply).partial_success
    assert over_grpc.rejected_data_points == 2
    assert "3 bucket_counts for 3 explicit_bounds (x2)" in over_grpc.error_message
    as_protobuf = await endpoints.http.post(OTLP_METRICS_PATH, content=payload, headers=PROTOBUF)
    assert as_protobuf.status_code == 200
    assert ExportMetricsServiceResponse.FromString(as_protobuf.content).partial_success == over_grpc
    as_json = await endpoints.http.post(
        OTLP_METRICS_PATH,
        content=json_format.MessageToJson(ExportMetricsServiceRequest.FromString(payload)),
        headers={"Content-Type": "application/json"},
    )
    assert as_json.status_code == 200
    assert json.loads(as_json.text)["partialSuccess"]["rejectedDataPoints"] == "2"  # int64 in OTLP JSON
    await exporter.force_flush()
    rows = DeltaTable(exporter.table_uri).to_pyarrow_table(columns=["payload"]).to_pylist()
    assert len(rows) == 3
    for row in rows:
        landed = MetricsData.FromString(row["payload"])
        assert points(landed) == {"org.apache.kafka.gauge": 1, "org.apache.kafka.latency": 1}
        assert not drop_invalid_points(landed)  # what is stored is valid


async def test_an_export_without_invalid_points_has_no_partial_success_and_lands_as_sent() -> None:
    exporter = InMemoryExporter()
    async with serve_both(kafka_pipeline(FakeClock(), exporter)) as endpoints:
        valid = MetricsData.FromString(partly_invalid_payload())
        drop_invalid_points(valid)
        body = valid.SerializeToString()
        status, reply, _ = await endpoints.otlp_export(body)
        assert status is grpc.StatusCode.OK
        assert not ExportMetricsServiceResponse.FromString(reply).HasField("partial_success")
        assert exporter.pushes[0].payload == body


async def test_an_export_of_nothing_but_invalid_points_lands_nothing() -> None:
    exporter = InMemoryExporter()
    data = MetricsData.FromString(partly_invalid_payload())
    del data.resource_metrics[0].scope_metrics[0].metrics[0]  # the gauge
    del data.resource_metrics[0].scope_metrics[0].metrics[0].histogram.data_points[1]  # the good point
    async with serve_both(kafka_pipeline(FakeClock(), exporter)) as endpoints:
        response = await endpoints.http.post(
            OTLP_METRICS_PATH, content=data.SerializeToString(), headers=PROTOBUF
        )
    assert response.status_code == 200
    assert ExportMetricsServiceResponse.FromString(response.content).partial_success.rejected_data_points == 2
    assert exporter.pushes == []


async def test_kip714_pushes_stay_all_or_nothing() -> None:
    clock = FakeClock()
    exporter = InMemoryExporter()
    async with serve_both(kafka_pipeline(clock, exporter)) as endpoints:
        got = await endpoints.stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
        clock.advance(1000)
        pushed = await endpoints.stub.PushTelemetry(
            pb.PushTelemetryRequest(
                client_instance_id=got.client_instance_id,
                subscription_id=got.subscription_id,
                metrics=partly_invalid_payload(),
            )
        )
        assert pushed.error_code == Errors.NONE
    assert exporter.pushes[0].payload == partly_invalid_payload()  # landed as the client sent it


async def test_F2_a_gzip_parse_bomb_over_http_is_413_without_retry_after() -> None:
    exporter = InMemoryExporter()
    bomb = gzip.compress(b"\x0a\x00" * (10 << 20))  # 20 MiB of empty ResourceMetrics in ~20 KB
    async with serve_both(kafka_pipeline(FakeClock(), exporter)) as endpoints:
        response = await endpoints.http.post(
            OTLP_METRICS_PATH, content=bomb, headers={**PROTOBUF, "Content-Encoding": "gzip"}
        )
    assert response.status_code == 413
    assert "Retry-After" not in response.headers
    assert "limits.max_resource_metrics" in Status.FromString(response.content).message
    assert exporter.pushes == []
