"""``telemetry-sink loadgen`` (``loadgen``).

Three layers, as in the module: the pure payload builder against what librdkafka really sends; one
simulated client against the real subscription core on a fake clock (exact timings, no waiting); and
whole fleets against a real in-process sink on loopback for each target, read back from Delta.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from deltalake import DeltaTable
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from exporters import shard_uri
from ingest.config import ExporterConfig, KafkaListenerConfig, SecurityConfig, ServerConfig, SinkConfig
from ingest.limits import DEFAULT_LIMITS
from ingest.push.codec import decompress
from ingest.push.decoding import decode_push
from ingest.server import Sink
from loadgen import (
    CONSUMER_METRICS,
    PRODUCER_METRICS,
    ClientMetricsModel,
    Credentials,
    Kip714Client,
    LoadgenOptions,
    LoadStats,
    RequestRecord,
    Summary,
    TargetUnreachableError,
    build_metrics_data,
    choose_compression,
    client_identity,
    compress,
    first_push_delay_ms,
    is_requested,
    run_loadgen,
    select_metrics,
)
from quotas import QuotaConfig
from quotas.entities import DEFAULT, PRODUCER_BYTE_RATE, ClientQuotaEntity
from subscriptions import (
    PUSH_ACCEPTED,
    AcceptedPush,
    ClientContext,
    ClientMetricsManager,
    CompressionType,
    Errors,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    SubscriptionStore,
    kafka_uuid_string,
)
from telemetry_sink.cli import main
from tests.support.certificates import self_signed
from tests.support.clock import T0, FakeClock
from tests.support.paths import LIBRDKAFKA_FIXTURES

FIXTURES = LIBRDKAFKA_FIXTURES
PRODUCER_FIXTURE = FIXTURES / "librdkafka-producer-push001-zstd.bin"
CONSUMER_FIXTURE = FIXTURES / "librdkafka-consumer-push002-none.bin"
FLEET_FILTER = (
    "org.apache.kafka.producer.node.,org.apache.kafka.producer.record.,org.apache.kafka.consumer.fetch."
)


def _points(data: MetricsData) -> set[tuple[str, str | None, tuple[tuple[str, int], ...]]]:
    """(metric, value field, node.id attributes) of every data point."""
    return {
        (m.name, dp.WhichOneof("value"), tuple((a.key, a.value.int_value) for a in dp.attributes))
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for dp in (m.sum if m.HasField("sum") else m.gauge).data_points
    }


def _names(data: MetricsData) -> list[str]:
    return [m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]


def _fixture(path: Path, compression: int) -> MetricsData:
    return MetricsData.FromString(decompress(path.read_bytes(), compression, 1 << 20))


# --------------------------------------------------------------------------------------------------
# The payload builder (pure)


@pytest.mark.parametrize(
    ("requested", "name", "sent"),
    [
        ((), "org.apache.kafka.producer.record.queue.time.max", False),  # [] asks for nothing
        (("*",), "org.apache.kafka.producer.record.queue.time.max", True),  # exactly ["*"]: all
        (("",), "org.apache.kafka.consumer.fetch.manager.fetch.latency.avg", True),  # "" prefixes all
        (("org.apache.kafka.producer.",), "org.apache.kafka.producer.node.request.latency.avg", True),
        (("org.apache.kafka.producer.",), "org.apache.kafka.consumer.node.request.latency.avg", False),
        (
            ("org.apache.kafka.consumer.fetch", "org.apache.kafka.producer.record."),
            "org.apache.kafka.consumer.fetch.manager.fetch.latency.max",
            True,
        ),
        (
            ("*", "org.apache.kafka.x."),
            "org.apache.kafka.producer.record.queue.time.max",
            False,
        ),  # "*" only alone
        (
            ("org.apache.kafka.producer.record.queue.time.max",),
            "org.apache.kafka.producer.record.queue.time.max",
            True,
        ),
    ],
)
def test_TEL25_requested_metrics_filter_by_prefix(requested: tuple[str, ...], name: str, sent: bool) -> None:
    assert is_requested(name, requested) is sent


@pytest.mark.parametrize(
    ("specs", "fixture", "compression"),
    [(PRODUCER_METRICS, PRODUCER_FIXTURE, 4), (CONSUMER_METRICS, CONSUMER_FIXTURE, 0)],
)
def test_payload_has_the_metric_names_and_shape_librdkafka_sends(
    specs: tuple[Any, ...], fixture: Path, compression: int
) -> None:
    real = _fixture(fixture, compression)
    model = ClientMetricsModel(specs, random.Random(1))
    model.node_ids = (1, -1) if specs is CONSUMER_METRICS else (1,)  # the captured clients' brokers
    built = build_metrics_data(
        model.collect(delta=True),
        resource_attributes={},
        scope_name="kprobe#producer-1",
        start_time_unix_nano=1,
        time_unix_nano=2,
        delta_temporality=True,
    )
    assert sorted(_names(built)) == sorted(_names(real))
    kinds = {
        m.name: (m.WhichOneof("data"), m.description)
        for m in built.resource_metrics[0].scope_metrics[0].metrics
    }
    real_kinds = {
        m.name: (m.WhichOneof("data"), m.description)
        for m in real.resource_metrics[0].scope_metrics[0].metrics
    }
    assert kinds == real_kinds
    assert _points(built) == _points(real)  # same value types and node.id attributes, point for point


def test_sums_are_delta_when_the_subscription_asks_for_delta_temporality_else_cumulative() -> None:
    total = "org.apache.kafka.consumer.coordinator.rebalance.latency.total"

    def sums(delta: bool) -> tuple[list[int], int]:
        model = ClientMetricsModel(CONSUMER_METRICS, random.Random(7))
        values = [next(p.value for p in model.collect(delta=delta) if p.spec.name == total) for _ in range(5)]
        data = build_metrics_data(
            model.collect(delta=delta),
            resource_attributes={},
            scope_name="c#consumer-1",
            start_time_unix_nano=1,
            time_unix_nano=2,
            delta_temporality=delta,
        )
        metric = next(m for m in data.resource_metrics[0].scope_metrics[0].metrics if m.name == total)
        assert metric.sum.is_monotonic
        return [int(v) for v in values], metric.sum.aggregation_temporality

    deltas, delta_temporality = sums(True)
    totals, cumulative_temporality = sums(False)
    assert delta_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    assert cumulative_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    assert totals == [sum(deltas[: i + 1]) for i in range(5)]  # same draws: running totals vs increases
    assert totals[-1] > 0


def test_resource_and_scope_look_like_a_real_clients() -> None:
    consumer = client_identity(5, "consumer")
    producer = client_identity(3, "producer")
    assert consumer.client_id == "loadgen-consumer-0005"
    assert consumer.scope_name == "loadgen-consumer-0005#consumer-1"
    assert dict(consumer.resource_attributes) == {"group_id": "loadgen-group-1"}  # as librdkafka's consumer
    assert dict(producer.resource_attributes) == {"transactional_id": "loadgen-txn-0003"}
    points = select_metrics(ClientMetricsModel(CONSUMER_METRICS, random.Random(0)).collect(delta=True), ["x"])
    data = build_metrics_data(
        points,
        resource_attributes=consumer.resource_attributes,
        scope_name=consumer.scope_name,
        start_time_unix_nano=1,
        time_unix_nano=2,
        delta_temporality=True,
    )
    resource = data.resource_metrics[0]
    assert [(a.key, a.value.string_value) for a in resource.resource.attributes] == [
        ("group_id", "loadgen-group-1")
    ]
    assert (resource.scope_metrics[0].scope.name, resource.scope_metrics[0].scope.version) == (
        "loadgen-consumer-0005#consumer-1",
        "2.16.0",
    )
    assert _names(data) == []  # a filter matching nothing still sends a (metric-less) payload


@pytest.mark.parametrize(
    ("accepted", "override", "chosen"),
    [
        ((4, 3, 1, 2), "auto", CompressionType.ZSTD),  # the sink's advertised order: zstd first
        ((3, 1), "auto", CompressionType.LZ4),
        ((9, 1, 4), "auto", CompressionType.GZIP),  # unknown types skipped
        ((2,), "auto", CompressionType.SNAPPY),
        ((), "auto", CompressionType.NONE),  # nothing advertised: none
        ((4, 3, 1, 2), "lz4", CompressionType.LZ4),  # --compression forces one
        ((4,), "none", CompressionType.NONE),
    ],
)
def test_TEL19_compression_is_the_first_accepted_type_the_loadgen_supports(
    accepted: tuple[int, ...], override: Any, chosen: CompressionType
) -> None:
    assert choose_compression(accepted, override) is chosen


@pytest.mark.parametrize("compression", list(CompressionType))
def test_compressed_payloads_decode_with_the_sinks_codec(compression: CompressionType) -> None:
    payload = build_metrics_data(
        ClientMetricsModel(PRODUCER_METRICS, random.Random(3)).collect(delta=True),
        resource_attributes={},
        scope_name="p#producer-1",
        start_time_unix_nano=1,
        time_unix_nano=2,
        delta_temporality=True,
    ).SerializeToString()
    assert decode_push(compress(payload, compression), compression, 1 << 20, DEFAULT_LIMITS) == payload


def test_TEL25_first_push_is_jittered_between_half_and_one_and_a_half_intervals() -> None:
    rng = random.Random(0)
    delays = [first_push_delay_ms(1000, rng) for _ in range(2000)]
    assert all(500 <= d <= 1500 for d in delays)
    assert min(delays) < 550
    assert max(delays) > 1450


# --------------------------------------------------------------------------------------------------
# One client against the real subscription core, on a fake clock


class CoreTransport:
    """The sink's subscription core as a transport, on the fake clock; ``answers`` can override what a
    push is answered with, and ``throttles`` add a throttle time to the next answers."""

    def __init__(self, store: SubscriptionStore, clock: FakeClock) -> None:
        self.manager = ClientMetricsManager(store)
        self.clock = clock
        self.context = ClientContext("loadgen-producer-0000", "librdkafka", "2.16.0", "127.0.0.1", 50000)
        self.landed: list[tuple[AcceptedPush, MetricsData]] = []
        self.answers: list[PushTelemetryResponse | None] = []
        self.throttles: list[int] = []

    def _throttle(self) -> int:
        return self.throttles.pop(0) if self.throttles else 0

    async def get(self, client: Any, instance_id: UUID) -> GetTelemetrySubscriptionsResponse:
        request = GetTelemetrySubscriptionsRequest(instance_id if instance_id.int else None)
        answer = self.manager.process_get(request, self.context, self.clock.now_ms())
        return answer._replace(throttle_time_ms=max(answer.throttle_time_ms, self._throttle()))

    async def push(self, client: Any, request: PushTelemetryRequest) -> PushTelemetryResponse:
        scripted = self.answers.pop(0) if self.answers else None
        if scripted is not None:
            return scripted
        outcome = self.manager.process_push(request, self.context, self.clock.now_ms())
        if isinstance(outcome, AcceptedPush):
            payload = decode_push(outcome.metrics, outcome.compression_type, 1 << 20, DEFAULT_LIMITS)
            self.landed.append((outcome, MetricsData.FromString(payload)))
            outcome = PUSH_ACCEPTED
        return outcome._replace(throttle_time_ms=max(outcome.throttle_time_ms, self._throttle()))


def _store(metrics: str = "org.apache.kafka.producer.", interval_ms: int = 1000) -> SubscriptionStore:
    store = SubscriptionStore()
    store.update("fleet", {"metrics": metrics, "interval.ms": interval_ms})
    return store


async def _run_one(
    transport: CoreTransport,
    clock: FakeClock,
    duration_ms: int = 5000,
    observer: Callable[[RequestRecord], None] | None = None,
) -> tuple[list[RequestRecord], Summary]:
    records: list[RequestRecord] = []

    def observe(record: RequestRecord) -> None:
        records.append(record)
        if observer is not None:
            observer(record)

    stats = LoadStats(observe)
    client = Kip714Client(
        client_identity(0, "producer"), transport, clock=clock, stats=stats, rng=random.Random(4)
    )
    await client.run(T0, T0 + duration_ms, asyncio.Event())
    return records, stats.summary("grpc", "core", 1, clock.now_ms() - T0)


async def test_TEL25_client_gets_pushes_every_interval_and_sends_a_terminating_push_at_the_end() -> None:
    clock = FakeClock()
    transport = CoreTransport(_store(), clock)
    records, summary = await _run_one(transport, clock)
    get, *pushes = records
    assert (get.kind, get.sent_ms, get.outcome) == ("get", T0, "NONE")
    assert all(r.kind == "push" and r.outcome == "NONE" for r in pushes)  # the core never had to say 89
    assert 500 <= pushes[0].sent_ms - T0 < 1500  # first push jittered
    gaps = {b.sent_ms - a.answered_ms for a, b in itertools.pairwise(pushes[:-1])}
    assert gaps == {1000}  # then one interval after each answer
    assert [r.terminating for r in pushes] == [False] * (len(pushes) - 1) + [True]
    assert pushes[-1].sent_ms == T0 + 5000  # at the end of the run
    assert (summary.pushes_accepted, summary.terminating_accepted) == (len(pushes), 1)
    assert len(transport.landed) == len(pushes)
    for _accepted, data in transport.landed:
        names = _names(data)
        assert names
        assert all(n.startswith("org.apache.kafka.producer.") for n in names)
    assert {a.compression_type for a, _ in transport.landed} == {CompressionType.ZSTD}


async def test_throttle_time_is_honoured_before_the_next_request() -> None:
    clock = FakeClock()
    transport = CoreTransport(_store(), clock)
    transport.throttles = [0, 2500, 0, 700]  # the Get, 1st push, 2nd push, 3rd push
    records, summary = await _run_one(transport, clock, duration_ms=8000)
    throttled = [(i, r) for i, r in enumerate(records) if r.throttle_ms]
    assert [r.throttle_ms for _, r in throttled] == [2500, 700]
    for i, record in throttled:
        assert records[i + 1].sent_ms >= record.answered_ms + record.throttle_ms
    assert records[2].sent_ms - records[1].answered_ms == 2500  # longer than the 1000 ms interval
    assert (summary.throttled, summary.throttle_ms_total) == (2, 3200)
    assert set(summary.pushes_by_outcome) == {"NONE"}


async def test_TEL25_unknown_subscription_id_makes_the_client_get_again_at_once() -> None:
    clock = FakeClock()
    store = _store()
    transport = CoreTransport(store, clock)
    changed: list[int] = []

    def change_subscription(record: RequestRecord) -> None:
        if record.kind == "push" and not changed:
            changed.append(
                store.update("fleet", {"metrics": "org.apache.kafka.producer.node.", "interval.ms": 800})
            )

    records, summary = await _run_one(transport, clock, observer=change_subscription)
    outcomes = [(r.kind, r.outcome) for r in records[:5]]
    assert outcomes == [
        ("get", "NONE"),
        ("push", "NONE"),
        ("push", "UNKNOWN_SUBSCRIPTION_ID"),
        ("get", "NONE"),
        ("push", "NONE"),
    ]
    assert records[3].sent_ms == records[2].answered_ms  # no wait (PD-1 lets this Get through)
    assert records[3].subscription_id != records[0].subscription_id
    assert records[3].instance_id == records[0].instance_id  # the same client instance
    later = [
        data for accepted, data in transport.landed if accepted.subscription_id == records[3].subscription_id
    ]
    assert later
    assert all(all(n.startswith("org.apache.kafka.producer.node.") for n in _names(d)) for d in later)
    assert summary.pushes_by_outcome == {"NONE": summary.pushes - 1, "UNKNOWN_SUBSCRIPTION_ID": 1}


@pytest.mark.parametrize(
    "error", [Errors.INVALID_REQUEST, Errors.INVALID_RECORD, Errors.UNSUPPORTED_VERSION, 9999]
)
async def test_TEL25_fatal_codes_turn_the_clients_telemetry_off(error: int) -> None:
    clock = FakeClock()
    transport = CoreTransport(_store(), clock)
    transport.answers = [PushTelemetryResponse(0, error)]
    records, summary = await _run_one(transport, clock)
    assert [(r.kind, r.terminating) for r in records] == [("get", False), ("push", False)]  # nothing more
    assert summary.clients_stopped == 1
    assert summary.terminating_sent == 0


@pytest.mark.parametrize("error", [Errors.THROTTLING_QUOTA_EXCEEDED, Errors.TELEMETRY_TOO_LARGE])
async def test_TEL25_retriable_codes_get_again_after_one_interval(error: Errors) -> None:
    clock = FakeClock()
    transport = CoreTransport(_store(), clock)
    transport.answers = [PushTelemetryResponse(0, error)]
    records, summary = await _run_one(transport, clock)
    assert [(r.kind, r.outcome) for r in records[:3]] == [
        ("get", "NONE"),
        ("push", error.name),
        ("get", "NONE"),
    ]
    assert records[2].sent_ms == records[1].answered_ms + 1000
    assert summary.clients_stopped == 0
    assert records[-1].terminating
    assert records[-1].outcome == "NONE"


async def test_TEL25_no_requested_metrics_means_no_pushes_and_a_get_every_interval() -> None:
    clock = FakeClock()
    transport = CoreTransport(_store(metrics=""), clock)
    records, summary = await _run_one(transport, clock, duration_ms=3500)
    assert [(r.kind, r.sent_ms - T0) for r in records] == [
        ("get", 0),
        ("get", 1000),
        ("get", 2000),
        ("get", 3000),
    ]
    assert summary.pushes == 0


# --------------------------------------------------------------------------------------------------
# Whole fleets against a real sink on loopback


class Sinks:
    """Real sinks on loopback (ports 0, Delta under ``tmp_path``); each stopped once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: list[Sink] = []

    async def start(
        self,
        metrics: str = FLEET_FILTER,
        interval_ms: int = 200,
        quotas: QuotaConfig | None = None,
        *,
        tls: tuple[str, str] | None = None,
        tokens_file: str | None = None,
        client_ca_file: str | None = None,
    ) -> Sink:
        cert, key = tls or (None, None)
        config = SinkConfig(
            data_root=str(self.root / "data"),
            replica_id="loadgen-test",
            server=ServerConfig(
                host="127.0.0.1",
                grpc_port=0,
                http_port=0,
                shutdown_grace_s=2,
                tls_cert_file=cert,
                tls_key_file=key,
                tls_client_ca_file=client_ca_file,
            ),
            kafka_listener=KafkaListenerConfig(port=0),
            security=SecurityConfig(tokens_file=tokens_file),
            quotas=quotas or QuotaConfig(),
            exporter=ExporterConfig("delta", {"max_batch_latency_ms": 5}),
            subscriptions={"fleet": {"metrics": metrics, "interval.ms": interval_ms}},
        )
        sink = Sink(config)
        await sink.start()
        self.running.append(sink)
        return sink

    async def stop(self, sink: Sink) -> None:
        if sink in self.running:
            self.running.remove(sink)
            await sink.stop()

    async def landed(self, sink: Sink) -> list[dict[str, Any]]:
        """Every landed row, once the sink has stopped (so everything acknowledged is committed)."""
        await self.stop(sink)
        uri = shard_uri(sink.config.data_root, "telemetry_pushes", sink.config.replica_id)
        rows: list[dict[str, Any]] = DeltaTable(uri).to_pyarrow_table().to_pylist()
        return sorted(rows, key=lambda row: row["received_at"])


