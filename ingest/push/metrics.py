"""``/metrics``: the sink's own sensors in the Prometheus text format.

Read at scrape time (a ``prometheus_client`` collector), on the event loop like every other use of
the engines:

- the subscription core's counters (``telemetry_sink_client_metrics_*``, TEL-24);
- every quota-engine sensor under Kafka's name, by one rule (``kafka_metric_name``): Kafka's metric
  ``(group, name, tags)`` is the gauge ``kafka_server_<group>_<name>`` with its tags as labels, names
  lower-cased and every character but a letter, digit or ``_`` written ``_`` (``client-id`` becomes
  ``client_id``), values unchanged. That is what the Prometheus JMX exporter's default format
  (``lowercaseOutputName: true``) makes of a broker's MBean ``kafka.server:type=<group>,<tags>``
  attribute ``<name>``, so dashboards and alerts over a broker's quota metrics read the sink's:
  ``kafka_server_produce_byte_rate{user,client_id}``, ``kafka_server_request_request_time``,
  ``kafka_server_request_exempt_request_time``, ``kafka_server_controllermutation_tokens``, the
  ``throttle_time`` of each, ``kafka_server_socket_server_metrics_connection_count{listener}``,
  ``kafka_server_produce_queue_size``...;
- the front end's requests (``RequestMetrics``), by ``transport`` (``grpc``, ``http``, ``kafka``) and ``rpc``
  (``GetTelemetrySubscriptions``, ``PushTelemetry``, ``Export`` for OTLP's ``MetricsService/Export``):
  ``telemetry_sink_requests_total`` by the answer's Kafka error ``code`` and ``error`` name (0/NONE
  for a landed OTLP export; 58/SASL_AUTHENTICATION_FAILED for an unknown bearer token; -1 for a
  failure of the sink's own), ``telemetry_sink_request_duration_seconds`` (a histogram, from the first
  byte handled to the answer, waits for holds included), ``telemetry_sink_requests_in_flight`` and
  ``telemetry_sink_requests_max_in_flight`` (admission control); ``telemetry_sink_otlp_repairs_total``
  by ``repair`` (``REPAIRS``: OTLP bodies of raw forwarders taken under ``server.otlp_tolerant_intake``);
  a trusted forwarder's pushes: ``telemetry_sink_forwarded_duplicates_total`` (resent, already stored,
  answered as landed) and ``telemetry_sink_forwarded_over_quota_total`` (left out while the forwarded
  client's own quota throttled it);
- the bookkeeping bounds (``limits``): the answers by quota entity kept between quota snapshots are
  counted for at most ``limits.max_entity_counters`` entities; the answers of any further entity
  are counted under the one entity ``OVERFLOW_TAGS`` (``overflow="true"``) and in
  ``telemetry_sink_entity_counters_overflowed_total``. The quota sensors held for a throttle
  (``holds``, at most ``limits.max_held_clients``; every client whose quota resolves to a held sensor
  is held): ``telemetry_sink_held_clients`` and ``telemetry_sink_holds_refused_total`` (throttles not
  held because that many sensors were). The OTLP instance owners (``instance_owners``):
  ``telemetry_sink_otlp_instance_owners`` (ids bound to a principal) and
  ``telemetry_sink_otlp_instances_unbound_total`` (ids let through unbound: the table was full of
  bindings in use). The
  quota engine keeps sensors for at most ``limits.max_quota_entities`` entities per quota type:
  ``telemetry_sink_quota_entities`` and ``telemetry_sink_quota_entities_evicted_total`` by
  ``quota_type`` (the least recently recorded entity's sensors removed to make room);
- the event loop's lag (``ingest.loop_lag``): ``telemetry_sink_event_loop_lag_seconds`` (a histogram)
  and ``telemetry_sink_event_loop_lag_max_seconds`` (the largest since the previous scrape);
- the request bytes the listeners hold (``ingest.transports.request_memory``):
  ``telemetry_sink_request_memory_held_bytes``, ``telemetry_sink_request_memory_max_bytes``,
  ``telemetry_sink_request_memory_waiting`` (Kafka requests muted for memory) and
  ``telemetry_sink_request_memory_refused_total`` (HTTP requests answered 503 for it).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Final, Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporters import QuotaSample
from ingest.errors import error_name
from ingest.limits import DEFAULT_LIMITS
from ingest.push.admission import Admission
from ingest.push.holds import ClientHolds
from ingest.security.instance_owners import InstanceOwners
from quotas import QuotaManagers
from subscriptions import ClientContext, ClientMetricsManager, Errors

__all__ = [
    "CONTENT_TYPE",
    "OVERFLOW_TAGS",
    "REPAIRS",
    "REQUESTS_GROUP",
    "Repair",
    "RequestMetrics",
    "RequestObservation",
    "SinkCollector",
    "kafka_metric_name",
    "metrics_exposition",
]

Transport = Literal["grpc", "http", "kafka"]
Rpc = Literal["GetTelemetrySubscriptions", "PushTelemetry", "Export"]
Repair = Literal["decompressed_unlabelled", "zero_padding"]
"""How a raw forwarder's OTLP body was taken: compressed without a Content-Encoding, zero-padded."""
REPAIRS: Final[tuple[Repair, ...]] = get_args(Repair)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
REQUESTS_GROUP: Final = "Requests"
"""The ``quota_samples`` group of the answers counted by quota entity."""
OVERFLOW_TAGS: Final = (("overflow", "true"),)
"""The entity the answers of entities over ``limits.max_entity_counters`` are counted under."""
_Tags = tuple[tuple[str, str], ...]
_NOT_NAME: Final = re.compile(r"[^a-zA-Z0-9_]")


