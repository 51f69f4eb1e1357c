"""An older librdkafka against the sink's Kafka listener: confluent-kafka 2.5.3 (librdkafka 2.5.3, the
first with KIP-714's client telemetry), installed at setup beside the project's own
(``artifacts/confluent-kafka-2.5``), run in a process of its own with it first on the path. Its pushes
land with its client id and its software name and version (docs/kafka-oracle.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.landed import until_landed
from tests.support.process import line_driven, running_sink

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[4]
OLDER = ROOT / ".venv" / "clients" / "confluent-kafka-2.5"
"""Where setup installs confluent-kafka 2.5.3 (scripts/setup.sh)."""
PRODUCER = ROOT / "tests" / "support" / "clients" / "librdkafka_producer.py"
SUBSCRIPTION = 'subscriptions:\n  all: {metrics: "org.apache.kafka.", interval.ms: 500}\n'
DEADLINE_S = 60.0


def test_confluent_kafka_2_5_pushes_and_its_telemetry_lands_with_its_version(tmp_path: Path) -> None:
    assert (OLDER / "confluent_kafka").is_dir(), f"{OLDER}: not installed (make setup installs it)"
    environment = {**os.environ, "PYTHONPATH": str(OLDER)}
    with (
        running_sink(tmp_path, tmp_path / "data", extra=SUBSCRIPTION) as sink,
        line_driven(
            [sys.executable, str(PRODUCER), str(sink.kafka_port), "older-librdkafka"], env=environment
        ) as client,
    ):
        assert client.stdout is not None
        assert client.stdout.readline().split() == ["version", "2.5.3", "2.5.3"]
        rows = until_landed(sink.table_uri, "client_id", "older-librdkafka", 2, DEADLINE_S)
    assert {row["client_software_name"] for row in rows} == {"confluent-kafka-python"}
    assert {row["client_software_version"] for row in rows} == {"2.5.3-rdkafka-2.5.3"}
    assert len({row["client_instance_id"] for row in rows}) == 1