@pytest.fixture
async def sinks(tmp_path: Path) -> AsyncIterator[Sinks]:
    running = Sinks(tmp_path)
    yield running
    for sink in list(running.running):
        await running.stop(sink)


def _options(sink: Sink, target: str, **overrides: Any) -> LoadgenOptions:
    fields: dict[str, Any] = {
        "clients": 4,
        "duration_s": 1.0,
        "target": target,
        "grpc_address": f"127.0.0.1:{sink.grpc_port}",
        "http_address": f"127.0.0.1:{sink.http_port}",
        "seed": 1,
        "close_timeout_s": 2.0,
    }
    return LoadgenOptions(**{**fields, **overrides})


def _assert_fleet_landed(
    rows: Sequence[Mapping[str, Any]], records: Sequence[RequestRecord], compression: int
) -> None:
    """Each client's pushes landed under its own instance id, compressed as chosen, filtered to the
    subscription, and its last one is its terminating push."""
    instance_of = {
        r.client: kafka_uuid_string(r.instance_id)  # landed in Kafka's form
        for r in records
        if r.kind == "get" and r.outcome == "NONE" and r.instance_id is not None
    }
    assert len(instance_of) == 4
    by_client_id = {row["client_id"]: row["client_instance_id"] for row in rows}
    expected = {client_identity(n, ("producer", "consumer")[n % 2]).client_id: n for n in range(4)}
    assert by_client_id == {client_id: instance_of[n] for client_id, n in expected.items()}
    assert {row["compression_type"] for row in rows} == {compression}
    assert len(rows) == sum(1 for r in records if r.kind == "push" and r.outcome == "NONE")
    for client_id in by_client_id:
        mine = [row for row in rows if row["client_id"] == client_id]
        assert [row["terminating"] for row in mine] == [False] * (len(mine) - 1) + [True]
        assert len(mine) >= 2  # pushes at the 200 ms interval, then the terminating one
    prefixes = tuple(FLEET_FILTER.split(","))
    for row in rows:
        names = _names(MetricsData.FromString(row["payload"]))
        assert names
        assert all(name.startswith(prefixes) for name in names)
        assert row["client_software_name"] == "librdkafka"


