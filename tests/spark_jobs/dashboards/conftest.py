"""One dataset for the dashboard's Spark tests: pushes landed by the real exporter, quota samples by
the sink's recorder, config changes by the admin API's log, rolled up by the real job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession

from exporters import QuotaSample, TelemetryPush
from ingest.admin.config_log import ConfigLog, QuotaChange, SubscriptionChange
from quotas import ClientQuotaEntity
from spark_jobs.dashboards import Window
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from tests.support.fleet import START_MS, context, kafka_pushes, land, land_quota_samples

HOSTILE = "</script><img src=x onerror=\"document.title='owned'\">"
"""A client id a client may well send: the page must show it as text."""
BOB = (("client-id", ""), ("user", "bob"))
ALICE = (("client-id", ""), ("user", "alice"))
SNAPSHOTS = 8


@dataclass(frozen=True)
class Dataset:
    root: str
    pushes: list[TelemetryPush]
    """Every push landed, the quarantined one last."""
    window: Window


def _samples(i: int) -> list[QuotaSample]:
    return [
        QuotaSample("Produce", "throttle-time", BOB, 50.0 * i),
        QuotaSample("Produce", "throttle-time", ALICE, 10.0),
        QuotaSample("ControllerMutation", "tokens", BOB, 5.0 - i),
        QuotaSample("Requests", "PushTelemetry/0", BOB, 5.0),
        QuotaSample("Requests", "PushTelemetry/89", BOB, 2.0),
        QuotaSample("Requests", "GetTelemetrySubscriptions/117", ALICE, 1.0),
    ]


@pytest.fixture(scope="session")
def dataset(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = str(tmp_path_factory.mktemp("dashboard"))
    pushes = kafka_pushes(clients=6, pushes=SNAPSHOTS)
    hostile = [
        TelemetryPush(context(7, p.context.received_ms + 500, user="bob", client_id=HOSTILE), p.payload)
        for p in pushes
        if p.context.client_instance_id.int == 1  # client 0's payloads, a producer's
    ]
    land([*pushes, *hostile], root)
    quarantined = TelemetryPush(context(9, START_MS, user="bob"), b"not otlp")
    land([quarantined], root, replica="r2")
    land_quota_samples([(START_MS + i * 30_000, _samples(i)) for i in range(SNAPSHOTS)], root)
    log = ConfigLog(f"{root}/config_log", replica_id="r1")
    producers = SubscriptionChange(
        "producers", {"metrics": ("org.apache.kafka.producer.",), "interval.ms": 30000}
    )
    log.append([producers], "User:admin", START_MS - 3_600_000)
    log.append(
        [QuotaChange(ClientQuotaEntity(user="bob"), "producer_byte_rate", 1024.0)], "User:ops", START_MS
    )
    log.append(
        [QuotaChange(ClientQuotaEntity(user="bob"), "producer_byte_rate", None)], "User:ops", START_MS + 1
    )
    run_rollup(DeltaLake(spark), root)
    start = datetime.fromtimestamp(START_MS / 1000, UTC).replace(second=0) - timedelta(minutes=5)
    return Dataset(root, [*pushes, *hostile, quarantined], Window(start, start + timedelta(hours=1), top=3))
