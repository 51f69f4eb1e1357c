"""OTLP exports shaped as the known KIP-714 forwarders build them, around real librdkafka telemetry.

Each builder takes the clients' telemetry (``librdkafka_metrics``: a captured librdkafka push,
decompressed) and labels it the way one forwarder does, attribute names, order and duplicates
included:

- ``confluent_tutorial``: the Confluent tutorial plugin's KIP-714 snake_case resource labels, the
  instance id in Kafka's base64 form, a bare ``principal`` name, appended after what the client sent;
- ``monedula``: ``client_id``, ``kafka.client.principal`` (``User:x``), ``kafka.client.address``,
  ``kafka.node.id`` and the opt-in ``client_instance_id``;
- ``instaclustr``: camelCase ``clientId``, ``clientSoftwareName``, ``clientSoftwareVersion``, no
  instance id;
- ``dotted``: ``client.id``, ``client.instance.id``, ``client.address``;
- ``strimzi_via_collector``: Prometheus labels turned into data-point attributes by a Collector's
  prometheus receiver: one resource (the broker) holding every client's points.

``collector_batch`` merges exports into one request, as an OpenTelemetry Collector's batch
processor does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData, ResourceMetrics

from ingest.push.codec import decompress
from ingest.security.attribution import point_count
from subscriptions.subscription_id import kafka_uuid_string

__all__ = [
    "FIXTURES",
    "FORWARDERS",
    "Client",
    "collector_batch",
    "confluent_tutorial",
    "dotted",
    "instaclustr",
    "librdkafka_metrics",
    "monedula",
    "points_of",
    "strimzi_via_collector",
]

FIXTURES: Final = Path(__file__).resolve().parents[1] / "fixtures" / "librdkafka"


class Client(NamedTuple):
    """A Kafka client as its broker knows it."""

    instance_id: uuid.UUID
    client_id: str
    user: str
    address: str = "10.1.2.3"
    port: int = 40000
    software: tuple[str, str] = ("librdkafka", "2.16.0")

    @property
    def principal(self) -> str:
        return f"User:{self.user}"


def librdkafka_metrics(name: str = "librdkafka-producer-push001-zstd.bin") -> MetricsData:
    """A captured librdkafka push, decompressed and parsed."""
    data = MetricsData()
    data.ParseFromString(decompress((FIXTURES / name).read_bytes(), 4, 1 << 22))
    return data


def _string(key: str, value: str) -> KeyValue:
    attribute = KeyValue(key=key)
    attribute.value.string_value = value
    return attribute


def _labelled(metrics: MetricsData, labels: Sequence[tuple[str, str]]) -> MetricsData:
    """``metrics`` with ``labels`` appended to every resource (after the client's own attributes)."""
    out = MetricsData()
    out.CopyFrom(metrics)
    for resource_metrics in out.resource_metrics:
        resource_metrics.resource.attributes.extend(_string(k, v) for k, v in labels)
    return out


def confluent_tutorial(client: Client, metrics: MetricsData) -> MetricsData:
    return _labelled(
        metrics,
        [
            ("client_instance_id", kafka_uuid_string(client.instance_id)),
            ("client_id", "stale-id"),  # given twice: the later value wins
            ("client_id", client.client_id),
            ("client_software_name", client.software[0]),
            ("client_software_version", client.software[1]),
            ("client_source_address", client.address),
            ("client_source_port", str(client.port)),
            ("principal", client.user),
            ("kafka.cluster.id", "Some4Cluster5Id6Base64x"),
            ("kafka.broker.id", "1"),
        ],
    )


def monedula(client: Client, metrics: MetricsData) -> MetricsData:
    return _labelled(
        metrics,
        [
            ("client_id", client.client_id),
            ("kafka.cluster.id", "Some4Cluster5Id6Base64x"),
            ("kafka.node.id", "2"),
            ("client_instance_id", kafka_uuid_string(client.instance_id)),
            ("kafka.client.principal", client.principal),
            ("kafka.client.address", client.address),
        ],
    )


def instaclustr(client: Client, metrics: MetricsData) -> MetricsData:
    return _labelled(
        metrics,
        [
            ("clientId", client.client_id),
            ("clientSoftwareName", client.software[0]),
            ("clientSoftwareVersion", client.software[1]),
            ("environment", "production"),  # the plugin's static metadata
        ],
    )


def dotted(client: Client, metrics: MetricsData) -> MetricsData:
    return _labelled(
        metrics,
        [
            ("client.id", client.client_id),
            ("client.instance.id", kafka_uuid_string(client.instance_id)),
            ("client.address", client.address),
            ("telemetry.source", "kip714"),
        ],
    )


FORWARDERS: Final[dict[str, Callable[[Client, MetricsData], MetricsData]]] = {
    "confluent_tutorial": confluent_tutorial,
    "monedula": monedula,
    "instaclustr": instaclustr,
    "dotted": dotted,
}


def strimzi_via_collector(clients: Sequence[Client], metrics: MetricsData) -> MetricsData:
    """One resource (the broker's scrape target) holding every client's points, each point labelled
    with its client (``client_instance_id``, ``client_id``, ``principal``, ``client_address``)."""
    out = MetricsData()
    target = out.resource_metrics.add()
    target.resource.attributes.extend([_string("service.name", "kafka-broker-0")])
    scope = target.scope_metrics.add()
    scope.scope.name = "otelcol/prometheusreceiver"
    for source in metrics.resource_metrics:
        for source_scope in source.scope_metrics:
            for metric in source_scope.metrics:
                copy = scope.metrics.add()
                copy.CopyFrom(metric)
                kind = copy.WhichOneof("data")
                if kind is None:
                    continue
                points = getattr(copy, kind).data_points
                originals = list(points)
                del points[:]
                for client in clients:
                    for original in originals:
                        point = points.add()
                        point.CopyFrom(original)
                        point.attributes.extend(
                            [
                                _string("client_instance_id", kafka_uuid_string(client.instance_id)),
                                _string("client_id", client.client_id),
                                _string("principal", client.principal),
                                _string("client_address", client.address),
                            ]
                        )
    return out


def collector_batch(exports: Sequence[MetricsData]) -> bytes:
    """One ``ExportMetricsServiceRequest`` holding every export's resources, in order."""
    request = ExportMetricsServiceRequest()
    for export in exports:
        request.resource_metrics.extend(export.resource_metrics)
    return request.SerializeToString()


def points_of(resource_metrics: Sequence[ResourceMetrics]) -> int:
    return sum(point_count(rm) for rm in resource_metrics)
