"""No single client can hurt the others (issue 17), end to end: a real ``telemetry-sink serve`` on
loopback, well-behaved clients pushing beside one attacker, and a ``/healthz`` prober watching.

For each finding of the first security review that it replays (F1, F2, ..., defined in
docs/findings.md), the attacker sends its input at a bounded size and the test checks three things:

(a) the attacker gets its own clear answer: 413 / RESOURCE_EXHAUSTED without retry information for
    an OTLP payload over a size or structure limit, TELEMETRY_TOO_LARGE (118) for such a KIP-714
    push, 400 INVALID_REQUEST naming the field for bad client text, a closed connection for an
    over-limit Kafka frame or a socket that is too slow;
(b) every push of the well-behaved clients in the same window is accepted at the first attempt
    (no error answer, no retry) and is in the Delta table, one row per acknowledged push;
(c) the sink answered every ``/healthz`` probe meanwhile with 200 (each probe may take up to 10 s:
    a hang guard, not a timing assertion).

The well-behaved clients (``watched``) are the OpenTelemetry SDK's OTLP/HTTP exporter, an OTLP gRPC
client sending what the SDK's encoder builds, a KIP-714 gRPC client (``ingest/proto``) pushing a
captured librdkafka payload, and, where the attack is on the Kafka port, librdkafka itself
(confluent-kafka's Producer). They push until the attack is over and at least ``MIN_PUSHES`` times.
KIP-714 clients wait their push interval between pushes, as the protocol asks; nothing in the test
waits for wall time otherwise. Where an attack used to cost memory (parse bombs, Kafka floods), the
sink's peak RSS over the attack is bounded too (``MAX_RSS_GROWTH``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import grpc
import grpc.aio
import httpx
import lz4.frame
import pytest
import requests
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub
from opentelemetry.sdk.metrics.export import MetricExportResult
from prometheus_client.parser import text_string_to_metric_families

from ingest.limits import DEFAULT_LIMITS
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from subscriptions import Errors, kafka_uuid_string
from tests.support import attacks
from tests.support.kafka import KafkaClient, push_request
from tests.support.otlp import resource_payload, sdk_metrics
from tests.support.paths import LIBRDKAFKA_FIXTURES
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

INTERVAL_MS: Final = 200
MIN_PUSHES: Final = 3
"""Each well-behaved client pushes at least this often, and until the attack is over."""
HANG_GUARD_S: Final = 30.0
"""The longest any single answer may take before the test gives up (the sink's stalls are bounded
far below this; a fix that has not landed shows as this timeout, not as a hung suite)."""
ENTITY_COUNTERS: Final = 20
SLOW_TIMEOUT_MS: Final = 300
KAFKA_IDLE_MS: Final = 1000
"""Longer than the push interval: librdkafka's connection is never idle that long."""
HTTP_IDLE_MS: Final = 2000
"""Well over the well-behaved clients' push interval: a keep-alive connection one of them reuses is
never closed under it, however loaded the machine."""
FIXTURE: Final = LIBRDKAFKA_FIXTURES / "librdkafka-producer-push001-zstd.bin"
CONFIG: Final = f"""\
subscriptions:
  hostile-suite: {{metrics: "org.apache.kafka.", interval.ms: {INTERVAL_MS}}}
exporter:
  options: {{max_batch_latency_ms: 20}}
  quota_sample_period_s: 0
limits:
  max_entity_counters: {ENTITY_COUNTERS}
"""
SLOW_CLIENT_TIMEOUTS: Final = {
    "SERVER__HTTP_HEADER_TIMEOUT_MS": SLOW_TIMEOUT_MS,
    "SERVER__HTTP_BODY_TIMEOUT_MS": SLOW_TIMEOUT_MS,
    "SERVER__HTTP_IDLE_TIMEOUT_MS": HTTP_IDLE_MS,
    "KAFKA_LISTENER__CONNECTIONS_MAX_IDLE_MS": KAFKA_IDLE_MS,
    "KAFKA_LISTENER__REQUEST_READ_TIMEOUT_MS": SLOW_TIMEOUT_MS,
}
"""Short timeouts for the slow-client attacks (environment overrides of the ``server:`` and
``kafka_listener:`` keys)."""
MAX_RSS_GROWTH: Final = 128 * 1024 * 1024
"""The most the sink's peak resident memory (its decoder processes' included, started beforehand)
may grow over an attack of at most 8 MiB (decompressed or on the wire), well-behaved clients' share
included: the parser's documented bound (about 50 MiB
at ``limits.max_elements``) plus a few copies of the input. Measured: about 80 MiB; before the
limits, the Kafka flood took 266 MiB and the parse bombs GiB."""
ATTACKER: Final = "hostile"
ATTACKER_INSTANCE: Final = "00000000-0000-0000-0000-00000000beef"
EMPTY_PUSH: Final = attacks.empty_resource_metrics(1)
"""An uncompressed KIP-714 payload holding one empty ``ResourceMetrics``."""
OVERFLOW_COUNTER: Final = "telemetry_sink_entity_counters_overflowed_total"
RESOURCE_EXHAUSTED: Final = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
INVALID_REQUEST_NAME: Final = Errors.INVALID_REQUEST.name


