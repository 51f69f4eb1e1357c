"""Bronze data for the Spark tests: pushes with real payloads, landed by the real Delta exporter.

- ``kafka_pushes``: Kafka-client-shaped payloads from the loadgen's model (``loadgen``): producer
  and consumer metric sets, sums and gauges, delta or cumulative per client, one client restarting
  (a new start time, its sums from zero), two quota entities.
- ``sdk_pushes``: what the OpenTelemetry Python SDK collects, encoded by its OTLP encoder: a counter,
  an up-down counter, an explicit-bucket histogram, an exponential histogram and a gauge, cumulative,
  plus a summary built by hand (the SDK has none).
- ``land``: the pushes through ``DeltaLandingExporter`` into a bronze shard.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping, Sequence

from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Metric,
    MetricsData,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from exporters import (
    DeltaLandingExporter,
    ExportResult,
    PushContext,
    QuotaSample,
    QuotaSampleRecorder,
    TelemetryPush,
)
from loadgen import CONSUMER_METRICS, PRODUCER_METRICS, ClientMetricsModel, build_metrics_data

START_MS = 1_795_300_000_000
"""2026-11-21T22:26:40Z"""
_NS = 1_000_000


def context(
    instance: int, received_ms: int, *, user: str = "alice", client_id: str | None = None
) -> PushContext:
    return PushContext(
        client_instance_id=uuid.UUID(int=instance + 1),
        subscription_id=1,
        received_ms=received_ms,
        principal=f"User:{user}",
        client_id=client_id or f"client-{instance}",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        client_source_address="127.0.0.1",
        client_source_port=40000 + instance,
        quota_tags={"user": user, "client-id": ""},
        compression_type=0,
    )


def kafka_pushes(
    clients: int = 4, pushes: int = 12, interval_ms: int = 30_000, start_ms: int = START_MS, seed: int = 7
) -> list[TelemetryPush]:
    """``clients`` clients pushing ``pushes`` times each; even clients delta, odd ones cumulative;
    client 1 restarts halfway; clients 0-1 are ``User:alice``'s, the others ``User:bob``'s."""
    out = []
    for c in range(clients):
        rng = random.Random(seed + c)
        specs = PRODUCER_METRICS if c % 2 == 0 else CONSUMER_METRICS
        model = ClientMetricsModel(specs, rng)
        delta = c % 2 == 0
        started = start_ms - 60_000
        for k in range(pushes):
            at = start_ms + k * interval_ms + c * 1000
            if c == 1 and k == pushes // 2:
                model, started = ClientMetricsModel(specs, rng), at - 1000  # the client restarts
            data = build_metrics_data(
                model.collect(delta=delta),
                resource_attributes={"client_rack": f"rack-{c % 2}"},
                scope_name=f"client-{c}",
                start_time_unix_nano=started * _NS,
                time_unix_nano=at * _NS,
                delta_temporality=delta,
            )
            user = "alice" if c < 2 else "bob"
            out.append(TelemetryPush(context(c, at + 5, user=user), data.SerializeToString()))
    return out


def _summary(at_ms: int, count: int) -> Metric:
    point = SummaryDataPoint(
        start_time_unix_nano=(START_MS - 60_000) * _NS,
        time_unix_nano=at_ms * _NS,
        count=count,
        sum=2.5 * count,
    )
    for quantile, value in ((0.5, 2.0), (0.99, 9.0 + count)):
        q = point.quantile_values.add()
        q.quantile, q.value = quantile, value
    return Metric(name="app.request.latency.summary", unit="ms", summary=Summary(data_points=[point]))


def sdk_pushes(collections: int = 3, instance: int = 10) -> list[TelemetryPush]:
    """One push per collection of an SDK meter (its own clock: the points are stamped now)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create({"service.name": "orders", "service.instance.id": "orders-1"}),
        metric_readers=[reader],
        views=[
            View(instrument_name="app.payload.size", aggregation=ExponentialBucketHistogramAggregation(20))
        ],
    )
    meter = provider.get_meter("kafka-app", "1.0")
    counter = meter.create_counter("app.records.sent")
    updown = meter.create_up_down_counter("app.queue.depth")
    latency = meter.create_histogram("app.request.latency", unit="ms")
    size = meter.create_histogram("app.payload.size", unit="By")
    gauge = meter.create_gauge("app.buffer.available")
    out = []
    for k in range(collections):
        for i in range(5):
            counter.add(3 + i, {"topic": "orders"})
            updown.add(2 if (i + k) % 3 else -1, {"topic": "orders"})
            latency.record(1.5 * (i + 1) * (k + 1), {"topic": "orders"})
            size.record(100.0 + 37 * i + 1000 * k)
            gauge.set(1000 - 10 * i - k)
        collected = reader.get_metrics_data()
        assert collected is not None
        data = MetricsData(resource_metrics=encode_metrics(collected).resource_metrics)
        at_ms = data.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0].time_unix_nano // _NS
        data.resource_metrics[0].scope_metrics[0].metrics.append(_summary(at_ms, 10 * (k + 1)))
        out.append(TelemetryPush(context(instance, at_ms + 5, user="carol"), data.SerializeToString()))
    provider.shutdown()
    return out


async def _land(
    pushes: Sequence[TelemetryPush], table_uri: str, writer_id: str, storage_options: Mapping[str, str] | None
) -> None:
    exporter = DeltaLandingExporter(
        table_uri, writer_id=writer_id, max_batch_latency_ms=0, storage_options=storage_options
    )
    await exporter.start()
    try:
        results = await asyncio.gather(*(exporter.export(p) for p in pushes))
    finally:
        await exporter.shutdown()
    assert set(results) <= {ExportResult.SUCCESS}


def land(
    pushes: Sequence[TelemetryPush],
    data_root: str,
    replica: str = "r1",
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Land the pushes in ``<data_root>/telemetry_pushes/<replica>`` with the real exporter."""
    asyncio.run(
        _land(pushes, f"{data_root}/telemetry_pushes/{replica}", f"writer-{replica}", storage_options)
    )


def land_quota_samples(
    snapshots: Sequence[tuple[int, Sequence[QuotaSample]]], data_root: str, replica: str = "r1"
) -> None:
    """Land ``(sampled at ms, samples)`` snapshots in ``<data_root>/quota_samples/<replica>`` with the
    sink's own recorder."""

    async def record() -> None:
        recorder = QuotaSampleRecorder(f"{data_root}/quota_samples/{replica}", writer_id=f"writer-{replica}")
        for at_ms, samples in snapshots:
            assert await recorder.record(samples, at_ms)

    asyncio.run(record())
