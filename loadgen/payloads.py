"""What a simulated librdkafka client sends, pure (no I/O, no clock): the metric catalogue of
librdkafka 2.16 (``PRODUCER_METRICS``, ``CONSUMER_METRICS``), ``ClientMetricsModel`` evolving their
values from a seeded ``random.Random``, KIP-714's metric filter (``is_requested``), the OTLP
``MetricsData`` they push (``build_metrics_data``), its compression and the first-push jitter.
"""

from __future__ import annotations

import gzip
import math
import random
from collections.abc import Mapping, Sequence
from typing import Final, Literal, NamedTuple

import cramjam
import lz4.frame
import zstandard
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from subscriptions import (
    CompressionType,
    Errors,
)

Target = Literal["grpc", "http", "otlp"]
CompressionChoice = Literal["auto", "zstd", "lz4", "gzip", "snappy", "none"]

DEFAULT_GRPC_ADDRESS: Final = "localhost:4317"
DEFAULT_HTTP_ADDRESS: Final = "localhost:4318"
DEFAULT_OTLP_INTERVAL_MS: Final = 30_000
"""The OTLP target's export interval when ``--interval-ms`` is not given (the sink's default
subscription interval)."""
DEFAULT_PUSH_INTERVAL_MS: Final = 300_000
"""What a Kafka client uses when a Get answers no usable interval (TEL-25)."""
SOFTWARE_NAME: Final = "librdkafka"
SOFTWARE_VERSION: Final = "2.16.0"
SUPPORTED_COMPRESSION: Final = (
    CompressionType.ZSTD,
    CompressionType.LZ4,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.NONE,
)
_COMPRESSION_NAMES: Final[Mapping[str, CompressionType]] = {c.name.lower(): c for c in SUPPORTED_COMPRESSION}
_RETRY_AGAIN_NOW: Final = frozenset({Errors.UNKNOWN_SUBSCRIPTION_ID, Errors.UNSUPPORTED_COMPRESSION_TYPE})
_RETRY_LATER: Final = frozenset({Errors.THROTTLING_QUOTA_EXCEEDED, Errors.TELEMETRY_TOO_LARGE})
_ACCEPTED_OUTCOMES: Final = frozenset({"NONE", "OK"})
_NS_PER_MS: Final = 1_000_000


# --------------------------------------------------------------------------------------------------
# 1. Payloads (pure)


class MetricSpec(NamedTuple):
    """One metric a Kafka client pushes: a gauge (``as_double`` or ``as_int``) or a monotonic sum.

    ``low``/``high`` bound the simulated value (gauges) or the growth per collection (sums);
    ``per_node`` metrics have one data point per broker, with the ``node.id`` attribute.
    """

    name: str
    description: str
    kind: Literal["gauge", "sum"]
    integer: bool
    low: float
    high: float
    per_node: bool = False


_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "connection.creation.rate": "The rate of connections established per second.",
    "connection.creation.total": "The total number of connections established.",
    "node.request.latency.avg": "The average request latency in ms for a node.",
    "node.request.latency.max": "The maximum request latency in ms for a node.",
    "produce.throttle.time.avg": "The average throttle time in ms for a node.",
    "produce.throttle.time.max": "The maximum throttle time in ms for a node.",
    "record.queue.time.avg": "The average time in ms a record spends in the producer queue.",
    "record.queue.time.max": "The maximum time in ms a record spends in the producer queue.",
    "request.latency.avg": "The average request latency in ms for produce requests.",
    "request.latency.max": "The maximum request latency in ms for produce requests.",
    "coordinator.assigned.partitions": "The number of partitions currently assigned to this consumer.",
    "coordinator.rebalance.latency.avg": "The average rebalance latency in ms for the consumer coordinator.",
    "coordinator.rebalance.latency.max": "The maximum rebalance latency in ms for the consumer coordinator.",
    "coordinator.rebalance.latency.total": "The total rebalance latency in ms for the consumer coordinator.",
    "fetch.manager.fetch.latency.avg": "The average fetch latency in ms for the fetch manager.",
    "fetch.manager.fetch.latency.max": "The maximum fetch latency in ms for the fetch manager.",
    "poll.idle.ratio.avg": "The average ratio of idle to poll for a consumer.",
    "coordinator.commit.latency.avg": "The average commit latency in ms for the consumer coordinator.",
    "coordinator.commit.latency.max": "The maximum commit latency in ms for the consumer coordinator.",
}
"""librdkafka's metric descriptions, by name after the ``org.apache.kafka.<kind>.`` prefix."""

_Row = tuple[str, Literal["gauge", "sum"], bool, float, float]