@pytest.mark.integration
async def test_grpc_fleet_lands_filtered_zstd_pushes_and_one_terminating_push_per_client(
    sinks: Sinks,
) -> None:
    sink = await sinks.start()
    records: list[RequestRecord] = []
    summary = await run_loadgen(_options(sink, "grpc"), observer=records.append)
    rows = await sinks.landed(sink)
    _assert_fleet_landed(rows, records, compression=CompressionType.ZSTD)
    assert summary.pushes_accepted == len(rows)
    assert summary.terminating_accepted == 4
    assert set(summary.pushes_by_outcome) == {"NONE"}
    assert summary.gets == 4
    assert summary.compression == {"zstd": summary.pushes}
    assert summary.bytes_sent == sum(r.bytes_sent for r in records)
    assert summary.push_latency_p50_ms is not None


@pytest.mark.integration
async def test_http_fleet_lands_pushes_compressed_as_asked(sinks: Sinks) -> None:
    sink = await sinks.start()
    records: list[RequestRecord] = []
    summary = await run_loadgen(_options(sink, "http", compression="lz4"), observer=records.append)
    rows = await sinks.landed(sink)
    _assert_fleet_landed(rows, records, compression=CompressionType.LZ4)
    assert summary.terminating_accepted == 4
    assert set(summary.pushes_by_outcome) == {"NONE"}


