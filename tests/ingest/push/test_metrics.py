"""/metrics: the core's counters and the quota sensors, scraped from a real server."""

from __future__ import annotations

import gc
from pathlib import Path

import grpc.aio
import httpx
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters import Health, InMemoryExporter
from ingest.limits import RequestLimits
from ingest.proto import client_telemetry_pb2 as pb
from ingest.push.admission import Admission
from ingest.push.metrics import OVERFLOW_TAGS, REPAIRS, RequestMetrics, kafka_metric_name, metrics_exposition
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.authentication import Authenticator
from ingest.transports.connections import register_http_listener
from ingest.transports.http_app import create_http_app
from ingest.wire import GET_PATH, OTLP_METRICS_PATH, PUSH_PATH
from quotas import DEFAULT, ClientQuotaEntity
from subscriptions import ClientContext, Errors
from tests.support.clock import FakeClock
from tests.support.otlp import metrics_data, resource_payload
from tests.support.pipeline import kafka_pipeline
from tests.support.process import run_isolated
from tests.support.servers import serve_both

pytestmark = pytest.mark.integration


async def _serving_with_metrics(pipeline: TelemetryPipeline, clock: FakeClock) -> TestServer:
    """The pipeline's HTTP app with its ``/metrics``, started on loopback (the caller closes it)."""
    app = create_http_app(
        pipeline,
        ready=lambda: Health(True),
        metrics=metrics_exposition(pipeline.manager, pipeline.quotas, pipeline.request_metrics, clock.now_ms),
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def test_TEL_24_a_scrape_shows_requests_errors_instances_and_quota_sensors() -> None:
    clock = FakeClock()
    pipeline = kafka_pipeline(clock, InMemoryExporter())
    pipeline.quotas.alter(ClientQuotaEntity(None, "rdkafka"), "producer_byte_rate", 1_000_000)
    server = await _serving_with_metrics(pipeline, clock)
    headers = {"x-kafka-client-id": "rdkafka"}
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url(""))) as client:
            got = (await client.post(GET_PATH, headers=headers)).json()
            await client.post(
                GET_PATH, json={"client_instance_id": got["client_instance_id"]}, headers=headers
            )
            clock.advance(1000)
            payload = metrics_data()
            await client.post(
                PUSH_PATH,
                params={
                    "client_instance_id": got["client_instance_id"],
                    "subscription_id": got["subscription_id"],
                },
                content=payload,
                headers={**headers, "Content-Type": "application/octet-stream"},
            )
            scrape = await client.get("/metrics")
    finally:
        await server.close()
    assert scrape.status_code == 200
    assert scrape.headers["Content-Type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }
    p = "telemetry_sink_client_metrics_"
    assert samples[p + "requests_total", (("api", "GetTelemetrySubscriptions"),)] == 2
    assert samples[p + "requests_total", (("api", "PushTelemetry"),)] == 1
    assert samples[p + "instance_count", ()] == 1
    throttled = (("api", "GetTelemetrySubscriptions"), ("code", "89"), ("error", "THROTTLING_QUOTA_EXCEEDED"))
    assert samples[p + "errors_total", throttled] == 1
    byte_rate = samples["kafka_server_produce_byte_rate", (("client_id", "rdkafka"), ("user", ""))]
    assert byte_rate == pytest.approx(len(payload) / 10)  # one push over the padded 10 s window
    assert samples["kafka_server_produce_queue_size", ()] == 0


async def test_every_rpc_on_both_ports_is_counted_by_error_code_and_timed(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"good": "User:alice"\n')
    clock = FakeClock()
    pipeline = kafka_pipeline(clock, InMemoryExporter(), authenticator=Authenticator(str(tokens)))
    async with serve_both(pipeline) as endpoints:
        got = await endpoints.stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
        await endpoints.stub.GetTelemetrySubscriptions(
            pb.GetTelemetrySubscriptionsRequest(client_instance_id=got.client_instance_id)
        )  # too early: THROTTLING_QUOTA_EXCEEDED
        clock.advance(1000)
        request = pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            metrics=metrics_data(),
        )
        await endpoints.stub.PushTelemetry(request)
        with pytest.raises(grpc.aio.AioRpcError):
            await endpoints.stub.PushTelemetry(request, metadata=(("authorization", "Bearer bad"),))
        await endpoints.otlp_export(resource_payload())
        await endpoints.otlp_export(b"\xff not protobuf")
        await endpoints.http.post(GET_PATH, json={})
        await endpoints.http.post(PUSH_PATH, json={"client_instance_id": "nope"})  # 400
        await endpoints.http.post(
            OTLP_METRICS_PATH, content=resource_payload(), headers={"Content-Type": "application/x-protobuf"}
        )
        scrape = await endpoints.http.get("/metrics")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }

    def count(transport: str, rpc: str, error: Errors | str) -> float:
        code = str(int(error)) if isinstance(error, Errors) else "58"
        name = error.name if isinstance(error, Errors) else error
        labels = (("code", code), ("error", name), ("rpc", rpc), ("transport", transport))
        return samples.get(("telemetry_sink_requests_total", labels), 0)

    assert count("grpc", "GetTelemetrySubscriptions", Errors.NONE) == 1
    assert count("grpc", "GetTelemetrySubscriptions", Errors.THROTTLING_QUOTA_EXCEEDED) == 1
    assert count("grpc", "PushTelemetry", Errors.NONE) == 1
    assert count("grpc", "PushTelemetry", "SASL_AUTHENTICATION_FAILED") == 1
    assert count("grpc", "Export", Errors.NONE) == 1
    assert count("grpc", "Export", Errors.INVALID_RECORD) == 1
    assert count("http", "GetTelemetrySubscriptions", Errors.NONE) == 1
    assert count("http", "PushTelemetry", Errors.INVALID_REQUEST) == 1
    assert count("http", "Export", Errors.NONE) == 1
    durations = {
        (labels[0][1], labels[1][1]): value
        for (name, labels), value in samples.items()
        if name == "telemetry_sink_request_duration_seconds_count"
    }
    assert durations == {
        ("GetTelemetrySubscriptions", "grpc"): 2,
        ("PushTelemetry", "grpc"): 2,
        ("Export", "grpc"): 2,
        ("GetTelemetrySubscriptions", "http"): 1,
        ("PushTelemetry", "http"): 1,
        ("Export", "http"): 1,
    }
    assert samples["telemetry_sink_requests_in_flight", ()] == 0
    assert samples["telemetry_sink_requests_max_in_flight", ()] == 2**31 - 1
    # the same answers by quota entity, for quota_samples (an unknown token names no entity)
    by_entity = pipeline.request_metrics.drain_entity_counts()
    assert {s.group for s in by_entity} == {"Requests"}
    assert {s.tags for s in by_entity} == {(("client-id", ""), ("user", ""))}
    assert {s.metric: s.value for s in by_entity} == {
        "GetTelemetrySubscriptions/0": 2,
        "GetTelemetrySubscriptions/89": 1,
        "PushTelemetry/0": 1,
        "Export/0": 2,
        "Export/87": 1,
    }
    assert pipeline.request_metrics.drain_entity_counts() == []  # counted since the previous snapshot


