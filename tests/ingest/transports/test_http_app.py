"""The HTTP front door on a real loopback server, driven by a real HTTP client (httpx); client text
refused at the edge, with the real Delta exporter behind it (F3, F4, F20)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from uuid import UUID

import httpx
import pytest
from aiohttp.test_utils import TestServer
from deltalake import DeltaTable
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters import DeltaLandingExporter, Health, InMemoryExporter
from ingest.limits import DEFAULT_LIMITS
from ingest.push.metrics import metrics_exposition
from ingest.push.pipeline import TelemetryPipeline
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app
from ingest.wire import GET_PATH, INSTANCE_ID_HEADER, OTLP_METRICS_PATH, PUSH_PATH, parse_instance_id
from quotas import DEFAULT, ClientQuotaEntity
from tests.support.clock import FakeClock
from tests.support.instance_ids import is_kafka_uuid_string
from tests.support.otlp import resource_payload, sdk_metrics
from tests.support.paths import LIBRDKAFKA_FIXTURES
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration

FIXTURE = LIBRDKAFKA_FIXTURES / "librdkafka-consumer-push001-zstd.bin"
HEADERS = {"x-kafka-client-id": "rdkafka", "x-kafka-client-software-name": "librdkafka"}


class Served:
    def __init__(self, client: httpx.AsyncClient, pipeline: TelemetryPipeline, clock: FakeClock) -> None:
        self.client, self.pipeline, self.clock = client, pipeline, clock
        assert isinstance(pipeline.exporter, InMemoryExporter)
        self.exporter = pipeline.exporter
        self.health = Health(True, "committed batch 3")


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    clock = FakeClock()
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter)
    holder: list[Served] = []
    app = create_http_app(pipeline, ready=lambda: holder[0].health, max_body_bytes=64 * 1024)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(**SERVER_OPTIONS)
    async with httpx.AsyncClient(base_url=str(server.make_url(""))) as client:
        holder.append(Served(client, pipeline, clock))
        yield holder[0]
    await server.close()


async def test_get_then_push_json_and_binary(served: Served) -> None:
    got = (await served.client.post(GET_PATH, headers=HEADERS)).json()
    assert got["error_code"] == 0
    assert got["error"] == "NONE"
    assert got["requested_metrics"] == ["org.apache.kafka."]
    assert got["accepted_compression_types"] == [4, 3, 1, 2]
    instance = got["client_instance_id"]  # Kafka's form, sent back as given
    assert is_kafka_uuid_string(instance)
    assert "client_instance_id_kafka" not in got
    served.clock.advance(1000)
    binary = await served.client.post(
        PUSH_PATH,
        params={
            "client_instance_id": instance,
            "subscription_id": got["subscription_id"],
            "compression_type": 4,
        },
        content=FIXTURE.read_bytes(),
        headers={**HEADERS, "Content-Type": "application/octet-stream"},
    )
    assert binary.json() == {"throttle_time_ms": 0, "error_code": 0, "error": "NONE"}
    served.clock.advance(1000)
    as_json = await served.client.post(
        PUSH_PATH,
        json={
            "client_instance_id": str(parse_instance_id(instance)),  # the hex form is read too
            "subscription_id": got["subscription_id"],
            "compression_type": 4,
            "metrics": base64.b64encode(FIXTURE.read_bytes()).decode(),
            "terminating": True,
        },
        headers=HEADERS,
    )
    assert as_json.json()["error"] == "NONE"
    assert [p.context.terminating for p in served.exporter.pushes] == [False, True]
    assert {p.context.client_instance_id for p in served.exporter.pushes} == {parse_instance_id(instance)}
    assert served.exporter.pushes[0].context.client_source_address == "127.0.0.1"


async def test_PD_7_a_throttled_answer_carries_retry_after(served: Served) -> None:
    got = (await served.client.post(GET_PATH, json={})).json()
    again = await served.client.post(GET_PATH, json={"client_instance_id": got["client_instance_id"]})
    assert again.status_code == 200
    assert again.json()["error"] == "THROTTLING_QUOTA_EXCEEDED"
    assert again.json()["throttle_time_ms"] == 1000
    assert again.headers["Retry-After"] == "1"


BAD = "INVALID_REQUEST"
OCTETS = {"Content-Type": "application/octet-stream"}
JSON_TYPE = {"Content-Type": "application/json"}
FIVE = str(UUID(int=5))


@pytest.mark.parametrize(
    ("kwargs", "status", "error", "message"),
    [
        ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, BAD, "not JSON"),
        ({"json": [1, 2]}, 400, BAD, "JSON object"),
        ({"content": b"[" * 1_020 + b"]" * 1_020, "headers": JSON_TYPE}, 400, BAD, "nested too deep"),
        ({"json": {"client_instance_id": FIVE, "x": [0] * 2000}}, 400, BAD, "more than 1024 JSON values"),
        ({"json": {"client_instance_id": "nope"}}, 400, BAD, "is not a UUID"),
        ({"json": {"client_instance_id": FIVE, "subscription_id": "7"}}, 400, BAD, "must be an integer"),
        ({"json": {"client_instance_id": FIVE, "metrics": "***"}}, 400, BAD, "not base64"),
        ({"json": {"client_instance_id": FIVE, "terminating": "yes"}}, 400, BAD, "true or false"),
        (
            {"content": b"x" * 100_000, "headers": OCTETS},
            413,
            "TELEMETRY_TOO_LARGE",
            "Maximum request body size",
        ),
    ],
)
async def test_unreadable_requests_are_json_4xx_never_500(
    served: Served, kwargs: dict[str, object], status: int, error: str, message: str
) -> None:
    response = await served.client.post(PUSH_PATH, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status
    body = response.json()
    assert body["error"] == error
    assert message in body["message"]


async def test_protocol_errors_travel_in_the_body(served: Served) -> None:
    zero = await served.client.post(
        PUSH_PATH, json={"client_instance_id": str(UUID(int=0)), "metrics": "eA=="}
    )
    assert (zero.status_code, zero.json()["error"]) == (200, "INVALID_REQUEST")  # G-7


async def test_health_and_readiness(served: Served) -> None:
    assert (await served.client.get("/healthz")).json() == {"status": "ok"}
    assert (await served.client.get("/readyz")).status_code == 200
    served.health = Health(False, "last commit failed: disk full")
    unready = await served.client.get("/readyz")
    assert unready.status_code == 503
    assert unready.json() == {"status": "unready", "detail": "last commit failed: disk full"}
    assert (await served.client.get("/nope")).status_code == 404


PROTOBUF = {"Content-Type": "application/x-protobuf"}


async def test_the_sdk_http_exporter_lands_gzip_protobuf(served: Served) -> None:
    exporter = OTLPMetricExporter(
        endpoint=str(served.client.base_url).rstrip("/") + OTLP_METRICS_PATH,
        compression=Compression.Gzip,
        headers={"x-kafka-client-id": "app-2"},
    )
    result = await asyncio.to_thread(exporter.export, sdk_metrics("billing"))
    exporter.shutdown()
    assert result is MetricExportResult.SUCCESS
    [landed] = served.exporter.pushes
    assert (landed.context.client_id, landed.context.compression_type) == ("app-2", 1)
    resource = MetricsData.FromString(landed.payload).resource_metrics[0].resource
    assert {"service.name": "billing"}.items() <= {
        a.key: a.value.string_value for a in resource.attributes
    }.items()


async def test_otlp_json_is_accepted_and_answered_in_json(served: Served) -> None:
    body = {
        "resourceMetrics": [
            {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]}}
        ]
    }
    response = await served.client.post(
        OTLP_METRICS_PATH,
        content=gzip.compress(json.dumps(body).encode()),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert (response.status_code, response.json()) == (200, {})
    [landed] = served.exporter.pushes
    assert (
        MetricsData.FromString(landed.payload).resource_metrics[0].resource.attributes[0].value.string_value
        == "j"
    )
    bad = await served.client.post(
        OTLP_METRICS_PATH, content=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert bad.status_code == 400
    assert "not OTLP JSON" in bad.json()["message"]


async def test_otlp_bodies_refused_before_the_handler_get_a_google_rpc_status_not_retried(
    served: Served,
) -> None:
    """A body over the HTTP limit, or a huge integer in OTLP JSON (Python refuses more than 4,300
    digits), is answered as OTLP answers: a google.rpc.Status in the request's encoding."""
    large = await served.client.post(OTLP_METRICS_PATH, content=b"x" * 100_000, headers=PROTOBUF)
    assert large.status_code == 413
    assert "Retry-After" not in large.headers
    assert Status.FromString(large.content).code == 8  # RESOURCE_EXHAUSTED
    digits = b'{"resourceMetrics": [], "x": ' + b"9" * 5000 + b"}"
    huge = await served.client.post(
        OTLP_METRICS_PATH, content=digits, headers={"Content-Type": "application/json"}
    )
    assert huge.status_code == 400
    assert "not OTLP JSON" in huge.json()["message"]


