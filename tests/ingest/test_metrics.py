"""/metrics: the core's counters and the quota sensors, scraped from a real server."""

from __future__ import annotations

import httpx
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporters import Health, InMemoryExporter
from ingest.http_app import GET_PATH, PUSH_PATH, create_http_app
from ingest.metrics import metrics_exposition
from ingest.quotas import ClientQuotaEntity
from tests.support.clock import FakeClock
from tests.support.otlp import metrics_data
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration


async def test_TEL_24_a_scrape_shows_requests_errors_instances_and_quota_sensors() -> None:
    clock = FakeClock()
    pipeline = kafka_pipeline(clock, InMemoryExporter())
    pipeline.quotas.alter(ClientQuotaEntity(None, "rdkafka"), "producer_byte_rate", 1_000_000)
    app = create_http_app(
        pipeline,
        ready=lambda: Health(True),
        metrics=metrics_exposition(pipeline.manager, pipeline.quotas, clock.now_ms),
    )
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
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
    byte_rate = samples["telemetry_sink_quota_produce_byte_rate", (("client_id", "rdkafka"), ("user", ""))]
    assert byte_rate == pytest.approx(len(payload) / 10)  # one push over the padded 10 s window
    assert samples["telemetry_sink_quota_produce_queue_size", ()] == 0