async def test_a_quota_metric_tagged_two_ways_is_one_family_with_both_labels() -> None:
    clock = FakeClock()
    pipeline = kafka_pipeline(clock, InMemoryExporter())
    listener = register_http_listener(pipeline.quotas.connections)
    pipeline.quotas.alter(ClientQuotaEntity(ip="10.0.0.1"), "connection_creation_rate", 5)
    await pipeline.quotas.connections.inc(listener, "10.0.0.1")  # the per-IP rate sensor
    render = metrics_exposition(pipeline.manager, pipeline.quotas, pipeline.request_metrics, clock.now_ms)
    (family,) = [
        f
        for f in text_string_to_metric_families(render().decode())
        if f.name == "kafka_server_socket_server_metrics_connection_accept_rate"
    ]
    assert sorted((s.labels.get("listener", ""), s.labels.get("ip", "")) for s in family.samples) == [
        ("", "10.0.0.1"),
        ("HTTP", ""),
    ]


def _client_tags(client: ClientContext) -> dict[str, str]:
    return {"client-id": client.client_id or ""}


def test_F13_entity_counters_are_capped_and_further_entities_count_as_one_overflow_entity() -> None:
    metrics = RequestMetrics(Admission(10, 1000), _client_tags, max_entities=2)
    for client_id in ("a", "b", "c", "d", "a", "c"):
        metrics.count_for_entity(ClientContext(client_id), "PushTelemetry", 0)
    metrics.count_for_entity(ClientContext("e"), "Export", 87)
    samples = {(s.tags, s.metric): s.value for s in metrics.drain_entity_counts()}
    assert samples == {
        ((("client-id", "a"),), "PushTelemetry/0"): 2,
        ((("client-id", "b"),), "PushTelemetry/0"): 1,
        (OVERFLOW_TAGS, "PushTelemetry/0"): 3,  # c, d and c again
        (OVERFLOW_TAGS, "Export/87"): 1,
    }
    families = {f.name: f for f in metrics.collect()}
    assert families["telemetry_sink_entity_counters_overflowed"].samples[0].value == 4
    metrics.count_for_entity(ClientContext("c"), "PushTelemetry", 0)  # a new snapshot period: room again
    assert [s.tags for s in metrics.drain_entity_counts()] == [(("client-id", "c"),)]