async def test_QUO_14_an_over_quota_otlp_client_gets_429_with_retry_after(served: Served) -> None:
    served.pipeline.quotas.alter(ClientQuotaEntity(None, "greedy"), "producer_byte_rate", 100)
    headers = {**PROTOBUF, "x-kafka-client-id": "greedy"}
    body = resource_payload(**{"service.name": "x" * 2000})
    assert (await served.client.post(OTLP_METRICS_PATH, content=body, headers=headers)).status_code == 200
    held = await served.client.post(OTLP_METRICS_PATH, content=body, headers=headers)
    assert held.status_code == 429
    assert int(held.headers["Retry-After"]) >= 1
    assert Status.FromString(held.content).code == 8  # RESOURCE_EXHAUSTED
    polite = await served.client.post(
        OTLP_METRICS_PATH, content=body, headers={**PROTOBUF, "x-kafka-client-id": "p"}
    )
    assert polite.status_code == 200


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (b"\xff\xff", PROTOBUF, 400),
        (b"x", {**PROTOBUF, "Content-Encoding": "gzip"}, 400),
        (b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415),
        (b"x", {"Content-Type": "text/plain"}, 415),
    ],
)
async def test_PD_12_bad_otlp_requests_are_4xx_and_the_server_keeps_serving(
    served: Served, content: bytes, headers: dict[str, str], status: int
) -> None:
    response = await served.client.post(OTLP_METRICS_PATH, content=content, headers=headers)
    assert response.status_code == status
    assert "Retry-After" not in response.headers
    ok = await served.client.post(OTLP_METRICS_PATH, content=resource_payload(), headers=PROTOBUF)
    assert ok.status_code == 200