@pytest.mark.integration
async def test_otlp_fleet_exports_every_interval_under_its_own_instance_ids(sinks: Sinks) -> None:
    sink = await sinks.start()
    records: list[RequestRecord] = []
    summary = await run_loadgen(_options(sink, "otlp", interval_ms=200), observer=records.append)
    rows = await sinks.landed(sink)
    assert summary.pushes_accepted == len(rows) == summary.pushes
    assert summary.pushes_by_outcome == {"OK": len(rows)}
    assert {row["subscription_id"] for row in rows} == {0}  # no subscription gate for OTLP
    assert all(r.instance_id is not None for r in records)
    sent = {kafka_uuid_string(r.instance_id) for r in records if r.instance_id is not None}
    assert {row["client_instance_id"] for row in rows} == sent  # landed in Kafka's form
    assert len(sent) == 4
    for row in rows:
        data = MetricsData.FromString(row["payload"])
        resource = {a.key: a.value.string_value for a in data.resource_metrics[0].resource.attributes}
        assert resource["service.name"] == row["client_id"]
        expected = PRODUCER_METRICS if "producer" in row["client_id"] else CONSUMER_METRICS
        assert set(_names(data)) == {spec.name for spec in expected}  # OTLP clients send everything


@pytest.mark.integration
async def test_byte_rate_quota_throttles_the_fleet_and_every_throttle_is_waited_out(
    sinks: Sinks,
) -> None:
    sink = await sinks.start(quotas=QuotaConfig(num_quota_samples=2))
    sink.quotas.alter(ClientQuotaEntity(client_id=DEFAULT), PRODUCER_BYTE_RATE, 300)
    records: list[RequestRecord] = []
    summary = await run_loadgen(_options(sink, "grpc", clients=2), observer=records.append)
    await sinks.stop(sink)
    assert summary.throttled > 0
    assert summary.throttle_ms_total > 0
    assert summary.throttled == sum(1 for r in records if r.throttle_ms > 0)
    waited = 0
    for client in (0, 1):
        mine = [r for r in records if r.client == client]
        for record, following in itertools.pairwise(mine):
            if record.throttle_ms:
                assert following.sent_ms >= record.answered_ms + record.throttle_ms
                waited += 1
    assert waited > 0


