"""``telemetry-sink loadgen``: a simulated fleet of KIP-714 clients in one asyncio process.

This module owns the load generator and nothing else: what a simulated client sends, when it sends it,
how it reacts to each answer, and the summary of a run. It has three layers:

1. **Payloads, pure** (no I/O, no clock): ``PRODUCER_METRICS`` and ``CONSUMER_METRICS`` are the metrics
   librdkafka 2.16 pushes (names, descriptions, kinds and the ``node.id`` attribute, as captured from
   real clients); ``ClientMetricsModel`` evolves their values from a seeded ``random.Random``;
   ``is_requested`` is KIP-714's filter (``[]`` none, exactly ``["*"]`` all, else name prefixes, so
   ``[""]`` is all); ``build_metrics_data`` makes the OTLP ``MetricsData`` (one ``Metric`` per data
   point, as librdkafka does; sums delta or cumulative as the subscription says);
   ``choose_compression`` / ``compress`` pick and apply the codec (the sink's ``ingest.codec`` undoes it);
   ``first_push_delay_ms`` is the clients' first-push jitter (``U[0.5, 1.5) x interval``).
2. **Clients**: ``Kip714Client`` runs one client's life over a ``Kip714Transport``: Get, pushes at the
   subscription's interval, reactions per TEL-25 / PD-12 (docs/rules.md) (117 and 76: re-Get at once; 89 and
   118: re-Get after the interval; 42, 87, 35 and unknown codes: telemetry off for good), every
   ``throttle_time_ms`` honoured before the next request, a terminating push at the end.
   ``OtlpClient`` is an OTLP exporter: no Get, an export every interval, RetryInfo honoured. Time comes
   from an injected ``ingest.quotas.Clock`` (tests use a fake one); latencies from an injected timer.
3. **Transports and the run**: ``GrpcTransport`` (the ``ClientTelemetry`` service), ``HttpTransport``
   (the KIP-714 JSON endpoints), ``OtlpGrpcTransport`` (``MetricsService/Export``), each plaintext or
   TLS (mTLS with a client certificate) and with a bearer token as ``Credentials`` say; ``run_loadgen``
   checks the target is reachable, runs the fleet until the duration ends (or ``stop`` is set) and
   returns a ``Summary``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import math
import random
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol

import cramjam
import grpc
import grpc.aio
import httpx
import lz4.frame
import zstandard
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
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

from ingest.http_app import GET_PATH, PUSH_PATH
from ingest.identity import (
    CLIENT_ID_HEADER,
    INSTANCE_ID_HEADER,
    SOFTWARE_NAME_HEADER,
    SOFTWARE_VERSION_HEADER,
    parse_instance_id,
)
from ingest.otlp_grpc import METRICS_SERVICE, RETRY_INFO_KEY, STATUS_DETAILS_KEY
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.quotas import Clock, SystemClock
from subscriptions import (
    CompressionType,
    Errors,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)

__all__ = [
    "CLIENT_KINDS",
    "CONSUMER_METRICS",
    "DEFAULT_GRPC_ADDRESS",
    "DEFAULT_HTTP_ADDRESS",
    "DEFAULT_OTLP_INTERVAL_MS",
    "PRODUCER_METRICS",
    "SOFTWARE_NAME",
    "SOFTWARE_VERSION",
    "SUPPORTED_COMPRESSION",
    "ClientIdentity",
    "ClientMetricsModel",
    "Credentials",
    "GrpcTransport",
    "HttpTransport",
    "Kip714Client",
    "Kip714Transport",
    "LoadStats",
    "LoadgenOptions",
    "MetricPoint",
    "MetricSpec",
    "OtlpAnswer",
    "OtlpClient",
    "OtlpGrpcTransport",
    "OtlpTransport",
    "RequestRecord",
    "Summary",
    "TargetUnreachableError",
    "TransportError",
    "build_metrics_data",
    "choose_compression",
    "client_identity",
    "compress",
    "first_push_delay_ms",
    "is_requested",
    "run_loadgen",
    "select_metrics",
]

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
    """``data`` compressed as a Kafka client compresses telemetry (``ingest.codec.decompress`` undoes
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
# 2. Clients


class TransportError(Exception):
    """A request got no protocol answer (connection refused, reset, timed out, HTTP 5xx)."""


class TargetUnreachableError(Exception):
    """The target did not answer before the run started."""


class OtlpAnswer(NamedTuple):
    """An OTLP export's answer: the gRPC status name and the wait the sink asked for (RetryInfo)."""

    status: str
    retry_after_ms: int = 0


class Kip714Transport(Protocol):
    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        """GetTelemetrySubscriptions; raise ``TransportError`` when there is no answer."""
        ...

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        """PushTelemetry; raise ``TransportError`` when there is no answer."""
        ...


class OtlpTransport(Protocol):
    async def export(self, client: ClientIdentity, instance_id: uuid.UUID, body: bytes) -> OtlpAnswer:
        """One ``MetricsService/Export``; raise ``TransportError`` when there is no answer."""
        ...


class RequestRecord(NamedTuple):
    """One request a simulated client made, as the summary (and tests) see it.

    ``outcome`` is the Kafka error name (``NONE``, ``UNKNOWN_SUBSCRIPTION_ID``, ...), for OTLP the gRPC
    status name (``OK``, ``RESOURCE_EXHAUSTED``), or ``TRANSPORT_ERROR``. ``sent_ms``/``answered_ms``
    are the loadgen clock's; ``throttle_ms`` is the wait the answer asked for.
    """

    client: int
    kind: Literal["get", "push"]
    sent_ms: int
    answered_ms: int
    outcome: str
    throttle_ms: int = 0
    terminating: bool = False
    bytes_sent: int = 0
    bytes_uncompressed: int = 0
    compression: int | None = None
    latency_ms: float = 0.0
    subscription_id: int | None = None
    instance_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run did. ``render()`` is the text the CLI prints; ``as_dict()`` its JSON."""

    target: str
    address: str
    clients: int
    elapsed_s: float
    gets: int
    gets_by_outcome: Mapping[str, int]
    pushes: int
    pushes_accepted: int
    pushes_by_outcome: Mapping[str, int]
    terminating_sent: int
    terminating_accepted: int
    throttled: int
    throttle_ms_total: int
    bytes_sent: int
    bytes_uncompressed: int
    compression: Mapping[str, int]
    push_latency_p50_ms: float | None
    push_latency_p99_ms: float | None
    clients_stopped: int
    transport_errors: int
    first_transport_error: str | None

    @property
    def pushes_per_s(self) -> float:
        return self.pushes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "pushes_per_s": round(self.pushes_per_s, 3)}

    def render(self) -> str:
        def counts(by: Mapping[str, int]) -> str:
            return ", ".join(f"{name} {n}" for name, n in sorted(by.items(), key=lambda kv: -kv[1])) or "-"

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f} ms"

        lines = [
            f"telemetry-sink loadgen: {self.clients} clients -> {self.target} {self.address}, "
            f"{self.elapsed_s:.1f} s",
            f"  gets               {self.gets} ({counts(self.gets_by_outcome)})",
            f"  pushes             {self.pushes} sent, {self.pushes_accepted} accepted, "
            f"{self.pushes_per_s:.1f} pushes/s",
            f"  pushes by outcome  {counts(self.pushes_by_outcome)}",
            f"  terminating        {self.terminating_sent} sent, {self.terminating_accepted} accepted",
            f"  throttled          {self.throttled} answers, {self.throttle_ms_total} ms in total",
            f"  bytes sent         {self.bytes_sent} ({self.bytes_uncompressed} before compression; "
            f"{counts(self.compression)})",
            f"  push latency       p50 {ms(self.push_latency_p50_ms)}, p99 {ms(self.push_latency_p99_ms)}",
            f"  clients stopped    {self.clients_stopped} (telemetry turned off by a fatal error code)",
            f"  transport errors   {self.transport_errors}"
            + (f" (first: {self.first_transport_error})" if self.first_transport_error else ""),
        ]
        return "\n".join(lines)


def _percentile(sorted_values: Sequence[float], percent: float) -> float | None:
    """Nearest-rank percentile."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class LoadStats:
    """Collects every ``RequestRecord`` (passing each to ``observer``) and sums them up."""

    def __init__(self, observer: Callable[[RequestRecord], None] | None = None) -> None:
        self.observer = observer
        self.gets: Counter[str] = Counter()
        self.pushes: Counter[str] = Counter()
        self.compression: Counter[str] = Counter()
        self.terminating_sent = 0
        self.terminating_accepted = 0
        self.throttled = 0
        self.throttle_ms_total = 0
        self.bytes_sent = 0
        self.bytes_uncompressed = 0
        self.latencies_ms: list[float] = []
        self.clients_stopped = 0
        self.transport_errors = 0
        self.first_transport_error: str | None = None

    def record(self, record: RequestRecord) -> None:
        if record.kind == "get":
            self.gets[record.outcome] += 1
        else:
            self.pushes[record.outcome] += 1
            self.bytes_sent += record.bytes_sent
            self.bytes_uncompressed += record.bytes_uncompressed
            if record.compression is not None:
                self.compression[CompressionType(record.compression).name.lower()] += 1
            if record.outcome != "TRANSPORT_ERROR":
                self.latencies_ms.append(record.latency_ms)
            if record.terminating:
                self.terminating_sent += 1
                self.terminating_accepted += record.outcome in _ACCEPTED_OUTCOMES
        if record.throttle_ms > 0:
            self.throttled += 1
            self.throttle_ms_total += record.throttle_ms
        if self.observer is not None:
            self.observer(record)

    def transport_error(self, error: BaseException) -> None:
        self.transport_errors += 1
        if self.first_transport_error is None:
            self.first_transport_error = str(error) or type(error).__name__

    def summary(self, target: str, address: str, clients: int, elapsed_ms: int) -> Summary:
        latencies = sorted(self.latencies_ms)
        return Summary(
            target=target,
            address=address,
            clients=clients,
            elapsed_s=elapsed_ms / 1000,
            gets=sum(self.gets.values()),
            gets_by_outcome=dict(self.gets),
            pushes=sum(self.pushes.values()),
            pushes_accepted=sum(n for outcome, n in self.pushes.items() if outcome in _ACCEPTED_OUTCOMES),
            pushes_by_outcome=dict(self.pushes),
            terminating_sent=self.terminating_sent,
            terminating_accepted=self.terminating_accepted,
            throttled=self.throttled,
            throttle_ms_total=self.throttle_ms_total,
            bytes_sent=self.bytes_sent,
            bytes_uncompressed=self.bytes_uncompressed,
            compression=dict(self.compression),
            push_latency_p50_ms=_percentile(latencies, 50),
            push_latency_p99_ms=_percentile(latencies, 99),
            clients_stopped=self.clients_stopped,
            transport_errors=self.transport_errors,
            first_transport_error=self.first_transport_error,
        )


def _outcome(error_code: int) -> str:
    try:
        return Errors(error_code).name
    except ValueError:
        return str(error_code)


class _ClientBase:
    """What every simulated client shares: its clock, its throttle, the waits and the records."""

    def __init__(
        self,
        identity: ClientIdentity,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        close_timeout_ms: int,
        timer: Callable[[], float],
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.stats = stats
        self.rng = rng
        self.close_timeout_ms = close_timeout_ms
        self.timer = timer
        self.model = ClientMetricsModel(
            CLIENT_KINDS[identity.kind], rng, bootstrap_node=identity.kind == "consumer"
        )
        self.throttle_until = 0
        self.started_ns = clock.now_ms() * _NS_PER_MS
        self.last_collection_ns = self.started_ns

    async def _wait_until(self, at_ms: int, stop: asyncio.Event) -> bool:
        """Wait until ``at_ms`` on the clock; False when ``stop`` was set first."""
        if stop.is_set():
            return False
        remaining = at_ms - self.clock.now_ms()
        if remaining <= 0:
            return True
        return not await self.clock.wait(stop, remaining)

    async def _wait_for_throttle_at_close(self) -> bool:
        """Before the last push: wait out a throttle that ends within the close timeout; False if it
        would not (then the last push is not sent, as a client closing with a timeout gives up)."""
        remaining = self.throttle_until - self.clock.now_ms()
        if remaining > self.close_timeout_ms:
            return False
        if remaining > 0:
            await self.clock.wait(asyncio.Event(), remaining)
        return True

    def _throttled(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.throttle_until = max(self.throttle_until, self.clock.now_ms() + throttle_ms)

    def _payload(self, requested: Sequence[str] | None, delta: bool) -> bytes:
        now_ns = self.clock.now_ms() * _NS_PER_MS
        points = self.model.collect(delta=delta)
        if requested is not None:
            points = select_metrics(points, requested)
        data = build_metrics_data(
            points,
            resource_attributes=self._resource_attributes(),
            scope_name=self.identity.scope_name,
            start_time_unix_nano=self.last_collection_ns if delta else self.started_ns,
            time_unix_nano=now_ns,
            delta_temporality=delta,
        )
        self.last_collection_ns = now_ns
        return bytes(data.SerializeToString())

    def _resource_attributes(self) -> Mapping[str, str]:
        return self.identity.resource_attributes


class Kip714Client(_ClientBase):
    """One Kafka client's telemetry, over GetTelemetrySubscriptions and PushTelemetry.

    Reactions (TEL-25, PD-12 in docs/rules.md): a successful Get schedules the first push at
    ``first_push_delay_ms`` and later pushes one interval after the previous push's answer; ``[]``
    requested metrics re-Get after the interval; 117/76 re-Get at once; 89/118 re-Get after the
    interval; INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and unknown codes turn telemetry off
    for the rest of the run; a request without an answer re-Gets after the interval. Every answer's
    ``throttle_time_ms`` delays the next request. At the end: one terminating push if the client holds
    a subscription.
    """

    def __init__(
        self,
        identity: ClientIdentity,
        transport: Kip714Transport,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        compression: CompressionChoice = "auto",
        interval_override_ms: int | None = None,
        close_timeout_ms: int = 5000,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(
            identity, clock=clock, stats=stats, rng=rng, close_timeout_ms=close_timeout_ms, timer=timer
        )
        self.transport = transport
        self.compression_choice: CompressionChoice = compression
        self.interval_override_ms = interval_override_ms
        self.instance_id = uuid.UUID(int=0)
        self.subscription: GetTelemetrySubscriptionsResponse | None = None
        self.interval_ms = DEFAULT_PUSH_INTERVAL_MS
        self.stopped = False

    async def run(self, start_ms: int, deadline_ms: int, stop: asyncio.Event) -> None:
        next_at = start_ms
        while not self.stopped:
            at = max(next_at, self.throttle_until)
            if at >= deadline_ms or not await self._wait_until(at, stop):
                break
            next_at = await (self._get() if self.subscription is None else self._push(terminating=False))
        if not self.stopped:
            await self._wait_until(deadline_ms, stop)
            await self.close()

    async def close(self) -> None:
        """The terminating push, if this client holds a subscription that asks for metrics."""
        if self.stopped or self.subscription is None or not self.subscription.requested_metrics:
            return
        if await self._wait_for_throttle_at_close():
            await self._push(terminating=True)

    async def _get(self) -> int:
        """Send a Get; the time of the next request."""
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.get(self.identity, self.instance_id)
        except TransportError as exc:
            return self._transport_failed("get", sent, exc)
        error = answer.error_code
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "get",
                sent,
                self.clock.now_ms(),
                _outcome(error),
                answer.throttle_time_ms,
                latency_ms=(self.timer() - began) * 1000,
                subscription_id=answer.subscription_id if error == Errors.NONE else None,
                instance_id=answer.client_instance_id if error == Errors.NONE else None,
            )
        )
        self._throttled(answer.throttle_time_ms)
        now = self.clock.now_ms()
        if error != Errors.NONE:
            if error in _RETRY_LATER:
                return now + self.interval_ms
            return self._stop()
        self.instance_id = answer.client_instance_id
        interval = self.interval_override_ms or answer.push_interval_ms
        self.interval_ms = interval if interval > 0 else DEFAULT_PUSH_INTERVAL_MS
        if not answer.requested_metrics:
            self.subscription = None  # nothing to collect: ask again after the interval
            return now + self.interval_ms
        if self.subscription is None or answer.delta_temporality != self.subscription.delta_temporality:
            self.model.reset_baselines()
            self.last_collection_ns = now * _NS_PER_MS
        self.subscription = answer
        return now + first_push_delay_ms(self.interval_ms, self.rng)

    async def _push(self, *, terminating: bool) -> int:
        """Send a push; the time of the next request."""
        subscription = self.subscription
        assert subscription is not None
        raw = self._payload(subscription.requested_metrics, subscription.delta_temporality)
        compression = choose_compression(subscription.accepted_compression_types, self.compression_choice)
        try:
            payload = compress(raw, compression)
        except Exception:  # a client falls back to NONE when compression fails (TEL-19)
            payload, compression = raw, CompressionType.NONE
        request = PushTelemetryRequest(
            self.instance_id, subscription.subscription_id, terminating, int(compression), payload
        )
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.push(self.identity, request)
        except TransportError as exc:
            return self._transport_failed("push", sent, exc, request, len(raw))
        error = answer.error_code
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "push",
                sent,
                self.clock.now_ms(),
                _outcome(error),
                answer.throttle_time_ms,
                terminating,
                len(payload),
                len(raw),
                int(compression),
                (self.timer() - began) * 1000,
                subscription.subscription_id,
                self.instance_id,
            )
        )
        self._throttled(answer.throttle_time_ms)
        now = self.clock.now_ms()
        if error == Errors.NONE:
            return now + self.interval_ms
        if error in _RETRY_AGAIN_NOW:
            self.subscription = None
            return now
        if error in _RETRY_LATER:
            self.subscription = None
            return now + self.interval_ms
        return self._stop()

    def _transport_failed(
        self,
        kind: Literal["get", "push"],
        sent: int,
        exc: TransportError,
        request: PushTelemetryRequest | None = None,
        raw_size: int = 0,
    ) -> int:
        self.stats.transport_error(exc)
        payload = (request.metrics or b"") if request is not None else b""
        self.stats.record(
            RequestRecord(
                self.identity.number,
                kind,
                sent,
                self.clock.now_ms(),
                "TRANSPORT_ERROR",
                terminating=request is not None and request.terminating,
                bytes_sent=len(payload),
                bytes_uncompressed=raw_size,
                compression=request.compression_type if request is not None else None,
            )
        )
        self.subscription = None
        return self.clock.now_ms() + self.interval_ms

    def _stop(self) -> int:
        """A code a Kafka client treats as fatal: telemetry off for the life of this client."""
        self.stopped = True
        self.stats.clients_stopped += 1
        return 0