# -- the sink --------------------------------------------------------------------------------------


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Running]:
    """The sink under attack, its decoder processes started (``_start_decoders``)."""
    with running_sink(tmp_path, tmp_path / "data", replica="hostile", extra=CONFIG) as running:
        _start_decoders(running)
        yield running


def _start_decoders(sink: Running) -> None:
    """Two exports over the inline size at once: the sink starts its decoder processes (on first
    use), so that what an attack costs in memory is measured without their start-up."""
    body = resource_payload(padding="x" * 8192)
    headers = {"Content-Type": "application/x-protobuf", "x-kafka-client-id": "warm-up"}

    def export() -> int:
        return httpx.post(
            f"{sink.http_url}/v1/metrics", content=body, headers=headers, timeout=30
        ).status_code

    with ThreadPoolExecutor(2) as both:
        assert list(both.map(lambda _: export(), range(2))) == [200, 200]


@pytest.fixture
def impatient_sink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    """The sink under attack, with ``SLOW_CLIENT_TIMEOUTS``."""
    for key, value in SLOW_CLIENT_TIMEOUTS.items():
        monkeypatch.setenv(f"TELEMETRY_SINK_{key}", str(value))
    with running_sink(tmp_path, tmp_path / "data", replica="hostile", extra=CONFIG) as running:
        yield running


def _rows_by_client(sink: Running) -> Counter[str]:
    table = DeltaTable(sink.table_uri).to_pyarrow_table(columns=["client_id"])
    return Counter(table.column(0).to_pylist())


def _landed(sink: Running, client_id: object) -> int:
    """Rows of ``client_id`` in the table so far (none while the table does not exist yet)."""
    try:
        return _rows_by_client(sink)[str(client_id)]
    except TableNotFoundError:
        return 0


def _column(sink: Running, name: str) -> list[Any]:
    values: list[Any] = DeltaTable(sink.table_uri).to_pyarrow_table(columns=[name]).column(0).to_pylist()
    return values


