"""OTLP payloads and accepted pushes for tests, built with opentelemetry-proto."""

from __future__ import annotations

import uuid

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.export import MetricsData as SdkMetricsData
from opentelemetry.sdk.resources import Resource

from exporters.base import PushContext, TelemetryPush
from tests.support.clock import T0


def metrics_data(
    name: str = "org.apache.kafka.producer.record.send.rate", value: float = 1.5, points: int = 1
) -> bytes:
    """A small OTLP MetricsData with one gauge."""
    data_points = [
        NumberDataPoint(
            time_unix_nano=(T0 + i) * 1_000_000,
            as_double=value + i,
            attributes=[KeyValue(key="node.id", value=AnyValue(int_value=i))],
        )
        for i in range(points)
    ]
    data = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope(name="producer-1#producer-1"),
                        metrics=[Metric(name=name, gauge=Gauge(data_points=data_points))],
                    )
                ]
            )
        ]
    )
    return bytes(data.SerializeToString())


def push(
    n: int = 0, *, payload: bytes | None = None, received_ms: int = T0, **context: object
) -> TelemetryPush:
    """An accepted push from client instance number ``n``."""
    fields: dict[str, object] = {
        "client_instance_id": uuid.UUID(int=n + 2),
        "subscription_id": 422777291,
        "received_ms": received_ms,
        "principal": "User:alice",
        "client_id": f"producer-{n}",
        "client_software_name": "librdkafka",
        "client_software_version": "2.16.0",
        "client_source_address": "127.0.0.1",
        "client_source_port": 50000 + n % 10_000,
        "quota_tags": {"user": "alice", "client-id": ""},
        "compression_type": 4,
    }
    fields.update(context)
    return TelemetryPush(PushContext(**fields), payload if payload is not None else metrics_data(value=n))  # type: ignore[arg-type]


def sdk_metrics(service: str, **attributes: str) -> SdkMetricsData:
    """Metrics as the OpenTelemetry SDK collects them: one counter, one resource."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create({"service.name": service, **attributes}), metric_readers=[reader]
    )
    provider.get_meter("kafka-app").create_counter("org.apache.kafka.producer.record.send.total").add(7)
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    return data


def resource_payload(**attributes: str) -> bytes:
    """An empty MetricsData whose one resource carries ``attributes``."""
    data = MetricsData()
    resource = data.resource_metrics.add().resource
    for key, value in attributes.items():
        attribute = resource.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    return data.SerializeToString()


def partly_invalid_payload() -> bytes:
    """A MetricsData with one valid gauge point and a histogram of two points that break the data model
    (3 bucket counts for 3 bounds), and one valid histogram point."""
    bad = HistogramDataPoint(
        time_unix_nano=T0 * 1_000_000, bucket_counts=[1, 2, 3], explicit_bounds=[1, 2, 3], count=6
    )
    good = HistogramDataPoint(
        time_unix_nano=T0 * 1_000_000, bucket_counts=[1, 2], explicit_bounds=[1], count=3
    )
    histogram = Histogram(
        data_points=[bad, good, bad], aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE
    )
    data = MetricsData.FromString(metrics_data(name="org.apache.kafka.gauge"))
    data.resource_metrics[0].scope_metrics[0].metrics.add(
        name="org.apache.kafka.latency", histogram=histogram
    )
    return bytes(data.SerializeToString())