class OtlpClient(_ClientBase):
    """An OTLP metrics exporter holding a Kafka client's metrics: no Get, one export per interval
    (cumulative sums, as the OpenTelemetry SDKs default to), the first one jittered like a Kafka
    client's, a wait asked for by RetryInfo honoured, and a last export at the end."""

    def __init__(
        self,
        identity: ClientIdentity,
        transport: OtlpTransport,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        interval_ms: int = DEFAULT_OTLP_INTERVAL_MS,
        compression: CompressionType = CompressionType.NONE,
        close_timeout_ms: int = 5000,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(
            identity, clock=clock, stats=stats, rng=rng, close_timeout_ms=close_timeout_ms, timer=timer
        )
        self.transport = transport
        self.interval_ms = interval_ms
        self.compression = compression  # gRPC's own encoding: sizes are counted before it
        self.instance_id = uuid.UUID(int=rng.getrandbits(128), version=4)

    def _resource_attributes(self) -> Mapping[str, str]:
        return {"service.name": self.identity.client_id, **self.identity.resource_attributes}

    async def run(self, start_ms: int, deadline_ms: int, stop: asyncio.Event) -> None:
        next_at = start_ms + first_push_delay_ms(self.interval_ms, self.rng)
        while True:
            at = max(next_at, self.throttle_until)
            if at >= deadline_ms or not await self._wait_until(at, stop):
                break
            await self._export(final=False)
            next_at = self.clock.now_ms() + self.interval_ms
        await self._wait_until(deadline_ms, stop)
        if await self._wait_for_throttle_at_close():
            await self._export(final=True)

    async def _export(self, *, final: bool) -> None:
        body = self._payload(None, delta=False)
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.export(self.identity, self.instance_id, body)
        except TransportError as exc:
            self.stats.transport_error(exc)
            answer = OtlpAnswer("TRANSPORT_ERROR")
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "push",
                sent,
                self.clock.now_ms(),
                answer.status,
                answer.retry_after_ms,
                final,
                len(body),
                len(body),
                int(self.compression),
                (self.timer() - began) * 1000,
                instance_id=self.instance_id,
            )
        )
        self._throttled(answer.retry_after_ms)