def _name(text: str) -> str:
    return _NOT_NAME.sub("_", text).lower()


def kafka_metric_name(group: str, name: str) -> str:
    """The Prometheus name of Kafka's metric ``name`` in ``group`` (see the module docstring)."""
    return f"kafka_server_{_name(group)}_{_name(name)}"


class SinkCollector(Collector):
    """Collects the core's counters and the quota sensors when scraped."""

    def __init__(
        self, manager: ClientMetricsManager, quotas: QuotaManagers, now_ms: Callable[[], int]
    ) -> None:
        self.manager = manager
        self.quotas = quotas
        self.now_ms = now_ms

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for sample in self.manager.samples():
            name = sample.name.removesuffix("_total") if sample.kind == "counter" else sample.name
            family = families.get(name)
            if family is None:
                labels = sorted(sample.labels)
                kind = CounterMetricFamily if sample.kind == "counter" else GaugeMetricFamily
                family = families[name] = kind(name, sample.help, labels=labels)
            family.add_metric([sample.labels[k] for k in sorted(sample.labels)], sample.value)
        # Kafka may tag one metric name differently (connection-accept-rate by listener and by ip):
        # its family gets the union of the labels, empty where a sensor has no such tag
        sensors: dict[str, list[tuple[dict[str, str], float]]] = {}
        helps: dict[str, str] = {}
        for metric, value in self.quotas.values(self.now_ms()).items():
            if math.isnan(value):
                continue  # an average with nothing recorded yet
            name = kafka_metric_name(metric.group, metric.name)
            helps.setdefault(name, f"Kafka quota sensor {metric.group}/{metric.name}")
            sensors.setdefault(name, []).append(({_name(k): v for k, v in metric.tags}, value))
        for name, values in sensors.items():
            labels = sorted({label for tags, _ in values for label in tags})
            gauge = families[name] = GaugeMetricFamily(name, helps[name], labels=labels)
            for tags, value in values:
                gauge.add_metric([tags.get(label, "") for label in labels], value)
        yield from families.values()
        yield from self._quota_entities()

    def _quota_entities(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The quota entities kept with sensors, and those evicted, by quota type."""
        kept = GaugeMetricFamily(
            "telemetry_sink_quota_entities", "Quota entities with sensors now", labels=["quota_type"]
        )
        evicted = CounterMetricFamily(
            "telemetry_sink_quota_entities_evicted",
            "Quota entities whose sensors were evicted: limits.max_quota_entities entities had sensors",
            labels=["quota_type"],
        )
        for manager in self.quotas.client_managers():
            kept.add_metric([manager.quota_type.value], manager.entity_count)
            evicted.add_metric([manager.quota_type.value], manager.entities_evicted)
        yield kept
        yield evicted


class RequestObservation:
    """One request being counted and timed: set ``code`` before leaving the ``with`` block (a request
    that leaves by an exception without one counts as UNKNOWN_SERVER_ERROR)."""

    __slots__ = ("_metrics", "_rpc", "_started", "_transport", "client", "code")

    def __init__(self, metrics: RequestMetrics, transport: Transport, rpc: Rpc) -> None:
        self._metrics = metrics
        self._transport = transport
        self._rpc = rpc
        self._started = 0.0
        self.code: int = Errors.UNKNOWN_SERVER_ERROR
        self.client: ClientContext | None = None
        """Who sent it, once known: the answer is then also counted for its quota entity."""

    def __enter__(self) -> RequestObservation:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._metrics.record(self._transport, self._rpc, self.code, time.perf_counter() - self._started)
        if self.client is not None:
            self._metrics.count_for_entity(self.client, self._rpc, self.code)


class RequestMetrics(Collector):
    """Request counts by transport, RPC and error code; latency by transport and RPC; admission.
    Also answers by quota entity, RPC and code since the last ``drain_entity_counts`` (for
    ``quota_samples``: ``group`` ``Requests``, ``metric`` ``<rpc>/<code>``, the entity's tags, the
    count), for at most ``max_entities`` entities, the rest under ``OVERFLOW_TAGS``; and the sensors
    ``holds`` holds and the ids ``instance_owners`` binds, if given."""

    def __init__(
        self,
        admission: Admission,
        entity_tags: Callable[[ClientContext], Mapping[str, str]] = lambda _: {},
        *,
        max_entities: int = DEFAULT_LIMITS.max_entity_counters,
        holds: ClientHolds | None = None,
        instance_owners: InstanceOwners | None = None,
    ) -> None:
        self.admission = admission
        self.entity_tags = entity_tags
        self.max_entities = max_entities
        self.holds = holds
        self.instance_owners = instance_owners
        self._by_entity: dict[_Tags, dict[str, int]] = {}
        self._overflowed = Counter(
            "telemetry_sink_entity_counters_overflowed",
            "Answers counted under the overflow entity: limits.max_entity_counters entities were counted",
            registry=None,
        )
        self._principals_ignored = Counter(
            "telemetry_sink_otlp_principals_ignored",
            "Client principals named by OTLP labels and ignored: the sender is not in "
            "security.trusted_forwarders",
            registry=None,
        )
        self._forwarded_duplicates = Counter(
            "telemetry_sink_forwarded_duplicates",
            "Pushes a trusted forwarder sent again that were already stored: answered as landed",
            registry=None,
        )
        self._forwarded_over_quota = Counter(
            "telemetry_sink_forwarded_over_quota",
            "Pushes of forwarded clients left out while their own quota throttled them",
            registry=None,
        )
        self._repairs = Counter(
            "telemetry_sink_otlp_repairs",
            "OTLP bodies of raw forwarders taken after a repair (server.otlp_tolerant_intake)",
            ("repair",),
            registry=None,
        )
        self._by_repair = {repair: self._repairs.labels(repair) for repair in REPAIRS}  # each from 0
        labels = ("transport", "rpc", "code", "error")
        self._requests = Counter(
            "telemetry_sink_requests",
            "Requests answered, by the answer's Kafka error code",
            labels,
            registry=None,
        )
        self._duration = Histogram(
            "telemetry_sink_request_duration_seconds",
            "Time from taking a request to answering it",
            ("transport", "rpc"),
            registry=None,
        )
        self._durations: dict[tuple[str, str], Histogram] = {}
        self._counts: dict[tuple[str, str, int], Counter] = {}

    def observe(self, transport: Transport, rpc: Rpc) -> RequestObservation:
        """Count and time one request: ``with metrics.observe("grpc", "PushTelemetry") as seen``."""
        return RequestObservation(self, transport, rpc)

    def record(self, transport: Transport, rpc: Rpc, code: int, seconds: float) -> None:
        """One answered request (the labelled children are kept: ``labels()`` takes a lock each time)."""
        duration = self._durations.get((transport, rpc))
        if duration is None:
            duration = self._durations[transport, rpc] = self._duration.labels(transport, rpc)
        duration.observe(seconds)
        count = self._counts.get((transport, rpc, code))
        if count is None:
            count = self._counts[transport, rpc, code] = self._requests.labels(
                transport, rpc, str(code), error_name(code)
            )
        count.inc()

    def count_for_entity(self, client: ClientContext, rpc: Rpc, code: int) -> None:
        """One answer to ``client``'s quota entity (or to ``OVERFLOW_TAGS`` once ``max_entities``
        other entities were counted since the last snapshot)."""
        tags = tuple(sorted(self.entity_tags(client).items()))
        counts = self._by_entity.get(tags)
        if counts is None:
            if len(self._by_entity) >= self.max_entities:
                self._overflowed.inc()
                tags = OVERFLOW_TAGS
                counts = self._by_entity.get(tags)
            if counts is None:
                counts = self._by_entity[tags] = {}
        name = f"{rpc}/{int(code)}"  # a str key: the dict stays out of the garbage collector's sight
        counts[name] = counts.get(name, 0) + 1

    def count_ignored_principal(self) -> None:
        """An OTLP label named a client's principal, from a sender not trusted to
        (``ingest.security.attribution``)."""
        self._principals_ignored.inc()

    def count_forwarded_duplicates(self, pushes: int) -> None:
        """``pushes`` of a trusted forwarder's resent batch were already stored."""
        self._forwarded_duplicates.inc(pushes)

    def count_forwarded_over_quota(self) -> None:
        """A forwarded client's push left out: its own quota throttled it."""
        self._forwarded_over_quota.inc()

    def count_repair(self, repair: Repair) -> None:
        """An OTLP body taken after ``repair`` (``server.otlp_tolerant_intake``)."""
        self._by_repair[repair].inc()

    def drain_entity_counts(self) -> list[QuotaSample]:
        """The answers by quota entity, RPC and code since the previous call, as quota samples."""
        by_entity, self._by_entity = self._by_entity, {}
        return [
            QuotaSample(REQUESTS_GROUP, name, tags, float(n))
            for tags, counts in sorted(by_entity.items())
            for name, n in sorted(counts.items())
        ]

    def collect(self) -> Iterable[Metric]:
        yield from self._requests.collect()
        yield from self._duration.collect()
        yield GaugeMetricFamily(
            "telemetry_sink_requests_in_flight", "Requests being handled now", self.admission.in_flight
        )
        yield GaugeMetricFamily(
            "telemetry_sink_requests_max_in_flight",
            "server.max_concurrent_requests: more are answered with a retry delay",
            self.admission.max_in_flight,
        )
        yield from self._overflowed.collect()
        yield from self._principals_ignored.collect()
        yield from self._forwarded_duplicates.collect()
        yield from self._forwarded_over_quota.collect()
        yield from self._repairs.collect()
        if self.holds is not None:
            yield GaugeMetricFamily(
                "telemetry_sink_held_clients",
                "Quota sensors held now for a throttle (every client resolving to one is held)",
                len(self.holds),
            )
            yield CounterMetricFamily(
                "telemetry_sink_holds_refused",
                "Throttles not held: limits.max_held_clients sensors were held",
                self.holds.refused,
            )
        if self.instance_owners is not None:
            yield GaugeMetricFamily(
                "telemetry_sink_otlp_instance_owners",
                "OTLP client instance ids bound to the principal that first used them",
                len(self.instance_owners),
            )
            yield CounterMetricFamily(
                "telemetry_sink_otlp_instances_unbound",
                "OTLP instance ids let through unbound: limits.max_instance_owners ids were in use",
                self.instance_owners.unbound,
            )


def metrics_exposition(
    manager: ClientMetricsManager,
    quotas: QuotaManagers,
    requests: RequestMetrics,
    now_ms: Callable[[], int],
    *,
    collectors: Iterable[Collector] = (),
) -> Callable[[], bytes]:
    """A function rendering the current ``/metrics`` page, with the given ``collectors``' metrics too
    (the event loop's lag, ``ingest.loop_lag``; the request memory,
    ``ingest.transports.request_memory``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SinkCollector(manager, quotas, now_ms))
    registry.register(requests)
    for collector in collectors:
        registry.register(collector)
    return lambda: generate_latest(registry)