def test_F13_entity_counters_add_nothing_for_the_garbage_collector_to_walk() -> None:
    """Up to ``max_entities`` counters are kept between snapshots, for entities clients name: they hold
    only strings, ints and tuples of them, so a full collection does not walk them. Counted in a fresh
    interpreter, where no other thread allocates between the two counts."""
    added = run_isolated(_objects_tracked_for_2000_entities)
    assert isinstance(added, int)
    assert added < 2000 // 4  # a few first-use objects, none per entity


def _objects_tracked_for_2000_entities() -> int:
    """How many more objects the collector tracks once 2,000 entities are counted (``run_isolated``)."""
    metrics = RequestMetrics(Admission(10, 1000), _client_tags, max_entities=2000)
    clients = [ClientContext(f"client-{n}") for n in range(2000)]
    gc.collect()
    before = len(gc.get_objects())
    for client in clients:
        metrics.count_for_entity(client, "GetTelemetrySubscriptions", Errors.NONE)
        metrics.count_for_entity(client, "PushTelemetry", Errors.THROTTLING_QUOTA_EXCEEDED)
    gc.collect()
    added = len(gc.get_objects()) - before
    assert {s.metric for s in metrics.drain_entity_counts()} == {
        "GetTelemetrySubscriptions/0",
        "PushTelemetry/89",
    }
    return added


async def test_F13_F21_the_bookkeeping_bounds_are_on_the_scrape() -> None:
    """limits.max_entity_counters and limits.max_held_clients, as a real server applies them: answers
    to a third client id count as the overflow entity, a second throttled client is not held."""
    clock = FakeClock()
    limits = RequestLimits(max_entity_counters=2, max_held_clients=1)
    pipeline = kafka_pipeline(clock, InMemoryExporter(), limits=limits)
    pipeline.quotas.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", 1)  # everyone throttled
    server = await _serving_with_metrics(pipeline, clock)
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url(""))) as client:
            for client_id in ("a", "b", "c"):  # each export is over the quota: throttled
                export = await client.post(
                    OTLP_METRICS_PATH,
                    content=metrics_data(points=20),
                    headers={"Content-Type": "application/x-protobuf", "x-kafka-client-id": client_id},
                )
                assert export.status_code == 200
            scrape = await client.get("/metrics")
    finally:
        await server.close()
    samples = {
        s.name: s.value for family in text_string_to_metric_families(scrape.text) for s in family.samples
    }
    assert samples["telemetry_sink_entity_counters_overflowed_total"] == 1
    assert samples["telemetry_sink_held_clients"] == 1
    assert samples["telemetry_sink_holds_refused_total"] == 2
    assert samples["telemetry_sink_otlp_instance_owners"] == len(pipeline.instance_owners)
    assert samples["telemetry_sink_otlp_instances_unbound_total"] == 0
    entities = {s.tags for s in pipeline.request_metrics.drain_entity_counts()}
    assert entities == {(("client-id", "a"), ("user", "")), (("client-id", "b"), ("user", "")), OVERFLOW_TAGS}


def test_raw_forwarders_each_repair_is_counted_by_kind_and_every_kind_is_scraped_from_zero() -> None:
    metrics = RequestMetrics(Admission(10, 1000))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)

    def repairs() -> dict[str, float]:
        [family] = [
            f
            for f in text_string_to_metric_families(generate_latest(registry).decode())
            if f.name == "telemetry_sink_otlp_repairs"
        ]
        return {s.labels["repair"]: s.value for s in family.samples if s.name.endswith("_total")}

    assert repairs() == dict.fromkeys(REPAIRS, 0.0) == {"decompressed_unlabelled": 0.0, "zero_padding": 0.0}
    metrics.count_repair("zero_padding")
    metrics.count_repair("zero_padding")
    metrics.count_repair("decompressed_unlabelled")
    assert repairs() == {"decompressed_unlabelled": 1.0, "zero_padding": 2.0}


@pytest.mark.parametrize(
    ("group", "name", "exposed"),
    [
        ("Produce", "byte-rate", "kafka_server_produce_byte_rate"),
        ("Produce", "throttle-time", "kafka_server_produce_throttle_time"),
        ("Request", "exempt-request-time", "kafka_server_request_exempt_request_time"),
        ("ControllerMutation", "tokens", "kafka_server_controllermutation_tokens"),
        ("socket-server-metrics", "connection-count", "kafka_server_socket_server_metrics_connection_count"),
    ],
)
def test_quota_sensors_have_the_names_the_jmx_exporter_gives_a_broker(
    group: str, name: str, exposed: str
) -> None:
    """The one mapping rule: Kafka's MBean kafka.server:type=<group> attribute <name>, as the Prometheus
    JMX exporter's default format names it with lowercaseOutputName."""
    assert kafka_metric_name(group, name) == exposed