# --------------------------------------------------------------------------------------------------
# 3. Transports and the run


def _headers(client: ClientIdentity) -> tuple[tuple[str, str], ...]:
    return (
        (CLIENT_ID_HEADER, client.client_id),
        (SOFTWARE_NAME_HEADER, SOFTWARE_NAME),
        (SOFTWARE_VERSION_HEADER, SOFTWARE_VERSION),
    )


_CHANNEL_OPTIONS: Final = (("grpc.use_local_subchannel_pool", 1),)
"""Each channel its own connection, as each Kafka client has its own (gRPC shares them otherwise)."""


@dataclass(frozen=True)
class Credentials:
    """How the simulated clients reach a secured sink: TLS trusting ``tls_ca_file`` (with a client
    certificate for mTLS), and a bearer token. All off: plaintext, anonymous."""

    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    token: str | None = None

    @property
    def tls(self) -> bool:
        return self.tls_ca_file is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Headers (gRPC metadata) every request carries."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        if not self.tls:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, self._grpc_credentials(), options=options)

    def _grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as file:
                return file.read()

        return grpc.ssl_channel_credentials(
            read(self.tls_ca_file), read(self.tls_key_file), read(self.tls_cert_file)
        )

    def http_verify(self) -> ssl.SSLContext | bool:
        if not self.tls:
            return True
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context


