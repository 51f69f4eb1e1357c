"""Forwarded clients from the broker to the dashboard (docs/broker-plugin.md): Kafka's Java client and
librdkafka produce to a real Kafka 4.4 broker with the plugin; their telemetry lands (librdkafka's last
push as its terminating one), ``telemetry-sink rollup``'s job rolls it up under each client instance and
quota entity (the Java producer's own record count is its rolled-up ``record.send.total``; every row is
the independent reference's), and the dashboard's page lists both clients."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_jobs.dashboards import Window, build_page
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from tests.support.dashboard_page import page_data, records
from tests.support.gold import assert_gold_matches_reference
from tests.support.kafka_broker import KafkaBroker, KafkaOracle, java_command
from tests.support.landed import landed_rows, until, until_landed
from tests.support.process import Running, line_driven

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DEADLINE_S: Final = 120.0
RECORDS: Final = 25
"""Records the Java producer sends: its own ``record-send-total``."""
PRODUCER: Final = Path(__file__).resolve().parents[1] / "support" / "clients" / "librdkafka_producer.py"
SENT: Final = "org.apache.kafka.producer.record.send.total"


def _rows(uri: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return rows


def test_forwarded_clients_roll_up_and_show_on_the_dashboard_under_their_own_identity(
    spark: SparkSession, kafka_oracle: KafkaOracle, broker: KafkaBroker, sink: Running
) -> None:
    java = [
        *java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient", "producer",
        f"bootstrap.servers={broker.bootstrap}", "client.id=rolled-java", f"records={RECORDS}",
    ]  # fmt: skip
    librdkafka = [sys.executable, str(PRODUCER), str(broker.plaintext_port), "rolled-librdkafka"]
    with line_driven(java) as java_client, line_driven(librdkafka) as librdkafka_client:
        assert java_client.stdout is not None
        assert librdkafka_client.stdout is not None
        instance_id = java_client.stdout.readline().split()[1]  # said once its records were sent
        librdkafka_client.stdout.readline()
        until_landed(sink.table_uri, "client_instance_id", instance_id, 2, DEADLINE_S)
        until_landed(sink.table_uri, "client_id", "rolled-librdkafka", 2, DEADLINE_S)

    def terminated() -> bool:  # librdkafka's last push, sent as it closed (the Java producer, closed idle,
        rows = landed_rows(sink.table_uri, "client_id", "rolled-librdkafka")  # sends none: its oracle test)
        return any(row["terminating"] for row in rows)

    until("librdkafka's terminating push", terminated, DEADLINE_S)
    root = str(Path(sink.table_uri).parents[1])
    run_rollup(DeltaLake(spark), root)

    clients = _rows(f"{root}/rollup_client_1m")
    java_rows = [row for row in clients if row["client_instance_id"] == instance_id]
    assert {(r["client_id"], r["principal"], r["client_software_name"]) for r in java_rows} == {
        ("rolled-java", "User:ANONYMOUS", "apache-kafka-java")
    }
    sent = [row for row in java_rows if row["metric_name"] == SENT]
    assert {row["temporality"] for row in sent} == {"delta"}  # as the broker's subscription asks
    assert sum(row["value_sum"] for row in sent) == RECORDS  # what the client itself counted
    librdkafka_rows = [row for row in clients if row["client_id"] == "rolled-librdkafka"]
    assert {r["client_software_name"] for r in librdkafka_rows} == {"confluent-kafka-python"}
    assert assert_gold_matches_reference(Path(root)) > 0
    entities = {row["quota_entity"] for row in _rows(f"{root}/rollup_entity_1m")}
    assert entities == {row["quota_entity"] for row in java_rows + librdkafka_rows}

    now = datetime.now(UTC)
    html, _ = build_page(spark, DeltaLake(spark), root, Window(now - timedelta(hours=1), now, top=50))
    listed = records(page_data(html), "clients")
    assert {(r["client_instance_id"], r["client_id"]) for r in listed} >= {(instance_id, "rolled-java")}
    assert "rolled-librdkafka" in {r["client_id"] for r in listed}