def _prometheus(sink: Running) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics``: samples by name."""
    text = httpx.get(f"{sink.http_url}/metrics", timeout=HANG_GUARD_S).text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _answers(sink: Running, transport: str, rpc: str) -> Counter[str]:
    """Requests answered by the sink on ``transport`` for ``rpc``, by Kafka error name."""
    counts: Counter[str] = Counter()
    for labels, value in _prometheus(sink).get("telemetry_sink_requests_total", []):
        if labels["transport"] == transport and labels["rpc"] == rpc:
            counts[labels["error"]] += int(value)
    return counts


# -- the well-behaved clients ----------------------------------------------------------------------


@dataclass
class Outcomes:
    """What one well-behaved client saw: pushes acknowledged, and every other answer."""

    client_id: str
    accepted: int = 0
    refused: list[str] = field(default_factory=list)
    _answer: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def answered(self) -> int:
        return self.accepted + len(self.refused)

    def record(self, refusal: str | None) -> None:
        """One answer: accepted (``None``) or refused as ``refusal`` says."""
        if refusal is None:
            self.accepted += 1
        else:
            self.refused.append(refusal)
        self._answer.set()

    async def next_answer(self) -> None:
        """Until this client has had one more answer."""
        self._answer.clear()
        async with asyncio.timeout(HANG_GUARD_S):
            await self._answer.wait()


def _keep_pushing(outcomes: Outcomes, attack_over: asyncio.Event) -> bool:
    return not attack_over.is_set() or outcomes.answered < MIN_PUSHES


async def _kip714_grpc(sink: Running, attack_over: asyncio.Event, outcomes: Outcomes) -> None:
    """A KIP-714 client over gRPC: one Get, then a captured librdkafka push every push interval."""
    metadata = (("x-kafka-client-id", outcomes.client_id), ("x-kafka-client-software-name", "librdkafka"))
    payload = FIXTURE.read_bytes()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = await stub.GetTelemetrySubscriptions(
            pb.GetTelemetrySubscriptionsRequest(), metadata=metadata, timeout=HANG_GUARD_S
        )
        assert got.error_code == Errors.NONE, got
        request = pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            compression_type=4,
            metrics=payload,
        )
        while _keep_pushing(outcomes, attack_over):
            answer = await stub.PushTelemetry(request, metadata=metadata, timeout=HANG_GUARD_S)
            code = Errors(answer.error_code)
            outcomes.record(None if code is Errors.NONE else f"PushTelemetry {code.name}")
            await asyncio.sleep(got.push_interval_ms / 1000 + 0.002)  # the client's push interval


async def _otlp_grpc(sink: Running, attack_over: asyncio.Event, outcomes: Outcomes) -> None:
    """An OTLP gRPC client sending what the SDK's encoder builds; every status is seen (no retry)."""
    metadata = (("x-kafka-client-id", outcomes.client_id),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        stub = MetricsServiceStub(channel)  # type: ignore[no-untyped-call]
        while _keep_pushing(outcomes, attack_over):
            request = encode_metrics(sdk_metrics("good-grpc-service"))
            try:
                answer = await stub.Export(request, metadata=metadata, timeout=HANG_GUARD_S)
            except grpc.aio.AioRpcError as error:
                outcomes.record(f"Export {error.code().name}: {error.details()}")
                continue
            partial = answer.partial_success if answer.HasField("partial_success") else None
            outcomes.record(None if partial is None else f"Export partial success {partial}")


async def _otlp_http(sink: Running, attack_over: asyncio.Event, outcomes: Outcomes) -> None:
    """The OpenTelemetry SDK's OTLP/HTTP exporter (protobuf, gzip); every attempt's status is seen,
    retries included."""
    session = requests.Session()
    statuses: list[int] = []
    session.hooks["response"].append(lambda response, *_, **__: statuses.append(response.status_code))
    exporter = OTLPMetricExporter(
        endpoint=f"{sink.http_url}/v1/metrics",
        headers={"x-kafka-client-id": outcomes.client_id},
        timeout=HANG_GUARD_S,
        compression=Compression.Gzip,
        session=session,
    )
    try:
        while _keep_pushing(outcomes, attack_over):
            result = await asyncio.to_thread(exporter.export, sdk_metrics("good-http-service"))
            first_time = result is MetricExportResult.SUCCESS and statuses == [200]
            outcomes.record(None if first_time else f"Export {result.name}, HTTP statuses {statuses}")
            statuses.clear()
    finally:
        exporter.shutdown()


class _Librdkafka:
    """confluent-kafka's Producer on the Kafka port, polled in its own thread; closing it (in that
    thread) sends its terminating push."""

    def __init__(self, sink: Running, client_id: str) -> None:
        self.conf = {
            "bootstrap.servers": f"127.0.0.1:{sink.kafka_port}",
            "client.id": client_id,
            "enable.metrics.push": True,
        }
        self._stop = threading.Event()

    def _run(self) -> None:
        producer = confluent_kafka.Producer(self.conf)
        while not self._stop.is_set():
            producer.poll(0.05)
        producer.flush(HANG_GUARD_S)
        del producer  # the last reference: rd_kafka_destroy (and the terminating push) runs here

    async def run(self, sink: Running, attack_over: asyncio.Event) -> None:
        thread = asyncio.create_task(asyncio.to_thread(self._run))
        try:
            await attack_over.wait()
            async with asyncio.timeout(HANG_GUARD_S):
                while _landed(sink, self.conf["client.id"]) < MIN_PUSHES:
                    await asyncio.sleep(INTERVAL_MS / 1000)  # polling the table
        finally:
            self._stop.set()
            await thread


@dataclass
class Watch:
    """The window of one attack: the well-behaved clients' outcomes and the prober's probes."""

    fleet: list[Outcomes]
    prober: attacks.HealthProber
    librdkafka: str | None
    attacker_kafka_pushes: int = 0
    """Pushes the attacker had accepted on the Kafka port (they share the sink's counters)."""

    def _landed_and_answered(self, sink: Running) -> tuple[Counter[str], Counter[str]]:
        """The rows by client id and the Kafka port's push answers, read while no answer came in
        between (a closing librdkafka client's last push may still be on its way)."""
        for _ in range(100):
            before = _answers(sink, "kafka", "PushTelemetry") if self.librdkafka else Counter[str]()
            rows = _rows_by_client(sink)
            after = _answers(sink, "kafka", "PushTelemetry") if self.librdkafka else Counter[str]()
            if before == after:
                return rows, after
        raise AssertionError("the Kafka port kept answering pushes after the clients stopped")

    def assert_unharmed(self, sink: Running) -> None:
        """(b) and (c): every well-behaved push accepted at once and landed; every probe answered."""
        for outcomes in self.fleet:
            assert outcomes.refused == [], f"{outcomes.client_id} was refused: {outcomes.refused[:5]}"
            assert outcomes.accepted >= MIN_PUSHES, outcomes
        rows, answers = self._landed_and_answered(sink)
        assert {o.client_id: rows[o.client_id] for o in self.fleet} == {
            o.client_id: o.accepted for o in self.fleet
        }
        if self.librdkafka is not None:
            assert set(answers) == {"NONE"}, answers
            assert rows[self.librdkafka] == answers["NONE"] - self.attacker_kafka_pushes >= MIN_PUSHES
        probes = self.prober.probes
        assert probes, "the prober never completed a probe"
        failed = [p for p in probes if p.status != 200]
        assert failed == [], f"{len(failed)} of {len(probes)} /healthz probes failed: {failed[:5]}"


@contextlib.asynccontextmanager
async def watched(sink: Running, *, librdkafka: bool = False) -> AsyncIterator[Watch]:
    """Start the prober and the well-behaved clients; the block is the attack; on leaving it the
    clients finish their pushes and the prober stops."""
    fleet = [Outcomes("good-kip714-grpc"), Outcomes("good-otlp-grpc"), Outcomes("good-otlp-http")]
    watch = Watch(
        fleet, attacks.HealthProber(sink.http_port).start(), "good-librdkafka" if librdkafka else None
    )
    attack_over = asyncio.Event()
    clients = [
        _kip714_grpc(sink, attack_over, fleet[0]),
        _otlp_grpc(sink, attack_over, fleet[1]),
        _otlp_http(sink, attack_over, fleet[2]),
    ]
    if watch.librdkafka is not None:
        clients.append(_Librdkafka(sink, watch.librdkafka).run(sink, attack_over))
    running = asyncio.gather(*clients)
    try:
        yield watch
    finally:
        attack_over.set()
        try:
            await running
        finally:
            watch.prober.stop()


# -- the attacker's means ---------------------------------------------------------------------------


async def _otlp_http_export(
    sink: Running,
    body: bytes,
    *,
    encoding: str | None = None,
    content_type: bytes = b"application/x-protobuf",
) -> attacks.HttpAnswer:
    """One OTLP/HTTP export from the attacker, its body as given."""
    headers = [("Content-Type", content_type), ("x-kafka-client-id", ATTACKER.encode())]
    if encoding is not None:
        headers.append(("Content-Encoding", encoding.encode()))
    request = attacks.http_request("POST", "/v1/metrics", headers, body)
    return await attacks.http_exchange(sink.http_port, request, HANG_GUARD_S)


def _assert_too_large_otlp(answer: attacks.HttpAnswer) -> None:
    """413 with a ``google.rpc.Status`` RESOURCE_EXHAUSTED and nothing that asks for a retry."""
    assert answer.status == 413, (answer.status, answer.body[:300])
    assert "retry-after" not in answer.headers
    status = Status.FromString(answer.body)
    assert status.code == RESOURCE_EXHAUSTED, status
    assert status.message
    assert not any(detail.Is(RetryInfo.DESCRIPTOR) for detail in status.details)


async def _kip714_push(sink: Running, compression_type: int, metrics: bytes) -> int:
    """One Get then one push over gRPC, as a fresh client instance; the push's error code."""
    metadata = (("x-kafka-client-id", ATTACKER),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = await stub.GetTelemetrySubscriptions(
            pb.GetTelemetrySubscriptionsRequest(), metadata=metadata, timeout=HANG_GUARD_S
        )
        assert got.error_code == Errors.NONE, got
        pushed = await stub.PushTelemetry(
            pb.PushTelemetryRequest(
                client_instance_id=got.client_instance_id,
                subscription_id=got.subscription_id,
                compression_type=compression_type,
                metrics=metrics,
            ),
            metadata=metadata,
            timeout=HANG_GUARD_S,
        )
        return int(pushed.error_code)


async def _closed_by_sink(reader: asyncio.StreamReader) -> bool:
    """Read until the sink closes the connection (whatever it answers first); False if it never
    does within the hang guard."""
    try:
        async with asyncio.timeout(HANG_GUARD_S):
            while await reader.read(65536):
                pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


# -- the attacks ------------------------------------------------------------------------------------


async def test_F1_alternating_invalid_points_cost_the_attacker_a_partial_success_or_413_only(
    sink: Running,
) -> None:
    """F1: valid and invalid points alternating (each refused point used to cost a memmove of the
    tail): under the point limit a partial success, over it 413, as protobuf and as a gzip body that
    inflates to 8 MiB."""
    pairs_under = 20_000
    over = DEFAULT_LIMITS.max_data_points // 2 + 1
    under_body, over_body = attacks.alternating_points(pairs_under), attacks.alternating_points(over)
    inflating = attacks.gzip_bomb(attacks.alternating_points(8 * 1024 * 1024 // 15))
    async with watched(sink) as watch:
        rss = attacks.reset_peak_rss(sink.process.pid)
        partial = await _otlp_http_export(sink, under_body)
        plain_over = await _otlp_http_export(sink, over_body)
        gzip_over = await _otlp_http_export(sink, inflating, encoding="gzip")
        rss_growth = attacks.peak_rss_bytes(sink.process.pid) - rss
    assert partial.status == 200, partial.body[:300]
    answer = ExportMetricsServiceResponse.FromString(partial.body)
    assert answer.partial_success.rejected_data_points == pairs_under
    assert "time_unix_nano" in answer.partial_success.error_message
    _assert_too_large_otlp(plain_over)
    _assert_too_large_otlp(gzip_over)
    assert rss_growth < MAX_RSS_GROWTH, f"peak RSS grew {rss_growth >> 20} MiB"
    watch.assert_unharmed(sink)
    assert _rows_by_client(sink)[ATTACKER] == 1  # the partial success landed, the rest did not


async def test_F2_parse_bombs_are_refused_as_too_large_on_every_transport(sink: Running) -> None:
    """F2: a few KB that parse into millions of messages: empty ``ResourceMetrics`` as gzip OTLP/HTTP,
    as raw OTLP gRPC and as a zstd KIP-714 push; ``{}`` floods and deep nesting as OTLP JSON."""
    flood = attacks.empty_resource_metrics(4 * 1024 * 1024)  # 8 MiB, 4M messages
    protobuf_bomb, zstd_bomb = attacks.gzip_bomb(flood), attacks.zstd_bomb(flood)
    json_bomb = attacks.gzip_bomb(attacks.json_object_flood(2_500_000))  # 7.5 MiB
    async with watched(sink) as watch:
        rss = attacks.reset_peak_rss(sink.process.pid)
        protobuf = await _otlp_http_export(sink, protobuf_bomb, encoding="gzip")
        json_flood = await _otlp_http_export(
            sink, json_bomb, encoding="gzip", content_type=b"application/json"
        )
        deep = await _otlp_http_export(sink, attacks.json_nesting(5_000), content_type=b"application/json")
        kip714 = await _kip714_push(sink, 4, zstd_bomb)
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{sink.grpc_port}", options=[("grpc.max_send_message_length", -1)]
        ) as channel:
            export: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await export(attacks.empty_resource_metrics(1_000_000), timeout=HANG_GUARD_S)
        rss_growth = attacks.peak_rss_bytes(sink.process.pid) - rss
    _assert_too_large_otlp(protobuf)
    assert json_flood.status == 413, json_flood.body[:300]
    assert "retry-after" not in json_flood.headers
    assert deep.status == 400, deep.body[:300]  # under the element count, over the depth: not retryable
    assert "retry-after" not in deep.headers
    assert kip714 == Errors.TELEMETRY_TOO_LARGE
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    details = dict(refused.value.trailing_metadata() or ()).get("grpc-status-details-bin")
    if details is not None:
        assert isinstance(details, bytes)
        assert not any(d.Is(RetryInfo.DESCRIPTOR) for d in Status.FromString(details).details)
    assert rss_growth < MAX_RSS_GROWTH, f"peak RSS grew {rss_growth >> 20} MiB"
    watch.assert_unharmed(sink)
    assert _rows_by_client(sink)[ATTACKER] == 0
    log = sink.log.read_text(errors="replace")
    assert "RecursionError" not in log
    assert "Traceback" not in log


async def test_F3_invalid_utf8_client_id_is_refused_with_400_and_batch_mates_land(sink: Running) -> None:
    """F3: ``x-kafka-client-id: \\xff`` (raw bytes): one bad header byte used to fail the whole
    group commit (every batch-mate answered UNAVAILABLE, ``/readyz`` 503). Sent ten times, between
    the OTLP/HTTP client's exports, on the OTLP export (with a fixed instance id)
    and on a KIP-714 Get."""
    good_payload = encode_metrics(sdk_metrics("attacker")).SerializeToString()
    poisoned = [("Content-Type", b"application/x-protobuf"), ("x-kafka-client-id", b"\xff")]
    poisoned.append(("x-kafka-client-instance-id", ATTACKER_INSTANCE.encode()))
    exports, gets = [], []
    async with watched(sink) as watch:
        for _ in range(10):
            request = attacks.http_request("POST", "/v1/metrics", poisoned, good_payload)
            exports.append(await attacks.http_exchange(sink.http_port, request, HANG_GUARD_S))
            get = attacks.http_request(
                "POST",
                "/v1/kip714/get-telemetry-subscriptions",
                [("Content-Type", b"application/json"), ("x-kafka-client-id", b"\xff")],
                b"{}",
            )
            gets.append(await attacks.http_exchange(sink.http_port, get, HANG_GUARD_S))
            await watch.fleet[2].next_answer()  # each poison in another group commit than the last
    for answer in exports:
        assert answer.status == 400, (answer.status, answer.body[:300])
        status = Status.FromString(answer.body)
        assert "x-kafka-client-id" in status.message, status
    for answer in gets:
        assert answer.status == 400, (answer.status, answer.body[:300])
        body = httpx.Response(200, content=answer.body).json()
        assert body["error"] == INVALID_REQUEST_NAME
        assert "x-kafka-client-id" in body["message"]
    watch.assert_unharmed(sink)
    assert httpx.get(f"{sink.http_url}/readyz", timeout=HANG_GUARD_S).status_code == 200
    assert kafka_uuid_string(uuid.UUID(ATTACKER_INSTANCE)) not in _column(sink, "client_instance_id")


async def test_F4_long_software_names_on_the_kafka_port_are_refused_and_never_land(sink: Running) -> None:
    """F4: ApiVersions v3 with a software name and version over ``max_software_chars`` is answered
    INVALID_REQUEST (the connection goes on as ``unknown`` software, as in Kafka); with strings over
    Kafka's 32,767 bytes the connection is closed. No landed row carries a long software string."""
    long_text = "a" * (DEFAULT_LIMITS.max_software_chars + 1)
    huge_text = "b" * (3 * 1024 * 1024)
    async with watched(sink, librdkafka=True) as watch:
        client = await KafkaClient.connect(sink.kafka_port)
        try:
            versions = await client.request(
                ApiVersionsRequest(client_software_name=long_text, client_software_version=long_text)
            )
            got = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)))
            pushed = await client.request(
                push_request(got.client_instance_id, int(got.subscription_id), EMPTY_PUSH)
            )
            watch.attacker_kafka_pushes = int(pushed.error_code == Errors.NONE)
        finally:
            client.close()
        huge = await KafkaClient.connect(sink.kafka_port)
        try:
            huge.send(ApiVersionsRequest(client_software_name=huge_text, client_software_version=huge_text))
            huge_closed = await _closed_by_sink(huge.reader)
        finally:
            huge.close()
    assert int(versions.error_code) == Errors.INVALID_REQUEST
    assert int(pushed.error_code) == Errors.NONE  # the push itself is fine: it lands as `unknown`
    assert huge_closed
    watch.assert_unharmed(sink)
    longest = max(
        len(text) for text in _column(sink, "client_software_name") + _column(sink, "client_software_version")
    )
    assert longest <= DEFAULT_LIMITS.max_software_chars