class _GrpcChannels:
    """One gRPC channel (so one connection) per simulated client."""

    def __init__(self, address: str, timeout_s: float, credentials: Credentials = Credentials()) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.credentials = credentials
        self._auth = credentials.metadata()
        self._channels: dict[int, grpc.aio.Channel] = {}

    def channel(self, index: int) -> grpc.aio.Channel:
        channel = self._channels.get(index)
        if channel is None:
            channel = self.credentials.channel(self.address, options=_CHANNEL_OPTIONS)
            self._channels[index] = channel
        return channel

    async def check(self, connect_timeout_s: float) -> None:
        channel = self.credentials.channel(self.address)
        try:
            await asyncio.wait_for(channel.channel_ready(), connect_timeout_s)
        except TimeoutError:
            raise TargetUnreachableError(
                f"cannot reach the gRPC target {self.address} within {connect_timeout_s:g} s"
            ) from None
        finally:
            await channel.close()

    async def close(self) -> None:
        await asyncio.gather(*(channel.close() for channel in self._channels.values()))
        self._channels.clear()


class GrpcTransport(_GrpcChannels):
    """The sink's ``ClientTelemetry`` gRPC service (``ingest/proto/client_telemetry.proto``)."""

    def __init__(self, address: str, timeout_s: float, credentials: Credentials = Credentials()) -> None:
        super().__init__(address, timeout_s, credentials)
        self._stubs: dict[int, Any] = {}

    def _stub(self, index: int) -> Any:
        stub = self._stubs.get(index)
        if stub is None:
            stub = pb_grpc.ClientTelemetryStub(self.channel(index))  # type: ignore[no-untyped-call]
            self._stubs[index] = stub
        return stub

    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        stub = self._stub(client.number)
        request = pb.GetTelemetrySubscriptionsRequest(client_instance_id=instance_id.bytes)
        try:
            r = await stub.GetTelemetrySubscriptions(
                request, metadata=(*_headers(client), *self._auth), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=r.throttle_time_ms,
            error_code=r.error_code,
            client_instance_id=uuid.UUID(bytes=r.client_instance_id)
            if len(r.client_instance_id) == 16
            else uuid.UUID(int=0),
            subscription_id=r.subscription_id,
            accepted_compression_types=tuple(r.accepted_compression_types),
            push_interval_ms=r.push_interval_ms,
            telemetry_max_bytes=r.telemetry_max_bytes,
            delta_temporality=r.delta_temporality,
            requested_metrics=tuple(r.requested_metrics),
        )

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        stub = self._stub(client.number)
        message = pb.PushTelemetryRequest(
            client_instance_id=request.client_instance_id.bytes if request.client_instance_id else b"",
            subscription_id=request.subscription_id,
            terminating=request.terminating,
            compression_type=request.compression_type,
            metrics=request.metrics or b"",
        )
        try:
            r = await stub.PushTelemetry(
                message, metadata=(*_headers(client), *self._auth), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
        return PushTelemetryResponse(r.throttle_time_ms, r.error_code)


def _retry_after_ms(trailers: grpc.aio.Metadata | None) -> int:
    """The wait an OTLP answer asks for: ``RetryInfo`` in its own trailer or inside the status details."""
    for key, value in trailers or ():
        if not isinstance(value, bytes):
            continue
        if key == RETRY_INFO_KEY:
            return int(RetryInfo.FromString(value).retry_delay.ToMilliseconds())
        if key == STATUS_DETAILS_KEY:
            for detail in Status.FromString(value).details:
                info = RetryInfo()
                if detail.Unpack(info):
                    return int(info.retry_delay.ToMilliseconds())
    return 0


class OtlpGrpcTransport(_GrpcChannels):
    """OTLP ``MetricsService/Export`` over gRPC (``compression`` gzip or none, gRPC's own encoding)."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        compression: CompressionType,
        credentials: Credentials = Credentials(),
    ) -> None:
        super().__init__(address, timeout_s, credentials)
        self.compression = grpc.Compression.Gzip if compression is CompressionType.GZIP else None

    async def export(self, client: ClientIdentity, instance_id: uuid.UUID, body: bytes) -> OtlpAnswer:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel(client.number).unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        metadata = (*_headers(client), (INSTANCE_ID_HEADER, str(instance_id)), *self._auth)
        try:
            await call(body, metadata=metadata, timeout=self.timeout_s, compression=self.compression)
        except grpc.aio.AioRpcError as exc:
            retry_ms = _retry_after_ms(exc.trailing_metadata())
            if (
                exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                and not retry_ms
            ):
                raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
            return OtlpAnswer(exc.code().name, retry_ms)
        return OtlpAnswer("OK")


class HttpTransport:
    """The sink's KIP-714 HTTP endpoints: Get as JSON, Push as raw bytes with the other fields as query
    parameters (``ingest/http_app.py``)."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        max_connections: int = 100,
        credentials: Credentials = Credentials(),
    ) -> None:
        scheme = "https" if credentials.tls else "http"
        self.base_url = address if "://" in address else f"{scheme}://{address}"
        self.address = address
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            verify=credentials.http_verify(),
            headers=dict(credentials.metadata()),
        )

    async def check(self, connect_timeout_s: float) -> None:
        try:
            await self._client.get("/healthz", timeout=connect_timeout_s)
        except httpx.HTTPError as exc:
            raise TargetUnreachableError(
                f"cannot reach the HTTP target {self.base_url}: {exc or type(exc).__name__}"
            ) from None

    async def _post(
        self, path: str, client: ClientIdentity, headers: Mapping[str, str] | None = None, **kwargs: Any
    ) -> Mapping[str, Any]:
        try:
            response = await self._client.post(
                path, headers={**dict(_headers(client)), **(headers or {})}, **kwargs
            )
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 500 or not isinstance(body, dict) or "error_code" not in body:
            raise TransportError(f"HTTP {response.status_code} from {path}")
        return body

    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        known = instance_id.int != 0
        body = await self._post(
            GET_PATH, client, json={"client_instance_id": str(instance_id) if known else None}
        )
        returned = body.get("client_instance_id")
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=int(body.get("throttle_time_ms", 0)),
            error_code=int(body["error_code"]),
            client_instance_id=parse_instance_id(returned) or uuid.UUID(int=0),
            subscription_id=int(body.get("subscription_id", 0)),
            accepted_compression_types=tuple(body.get("accepted_compression_types", ())),
            push_interval_ms=int(body.get("push_interval_ms", 0)),
            telemetry_max_bytes=int(body.get("telemetry_max_bytes", 0)),
            delta_temporality=bool(body.get("delta_temporality", False)),
            requested_metrics=tuple(body.get("requested_metrics", ())),
        )

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        params = {
            "client_instance_id": str(request.client_instance_id or ""),
            "subscription_id": str(request.subscription_id),
            "terminating": "true" if request.terminating else "false",
            "compression_type": str(request.compression_type),
        }
        body = await self._post(
            PUSH_PATH,
            client,
            params=params,
            content=request.metrics or b"",
            headers={"Content-Type": "application/octet-stream"},
        )
        return PushTelemetryResponse(int(body.get("throttle_time_ms", 0)), int(body["error_code"]))

    async def close(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True, slots=True)