@pytest.mark.integration
async def test_subscription_change_makes_the_fleet_get_again_on_unknown_subscription_id(
    sinks: Sinks,
) -> None:
    sink = await sinks.start()
    records: list[RequestRecord] = []
    changed: list[int] = []

    def observe(record: RequestRecord) -> None:
        records.append(record)
        if record.kind == "push" and record.outcome == "NONE" and not changed:
            update: dict[str, str | int] = {
                "metrics": "org.apache.kafka.producer.node.,org.apache.kafka.consumer.",
                "interval.ms": 200,
            }
            changed.append(sink.manager.store.update("fleet", update))

    summary = await run_loadgen(_options(sink, "grpc", duration_s=1.5), observer=observe)
    rows = await sinks.landed(sink)
    assert summary.pushes_by_outcome.get("UNKNOWN_SUBSCRIPTION_ID", 0) >= 1
    assert summary.clients_stopped == 0
    for client in range(4):
        mine = [r for r in records if r.client == client]
        for i, record in enumerate(mine[:-1]):
            if record.outcome == "UNKNOWN_SUBSCRIPTION_ID":
                assert (mine[i + 1].kind, mine[i + 1].outcome) == ("get", "NONE")
        # subscription ids are per instance (TEL-9 XORs in the instance id): this client's old and new one.
        # A first push jittered to less than one interval after the 117 is answered 89 (PD-1 and G-4: the
        # early Get does not move last_get), and the client gets again after the interval (TEL-25).
        gets = [r for r in mine if r.kind == "get"]
        assert len(gets) >= 2
        assert {g.subscription_id for g in gets[1:]} == {gets[1].subscription_id}
        assert gets[1].subscription_id != gets[0].subscription_id
        assert {g.instance_id for g in gets} == {gets[0].instance_id}
        assert {r.outcome for r in mine} <= {
            "NONE",
            "UNKNOWN_SUBSCRIPTION_ID",
            "THROTTLING_QUOTA_EXCEEDED",
        }
        after = [row for row in rows if row["subscription_id"] == gets[1].subscription_id]
        assert after
        assert after[-1]["terminating"]
        for row in after:
            names = _names(MetricsData.FromString(row["payload"]))
            assert names
            assert all(
                n.startswith(("org.apache.kafka.producer.node.", "org.apache.kafka.consumer.")) for n in names
            )
            assert gets[0].instance_id is not None
            assert row["client_instance_id"] == kafka_uuid_string(gets[0].instance_id)


