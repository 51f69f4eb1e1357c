"""Unmodified Kafka clients against the sink's Kafka listener: confluent-kafka's Producer, Consumer and
AdminClient (librdkafka, bundled) with a short push interval. Their pushes land in Delta with the
instance id the sink gave them, their software name and version (ApiVersions v3), the compression the
listener advertises, and the terminating push on close; a subscription change makes them re-Get and
go on (UNKNOWN_SUBSCRIPTION_ID, PD-1).

The clients run in threads with their own timers; the test waits for what they do on an event the
exporter sets as each push lands, never for wall time as such."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from ingest.config import SinkConfig
from ingest.server import Sink
from subscriptions import ClientContext, kafka_uuid_string
from subscriptions.metrics import PUSH
from tests.support.clock import eventually
from tests.support.librdkafka import Landed, TelemetryLog, running_client

pytestmark = pytest.mark.integration

INTERVAL_MS = 300
SUBSCRIPTION = "kafka-client-metrics"
ADMIN = ClientContext(principal="User:admin")
SOFTWARE_VERSION = f"{confluent_kafka.__version__}-rdkafka-{confluent_kafka.libversion()[0]}"


@asynccontextmanager
async def running_sink(tmp_path: Path, **client_metrics: object) -> AsyncIterator[tuple[Sink, Landed]]:
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "replica_id": "kafka-test",
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "shutdown_grace_s": 5},
            "kafka_listener": {"port": 0, "node_id": 1},
            "security": {"super_users": ["User:admin"]},
            "client_metrics": client_metrics,
            "exporter": {"options": {"max_batch_latency_ms": 5}, "quota_sample_period_s": 0},
            "subscriptions": {SUBSCRIPTION: {"metrics": "org.apache.kafka.", "interval.ms": INTERVAL_MS}},
        }
    )
    sink = Sink(config)
    landed = Landed(sink.exporter)
    sink.pipeline.exporter = landed
    await sink.start()
    try:
        yield sink, landed
    finally:
        await sink.stop()


def _bootstrap(sink: Sink, **conf: Any) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{sink.kafka_port}", **conf}


def _rows(sink: Sink) -> list[dict[str, Any]]:
    table: pa.Table = DeltaTable(sink.exporter.table_uri).to_pyarrow_table()  # type: ignore[attr-defined]
    return sorted(table.to_pylist(), key=lambda row: (row["received_at"], row["batch_seq"]))


def _metric_names(payload: bytes) -> set[str]:
    data = MetricsData.FromString(payload)
    return {m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}


@pytest.mark.parametrize(
    ("compression", "compression_id"), [("zstd", 4), ("lz4", 3), ("gzip", 1), ("snappy", 2)]
)
async def test_producer_pushes_land_with_its_instance_software_compression_and_terminating_push(
    tmp_path: Path, compression: str, compression_id: int
) -> None:
    async with running_sink(tmp_path, **{"client.metrics.accepted.compression.types": compression}) as (
        sink,
        landed,
    ):
        telemetry = TelemetryLog()
        conf = _bootstrap(sink, **{"client.id": "orders-app"}, **telemetry.conf())
        async with running_client(lambda: confluent_kafka.Producer(conf), telemetry=telemetry):
            await landed.until(lambda pushes: len(pushes) >= 2)
            instances = list(sink.manager.instances())
            assert len(instances) == 1  # the one the sink gave out in its Get (PD-4: adopted as is)
            instance_id = instances[0].client_instance_id
        await landed.until(lambda pushes: pushes[-1].context.terminating)
        await eventually(lambda: sink.manager.instance(instance_id) is None)  # evicted with its connection
    rows = _rows(sink)
    assert len(rows) >= 3
    assert {row["client_instance_id"] for row in rows} == {kafka_uuid_string(instance_id)}  # as Kafka logs it
    assert {row["client_id"] for row in rows} == {"orders-app"}
    assert {row["client_software_name"] for row in rows} == {"confluent-kafka-python"}
    assert {row["client_software_version"] for row in rows} == {SOFTWARE_VERSION}
    assert {row["client_source_address"] for row in rows} == {"127.0.0.1"}
    assert {row["compression_type"] for row in rows} == {compression_id}
    assert [row["terminating"] for row in rows] == [False] * (len(rows) - 1) + [True]
    names = set().union(*(_metric_names(row["payload"]) for row in rows))
    assert names
    assert all(name.startswith("org.apache.kafka.producer.") for name in names)


async def test_consumer_pushes_land_and_close_sends_the_terminating_push(tmp_path: Path) -> None:
    async with running_sink(tmp_path) as (sink, landed):
        telemetry = TelemetryLog()
        conf = _bootstrap(sink, **{"group.id": "g1", "client.id": "billing"}, **telemetry.conf())
        async with running_client(lambda: confluent_kafka.Consumer(conf), lambda c: c.close(), telemetry):
            await landed.until(lambda pushes: len(pushes) >= 1)
        await landed.until(lambda pushes: pushes[-1].context.terminating)
    rows = _rows(sink)
    assert {row["client_id"] for row in rows} == {"billing"}
    assert rows[-1]["terminating"] is True
    assert {row["compression_type"] for row in rows} == {4}  # zstd, the first advertised by default
    names = set().union(*(_metric_names(row["payload"]) for row in rows))
    assert any(name.startswith("org.apache.kafka.consumer.") for name in names)


async def test_admin_client_lists_the_node_describes_the_cluster_and_pushes(tmp_path: Path) -> None:
    async with running_sink(tmp_path) as (sink, landed):
        telemetry = TelemetryLog()
        conf = _bootstrap(sink, **{"client.id": "ops"}, **telemetry.conf())
        async with running_client(lambda: AdminClient(conf), telemetry=telemetry) as admin:
            metadata = await admin.call(lambda a: a.list_topics(timeout=10))
            assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
                1: ("127.0.0.1", sink.kafka_port)
            }
            assert metadata.topics == {}
            cluster = await admin.call(lambda a: a.describe_cluster().result(10))
            assert cluster.cluster_id == "telemetry-sink"
            assert [(n.id, n.port) for n in cluster.nodes] == [(1, sink.kafka_port)]
            await landed.until(lambda pushes: len(pushes) >= 1)
        await landed.until(lambda pushes: pushes[-1].context.terminating)
    assert {row["client_id"] for row in _rows(sink)} == {"ops"}


async def test_unknown_subscription_id_after_a_change_makes_the_client_re_get_and_go_on(
    tmp_path: Path,
) -> None:
    async with running_sink(tmp_path) as (sink, landed):
        async with running_client(lambda: confluent_kafka.Producer(_bootstrap(sink))):
            await landed.until(lambda pushes: len(pushes) >= 1)
            first_id = landed.pushes[0].context.subscription_id
            narrower: dict[str, str | int] = {
                "metrics": "org.apache.kafka.producer.",
                "interval.ms": INTERVAL_MS + 100,
            }
            changed = await sink.admin.alter_subscription(ADMIN, SUBSCRIPTION, narrower)
            assert changed.error == 0
            await landed.until(lambda pushes: pushes[-1].context.subscription_id != first_id)
            await landed.until(lambda pushes: sum(p.context.subscription_id != first_id for p in pushes) >= 2)
        assert sink.manager.stats.errors[(PUSH, 117)] >= 1  # the push that found the change
        assert sink.manager.stats.get_requests >= 2  # and the re-Get it made at once (PD-1)
    rows = _rows(sink)
    assert len({row["client_instance_id"] for row in rows}) == 1  # the same instance went on
    assert len({row["subscription_id"] for row in rows}) == 2