def _specs(prefix: str, rows: Sequence[_Row]) -> tuple[MetricSpec, ...]:
    return tuple(
        MetricSpec(
            prefix + suffix, _DESCRIPTIONS[suffix], kind, integer, low, high, suffix.startswith("node.")
        )
        for suffix, kind, integer, low, high in rows
    )


# name after the prefix, kind, as_int (else as_double), value range (sums: growth per collection)
PRODUCER_METRICS: Final = _specs(
    "org.apache.kafka.producer.",
    (
        ("connection.creation.rate", "gauge", False, 0, 0.2),
        ("connection.creation.total", "sum", True, 0, 1),
        ("node.request.latency.avg", "gauge", False, 0.5, 40),
        ("node.request.latency.max", "gauge", True, 1, 80),
        ("produce.throttle.time.avg", "gauge", False, 0, 0),
        ("produce.throttle.time.max", "gauge", True, 0, 0),
        ("record.queue.time.avg", "gauge", False, 0, 4),
        ("record.queue.time.max", "gauge", True, 0, 8),
        ("request.latency.avg", "gauge", False, 0, 30),
        ("request.latency.max", "gauge", True, 0, 60),
    ),
)
"""What librdkafka 2.16 pushes for a producer (and for an AdminClient, which it reports as one)."""

CONSUMER_METRICS: Final = _specs(
    "org.apache.kafka.consumer.",
    (
        ("connection.creation.rate", "gauge", False, 0, 0.2),
        ("connection.creation.total", "sum", True, 0, 1),
        ("node.request.latency.avg", "gauge", False, 0.5, 30),
        ("node.request.latency.max", "gauge", True, 1, 60),
        ("coordinator.assigned.partitions", "gauge", True, 0, 12),
        ("coordinator.rebalance.latency.avg", "gauge", False, 0, 50),
        ("coordinator.rebalance.latency.max", "gauge", True, 0, 100),
        ("coordinator.rebalance.latency.total", "sum", True, 0, 3),
        ("fetch.manager.fetch.latency.avg", "gauge", False, 1, 500),
        ("fetch.manager.fetch.latency.max", "gauge", True, 1, 510),
        ("poll.idle.ratio.avg", "gauge", False, 0.9, 1),
        ("coordinator.commit.latency.avg", "gauge", False, 0, 20),
        ("coordinator.commit.latency.max", "gauge", True, 0, 40),
    ),
)
"""What librdkafka 2.16 pushes for a consumer (its ``node.id`` -1 data points are the bootstrap
connection)."""

CLIENT_KINDS: Final[Mapping[str, tuple[MetricSpec, ...]]] = {
    "producer": PRODUCER_METRICS,
    "consumer": CONSUMER_METRICS,
}


class MetricPoint(NamedTuple):
    """One data point to send: the metric, its ``node.id`` (None: no attribute) and its value."""

    spec: MetricSpec
    node_id: int | None
    value: int | float


class ClientIdentity(NamedTuple):
    """Who a simulated client is: the headers it sends and the resource and scope of its payloads."""

    number: int
    kind: str
    client_id: str
    resource_attributes: Mapping[str, str]
    scope_name: str


def client_identity(index: int, kind: str, prefix: str = "loadgen") -> ClientIdentity:
    """Client number ``index`` of the fleet. Like librdkafka: consumers carry their ``group_id`` as a
    resource attribute, some producers a ``transactional_id``; the scope is ``<client.id>#<kind>-1``."""
    client_id = f"{prefix}-{kind}-{index:04d}"
    attributes: dict[str, str] = {}
    if kind == "consumer":
        attributes["group_id"] = f"{prefix}-group-{index % 4}"
    elif index % 3 == 0:
        attributes["transactional_id"] = f"{prefix}-txn-{index:04d}"
    return ClientIdentity(index, kind, client_id, attributes, f"{client_id}#{kind}-1")


class ClientMetricsModel:
    """The evolving metric values of one client: gauges drawn afresh at each collection, sums growing.

    ``collect`` returns every data point; sums are the increase since the previous collection when
    ``delta`` is set, else the running total. Deterministic for a given ``rng``.
    """

    def __init__(
        self, specs: Sequence[MetricSpec], rng: random.Random, *, bootstrap_node: bool = False
    ) -> None:
        self.specs = tuple(specs)
        self.rng = rng
        brokers = tuple(range(1, rng.randint(1, 3) + 1))
        # a librdkafka consumer also reports its bootstrap connection, as node -1
        self.node_ids: tuple[int, ...] = (*brokers, -1) if bootstrap_node else brokers
        self._totals: dict[tuple[str, int | None], int] = {}
        self._reported: dict[tuple[str, int | None], int] = {}

    def reset_baselines(self) -> None:
        """A new subscription: the next delta counts from the running totals (TEL-25)."""
        self._reported = dict(self._totals)

    def collect(self, *, delta: bool) -> list[MetricPoint]:
        return [
            MetricPoint(spec, node_id, self._value(spec, (spec.name, node_id), delta))
            for spec in self.specs
            for node_id in (self.node_ids if spec.per_node else (None,))
        ]

    def _value(self, spec: MetricSpec, key: tuple[str, int | None], delta: bool) -> int | float:
        if spec.kind == "sum":
            total = self._totals.get(key, 0) + round(self.rng.uniform(spec.low, spec.high))
            self._totals[key] = total
            if not delta:
                return total
            value = total - self._reported.get(key, 0)
            self._reported[key] = total
            return value
        drawn = self.rng.uniform(spec.low, spec.high)
        return math.ceil(drawn) if spec.integer else round(drawn, 3)