async def test_F5_many_frames_in_one_push_are_refused_as_too_large(sink: Running) -> None:
    """F5: a 1 MB KIP-714 push of ~100k empty gzip members, zstd or lz4 frames (each used to copy
    the rest of the input): TELEMETRY_TOO_LARGE after at most ``max_compressed_frames``."""
    size = 1_040_000  # under telemetry.max.bytes
    frame = lz4.frame.compress(b"")
    payloads = {
        1: attacks.gzip_members(size),
        3: frame * (size // len(frame)),
        4: attacks.zstd_frames(size),
    }
    async with watched(sink) as watch:
        answers = {codec: await _kip714_push(sink, codec, payload) for codec, payload in payloads.items()}
        members = await _otlp_http_export(sink, attacks.gzip_members(size), encoding="gzip")
    assert answers == dict.fromkeys(payloads, Errors.TELEMETRY_TOO_LARGE)
    _assert_too_large_otlp(members)
    watch.assert_unharmed(sink)
    assert _rows_by_client(sink)[ATTACKER] == 0


async def test_F9_idle_and_slow_sockets_are_closed_after_the_configured_timeouts(
    impatient_sink: Running,
) -> None:
    """F9: sockets that never send a request, stop in the middle of the headers or of the body
    (HTTP), or of a frame (Kafka) are closed by the sink once ``SLOW_CLIENT_TIMEOUTS`` pass, while
    the well-behaved clients go on."""
    sink = impatient_sink
    http_starts = {
        "idle": b"",
        "half headers": b"POST /v1/metrics HTTP/1.1\r\nHost: sink\r\nContent-Ty",
        "half body": attacks.http_request(
            "POST",
            "/v1/kip714/push-telemetry",
            [("Content-Type", b"application/octet-stream")],
            b"x" * 1000,
            length=1_000_000,
        ),
    }
    kafka_starts = {"idle": b"", "half frame": attacks.declared_frame(1000)}
    sockets: list[tuple[str, asyncio.StreamReader, asyncio.StreamWriter]] = []
    async with watched(sink, librdkafka=True) as watch:
        for port, starts in ((sink.http_port, http_starts), (sink.kafka_port, kafka_starts)):
            for name, start in starts.items():
                for _ in range(20):
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(start)
                    sockets.append((f"{port} {name}", reader, writer))
        closed = await asyncio.gather(*(_closed_by_sink(reader) for _, reader, _ in sockets))
        for *_, writer in sockets:
            writer.close()
    still_open = Counter(
        name for (name, *_), was_closed in zip(sockets, closed, strict=True) if not was_closed
    )
    assert still_open == Counter()
    watch.assert_unharmed(sink)


async def test_F10_kafka_frames_naming_millions_of_topics_close_the_connection(sink: Running) -> None:
    """F10: a Metadata v0 frame just under ``socket.request.max.bytes`` naming ~4M topics, and a frame
    declaring more than that, each close the attacker's connection (as a broker does), before the
    topics are walked or parsed (the sink's memory barely grows)."""
    flood = attacks.metadata_flood_frame(8 * 1024 * 1024 - 1024)
    async with watched(sink, librdkafka=True) as watch:
        rss = attacks.reset_peak_rss(sink.process.pid)
        results = []
        for frame in (flood, attacks.declared_frame(8 * 1024 * 1024 + 1)):
            reader, writer = await asyncio.open_connection("127.0.0.1", sink.kafka_port)
            writer.write(frame)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            results.append(await _closed_by_sink(reader))
            writer.close()
        rss_growth = attacks.peak_rss_bytes(sink.process.pid) - rss
    assert results == [True, True]
    assert rss_growth < MAX_RSS_GROWTH, f"peak RSS grew {rss_growth >> 20} MiB"
    watch.assert_unharmed(sink)


async def test_F13_distinct_client_ids_overflow_into_one_counted_entity(sink: Running) -> None:
    """F13: 300 Gets with distinct client ids (legitimate requests, each answered) no longer keep a
    counter each: beyond ``limits.max_entity_counters`` they are counted in the overflow, which
    ``/metrics`` shows."""
    async with (
        watched(sink) as watch,
        httpx.AsyncClient(base_url=sink.http_url, timeout=HANG_GUARD_S) as http,
    ):
        codes: Counter[tuple[int, str]] = Counter()
        for n in range(300):
            answer = await http.post(
                "/v1/kip714/get-telemetry-subscriptions",
                json={},
                headers={"x-kafka-client-id": f"{ATTACKER}-{n}"},
            )
            codes[answer.status_code, answer.json()["error"]] += 1
    assert codes == Counter({(200, "NONE"): 300})
    overflowed = sum(v for _, v in _prometheus(sink).get(OVERFLOW_COUNTER, []))
    assert overflowed >= 300 - ENTITY_COUNTERS
    watch.assert_unharmed(sink)