def _poisoned(headers: Mapping[str, str] | None = None) -> dict[bytes, bytes]:
    """``headers`` and ``x-kafka-client-id`` as the one byte 0xff, sent as is: not UTF-8, aiohttp reads
    it as the lone surrogate "\\udcff"."""
    return {**{k.encode(): v.encode() for k, v in (headers or {}).items()}, b"x-kafka-client-id": b"\xff"}


NAMED = "x-kafka-client-id is not valid text: invalid UTF-8 (byte 0xff) at character 0"


async def test_F3_a_header_that_is_not_utf8_is_refused_400_naming_it_and_a_batch_mate_lands(
    tmp_path: Path,
) -> None:
    """Against the real Delta exporter, with a default client-id quota (client ids become metric
    labels, F20): the poisoned requests are refused at the edge, the well-behaved export sent with
    them lands, and the sink stays ready with its ``/metrics`` readable."""
    clock = FakeClock()
    exporter = DeltaLandingExporter(str(tmp_path / "telemetry_pushes"), max_batch_latency_ms=20)
    await exporter.start()
    pipeline = kafka_pipeline(clock, exporter)
    pipeline.quotas.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", 10**9)
    metrics = metrics_exposition(pipeline.manager, pipeline.quotas, pipeline.request_metrics, clock.now_ms)
    server = TestServer(create_http_app(pipeline, ready=exporter.health, metrics=metrics), host="127.0.0.1")
    await server.start_server(**SERVER_OPTIONS)
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url(""))) as client:
            polite, otlp, otlp_json, push, get = await asyncio.gather(
                client.post(
                    OTLP_METRICS_PATH,
                    content=resource_payload(),
                    headers={**PROTOBUF, "x-kafka-client-id": "polite"},
                ),
                client.post(  # a fixed instance id: no uuid5 derivation to trip over the surrogate
                    OTLP_METRICS_PATH,
                    content=resource_payload(),
                    headers=_poisoned({**PROTOBUF, INSTANCE_ID_HEADER: FIVE}),
                ),
                client.post(
                    OTLP_METRICS_PATH, content=b"{}", headers=_poisoned({"Content-Type": "application/json"})
                ),
                client.post(
                    PUSH_PATH, json={"client_instance_id": FIVE, "metrics": "eA=="}, headers=_poisoned()
                ),
                client.post(GET_PATH, json={}, headers=_poisoned()),
            )
            assert polite.status_code == 200
            assert (otlp.status_code, Status.FromString(otlp.content)) == (400, Status(code=3, message=NAMED))
            assert (otlp_json.status_code, otlp_json.json()) == (400, {"code": 3, "message": NAMED})
            for kip714 in (push, get):
                assert kip714.status_code == 400
                assert kip714.json() == {"error_code": 42, "error": "INVALID_REQUEST", "message": NAMED}
            assert "Retry-After" not in otlp.headers  # not retryable: the client would send it again
            assert (await client.get("/readyz")).status_code == 200
            exposition = await client.get("/metrics")
            assert exposition.status_code == 200
            assert 'client_id="polite"' in exposition.text
    finally:
        await server.close()
        await exporter.shutdown()
    assert exporter.health().healthy
    rows = DeltaTable(exporter.table_uri).to_pyarrow_table().to_pylist()
    assert [row["client_id"] for row in rows] == ["polite"]


@pytest.mark.parametrize(
    ("header", "limit"),
    [
        ("x-kafka-client-id", DEFAULT_LIMITS.max_client_id_chars),
        ("x-kafka-client-software-name", DEFAULT_LIMITS.max_software_chars),
        ("x-kafka-client-software-version", DEFAULT_LIMITS.max_software_chars),
    ],
)
async def test_F4_client_text_over_its_limit_is_refused_400_naming_it(
    served: Served, header: str, limit: int
) -> None:
    long = {header: "x" * (limit + 1)}
    message = f"{header} is {limit + 1} characters long, over the limit of {limit}"
    got = await served.client.post(GET_PATH, json={}, headers=long)
    assert (got.status_code, got.json()["error"], got.json()["message"]) == (400, "INVALID_REQUEST", message)
    otlp = await served.client.post(
        OTLP_METRICS_PATH, content=resource_payload(), headers={**PROTOBUF, **long}
    )
    assert (otlp.status_code, Status.FromString(otlp.content).message) == (400, message)
    at_limit = {header: "x" * limit}
    assert (await served.client.post(GET_PATH, json={}, headers=at_limit)).json()["error"] == "NONE"
    assert served.exporter.pushes == []