def is_requested(name: str, requested: Sequence[str]) -> bool:
    """KIP-714's filter, as a Kafka client applies it (TEL-25): ``[]`` sends nothing, exactly ``["*"]``
    sends everything, otherwise a metric is sent iff its name starts with a requested prefix (so
    ``[""]`` sends everything too)."""
    if len(requested) == 1 and requested[0] == "*":
        return True
    return any(name.startswith(prefix) for prefix in requested)


def select_metrics(points: Sequence[MetricPoint], requested: Sequence[str]) -> list[MetricPoint]:
    """The points of the metrics the subscription asks for."""
    return [p for p in points if is_requested(p.spec.name, requested)]


def _attribute(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def build_metrics_data(
    points: Sequence[MetricPoint],
    *,
    resource_attributes: Mapping[str, str],
    scope_name: str,
    scope_version: str = SOFTWARE_VERSION,
    start_time_unix_nano: int,
    time_unix_nano: int,
    delta_temporality: bool,
) -> MetricsData:
    """The OTLP payload in librdkafka's shape: one resource, one scope, one ``Metric`` per data point;
    gauges with ``as_double`` or ``as_int``; ``*.total`` metrics monotonic sums, delta or cumulative."""
    temporality = (
        AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
        if delta_temporality
        else AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    )
    metrics = []
    for point in points:
        attributes = [] if point.node_id is None else [_attribute("node.id", point.node_id)]
        data_point = NumberDataPoint(
            start_time_unix_nano=start_time_unix_nano, time_unix_nano=time_unix_nano, attributes=attributes
        )
        if point.spec.integer:
            data_point.as_int = int(point.value)
        else:
            data_point.as_double = float(point.value)
        spec = point.spec
        if spec.kind == "sum":
            data = Sum(data_points=[data_point], aggregation_temporality=temporality, is_monotonic=True)
            metrics.append(Metric(name=spec.name, description=spec.description, sum=data))
        else:
            metrics.append(
                Metric(name=spec.name, description=spec.description, gauge=Gauge(data_points=[data_point]))
            )
    resource = ResourceMetrics(
        scope_metrics=[
            ScopeMetrics(scope=InstrumentationScope(name=scope_name, version=scope_version), metrics=metrics)
        ]
    )
    resource.resource.attributes.extend(_attribute(k, v) for k, v in resource_attributes.items())
    return MetricsData(resource_metrics=[resource])


def choose_compression(accepted: Sequence[int], override: CompressionChoice = "auto") -> CompressionType:
    """The codec of a push: ``override`` unless ``auto``; else, like a Kafka client, the first type in the
    subscription's ``accepted_compression_types`` the loadgen supports, NONE if there is none (TEL-25)."""
    if override != "auto":
        return _COMPRESSION_NAMES[override]
    for code in accepted:
        if code in SUPPORTED_COMPRESSION:
            return CompressionType(code)
    return CompressionType.NONE


def compress(data: bytes, compression: CompressionType) -> bytes:
    """``data`` compressed as a Kafka client compresses telemetry (``ingest.push.codec.decompress`` undoes
    it): a gzip stream, a raw snappy block (librdkafka's form), an LZ4 frame, a zstd frame."""
    if compression is CompressionType.GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression is CompressionType.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if compression is CompressionType.LZ4:
        return bytes(lz4.frame.compress(data))
    if compression is CompressionType.ZSTD:
        return bytes(zstandard.ZstdCompressor().compress(data))
    return data


def first_push_delay_ms(interval_ms: int, rng: random.Random) -> int:
    """When a client pushes first after a new subscription: ``round(U[0.5, 1.5) x interval)`` (TEL-25),
    so a fleet started at once spreads its pushes over the interval."""
    return round((0.5 + rng.random()) * interval_ms)


# --------------------------------------------------------------------------------------------------