class LoadgenOptions:
    """One run: how many clients, how long, where to, and how they behave."""

    clients: int = 10
    duration_s: float = 20.0
    target: Target = "grpc"
    grpc_address: str = DEFAULT_GRPC_ADDRESS
    http_address: str = DEFAULT_HTTP_ADDRESS
    seed: int = 0
    compression: CompressionChoice = "auto"
    interval_ms: int | None = None
    """KIP-714 targets: push at this interval instead of the subscription's (pushes faster than the
    subscription allows are answered THROTTLING_QUOTA_EXCEEDED); OTLP: the export interval."""
    kinds: tuple[str, ...] = ("producer", "consumer")
    client_id_prefix: str = "loadgen"
    ramp_up_s: float = 0.0
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    close_timeout_s: float = 5.0
    credentials: Credentials = Credentials()

    @property
    def address(self) -> str:
        return self.http_address if self.target == "http" else self.grpc_address

    def validate(self) -> list[str]:
        """Every problem, empty when the options are usable."""
        problems = []
        if self.clients < 1:
            problems.append("--clients must be at least 1")
        if not self.duration_s > 0:
            problems.append("--duration must be positive")
        if self.target not in ("grpc", "http", "otlp"):
            problems.append(f"--target must be grpc, http or otlp, not {self.target!r}")
        if self.compression != "auto" and self.compression not in _COMPRESSION_NAMES:
            problems.append(f"unknown --compression {self.compression!r}")
        if self.target == "otlp" and self.compression not in ("auto", "gzip", "none"):
            problems.append("the otlp target compresses with gzip or none (gRPC's own encodings)")
        if self.interval_ms is not None and self.interval_ms < 1:
            problems.append("--interval-ms must be positive")
        tls = self.credentials
        if (tls.tls_cert_file is None) != (tls.tls_key_file is None):
            problems.append("--tls-cert-file and --tls-key-file go together")
        if tls.tls_cert_file is not None and not tls.tls:
            problems.append("a client certificate needs --tls-ca-file (the sink's CA)")
        problems += [f"unknown client kind {kind!r}" for kind in self.kinds if kind not in CLIENT_KINDS]
        if not self.kinds:
            problems.append("at least one client kind is needed")
        for name in ("ramp_up_s", "connect_timeout_s", "request_timeout_s", "close_timeout_s"):
            if getattr(self, name) < 0:
                problems.append(f"--{name[:-2].replace('_', '-')} must not be negative")
        return problems