# --------------------------------------------------------------------------------------------------
# The command


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _script() -> str:
    return str(Path(sys.executable).with_name("telemetry-sink"))


async def _main_in_thread(*args: str) -> int:
    """``main`` as the console script runs it, in a thread (it runs its own event loop) while the sink
    keeps serving on this one."""
    return await asyncio.to_thread(main, ["loadgen", *args])


@pytest.mark.integration
async def test_cli_prints_the_summary_and_exits_0_when_pushes_were_accepted(
    sinks: Sinks, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = await sinks.start()
    http = f"127.0.0.1:{sink.http_port}"
    code = await _main_in_thread("--clients", "3", "--duration", "0.8", "--target", "http", "--http", http)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"telemetry-sink loadgen: 3 clients -> http {http}" in out
    assert "terminating        3 sent, 3 accepted" in out
    assert "push latency       p50 " in out


@pytest.mark.integration
async def test_cli_exits_1_when_no_push_was_accepted(
    sinks: Sinks, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = await sinks.start(metrics="")  # a subscription asking for nothing (TEL-3): clients never push
    http = f"127.0.0.1:{sink.http_port}"
    code = await _main_in_thread("--clients", "2", "--duration", "0.5", "--target", "http", "--http", http)
    out, err = capsys.readouterr()
    assert code == 1
    assert "pushes             0 sent" in out
    assert err == "telemetry-sink loadgen: no push was accepted\n"


@pytest.mark.integration
def test_cli_says_in_one_line_when_the_grpc_target_is_unreachable() -> None:
    done = subprocess.run(
        [_script(), "loadgen", "--grpc", f"127.0.0.1:{_closed_port()}", "--connect-timeout", "0.3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("telemetry-sink loadgen: cannot reach the gRPC target")
    assert done.stderr.count("\n") == 1  # one line, no traceback


async def test_cli_says_in_one_line_when_the_http_target_is_unreachable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = await _main_in_thread("--target", "http", "--http", f"127.0.0.1:{_closed_port()}")
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.startswith("telemetry-sink loadgen: cannot reach the HTTP target")
    assert err.count("\n") == 1


async def test_run_loadgen_raises_when_the_target_is_unreachable() -> None:
    options = LoadgenOptions(
        clients=1, duration_s=1, grpc_address=f"127.0.0.1:{_closed_port()}", connect_timeout_s=0.2
    )
    with pytest.raises(TargetUnreachableError, match="cannot reach the gRPC target"):
        await run_loadgen(options)


def test_options_report_every_problem_at_once() -> None:
    problems = LoadgenOptions(
        clients=0, duration_s=0, target="otlp", compression="zstd", kinds=("admin",)
    ).validate()
    assert len(problems) == 4


# --------------------------------------------------------------------------------------------------
# A secured sink: TLS and bearer tokens


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (openssl, from Debian's base system): (cert, key)."""
    cert, key = self_signed(tmp_path)
    return str(cert), str(key)


@pytest.mark.integration
@pytest.mark.parametrize("target", ["grpc", "http", "otlp"])
async def test_the_fleet_reaches_a_sink_over_tls_with_a_bearer_token(
    sinks: Sinks, certificate: tuple[str, str], tmp_path: Path, target: str
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"t0ken": "User:fleet"\n')
    sink = await sinks.start(tls=certificate, tokens_file=str(tokens))
    credentials = Credentials(tls_ca_file=certificate[0], token="t0ken")
    options = _options(sink, target, clients=2, credentials=credentials)
    summary = await run_loadgen(options)
    rows = await sinks.landed(sink)
    assert rows
    assert {row["principal"] for row in rows} == {"User:fleet"}  # the token's principal
    assert summary.pushes_accepted == len(rows)


@pytest.mark.integration
@pytest.mark.parametrize("target", ["grpc", "http"])
async def test_with_a_client_certificate_the_fleet_passes_mtls_and_is_its_subject(
    sinks: Sinks, certificate: tuple[str, str], target: str
) -> None:
    cert, key = certificate  # self-signed: the client's certificate is its own CA, and the server's
    sink = await sinks.start(tls=certificate, client_ca_file=cert)
    credentials = Credentials(tls_ca_file=cert, tls_cert_file=cert, tls_key_file=key)
    await run_loadgen(_options(sink, target, clients=1, credentials=credentials))
    rows = await sinks.landed(sink)
    assert rows
    assert {row["principal"] for row in rows} == {"User:CN=127.0.0.1"}


@pytest.mark.integration
async def test_without_tls_a_tls_sink_is_unreachable(sinks: Sinks, certificate: tuple[str, str]) -> None:
    sink = await sinks.start(tls=certificate)
    with pytest.raises(TargetUnreachableError):
        await run_loadgen(_options(sink, "http", clients=1, connect_timeout_s=2.0))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert-file", "c.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"], "a client certificate needs --tls-ca-file"),
        (["--token-file", "/nonexistent/token"], "cannot read --token-file"),
    ],
)
async def test_cli_refuses_incomplete_credentials(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await _main_in_thread(*args) == 2
    assert message in capsys.readouterr().err
