"""OTLP payloads and accepted pushes for tests, built with opentelemetry-proto."""

from __future__ import annotations

import uuid

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)

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