def _client_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


async def run_loadgen(
    options: LoadgenOptions,
    *,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    observer: Callable[[RequestRecord], None] | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> Summary:
    """Run the fleet against the target until ``options.duration_s`` has passed on ``clock`` (or ``stop``
    is set: the clients then send their terminating pushes at once). Raise ``TargetUnreachableError``
    when the target does not answer before the run."""
    problems = options.validate()
    if problems:
        raise ValueError("; ".join(problems))
    clock = clock or SystemClock()
    stop = stop or asyncio.Event()
    stats = LoadStats(observer)
    timeout = options.request_timeout_s
    transport: GrpcTransport | HttpTransport | OtlpGrpcTransport
    otlp_compression = CompressionType.GZIP if options.compression == "gzip" else CompressionType.NONE
    credentials = options.credentials
    if options.target == "grpc":
        transport = GrpcTransport(options.grpc_address, timeout, credentials)
    elif options.target == "http":
        connections = min(options.clients, 100)
        transport = HttpTransport(options.http_address, timeout, connections, credentials)
    else:
        transport = OtlpGrpcTransport(options.grpc_address, timeout, otlp_compression, credentials)
    try:
        await transport.check(options.connect_timeout_s)
        start = clock.now_ms()
        deadline = start + round(options.duration_s * 1000)
        close_timeout_ms = round(options.close_timeout_s * 1000)
        runs = []
        for index in range(options.clients):
            kind = options.kinds[index % len(options.kinds)]
            identity = client_identity(index, kind, options.client_id_prefix)
            rng = _client_rng(options.seed, index)
            begin = start + round(options.ramp_up_s * 1000 * index / options.clients)
            if isinstance(transport, OtlpGrpcTransport):
                otlp = OtlpClient(
                    identity,
                    transport,
                    clock=clock,
                    stats=stats,
                    rng=rng,
                    interval_ms=options.interval_ms or DEFAULT_OTLP_INTERVAL_MS,
                    compression=otlp_compression,
                    close_timeout_ms=close_timeout_ms,
                    timer=timer,
                )
                runs.append(otlp.run(begin, deadline, stop))
            else:
                kip714 = Kip714Client(
                    identity,
                    transport,
                    clock=clock,
                    stats=stats,
                    rng=rng,
                    compression=options.compression,
                    interval_override_ms=options.interval_ms,
                    close_timeout_ms=close_timeout_ms,
                    timer=timer,
                )
                runs.append(kip714.run(begin, deadline, stop))
        await asyncio.gather(*runs)
        elapsed = clock.now_ms() - start
    finally:
        await transport.close()
    return stats.summary(options.target, options.address, options.clients, elapsed)
