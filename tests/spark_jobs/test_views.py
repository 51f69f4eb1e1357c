"""Every table as a Spark SQL view under ``telemetry``, and the documented example queries run on them."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from exporters import QuotaSample, TelemetryPush
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.views import EXAMPLE_QUERIES, register_views
from tests.support.fleet import START_MS, context, kafka_pushes, land, land_quota_samples
from tests.support.paths import REPO

pytestmark = pytest.mark.spark
BOB = (("client-id", ""), ("user", "bob"))


@pytest.fixture(scope="module")
def telemetry(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("views")
    land(kafka_pushes(clients=4, pushes=4), str(root))
    land([TelemetryPush(context(9, START_MS, user="bob"), b"not otlp")], str(root), replica="r2")
    land_quota_samples(
        [
            (START_MS, [QuotaSample("Produce", "throttle-time", BOB, 250.0)]),
            (START_MS + 30_000, [QuotaSample("Requests", "PushTelemetry/89", BOB, 4.0)]),
        ],
        str(root),
    )
    lake = DeltaLake(spark)
    run_rollup(lake, str(root))
    return register_views(lake, str(root))


def test_every_table_is_a_view_in_the_telemetry_namespace(spark: SparkSession, telemetry: list[str]) -> None:
    assert set(telemetry) == {
        f"telemetry.{name}"
        for name in (
            "telemetry_pushes",
            "quota_samples",
            "metric_points",
            "decode_quarantine",
            "rollup_client_1m",
            "rollup_client_1h",
            "rollup_entity_1m",
            "rollup_entity_1h",
            "rollup_entity_activity_1m",
            "rollup_entity_activity_1h",
        )
    }
    listed = {row.tableName for row in spark.sql("SHOW TABLES IN telemetry").collect()}
    assert {name.split(".")[1] for name in telemetry} <= listed
    pushes = spark.sql("SELECT COUNT(*) AS n FROM telemetry.telemetry_pushes").first()
    assert pushes is not None
    assert pushes["n"] == 17  # both replicas' shards


@pytest.mark.parametrize("title", list(EXAMPLE_QUERIES))
def test_documented_example_queries_run_and_answer(
    spark: SparkSession, telemetry: list[str], title: str
) -> None:
    rows = spark.sql(EXAMPLE_QUERIES[title]).collect()
    assert rows, title
    if title == "most throttled quota entities":
        assert (rows[0]["quota_entity"], rows[0]["worst_throttle_ms"]) == ("client-id=,user=bob", 250.0)
    if title == "push errors by code":
        assert [(r["rpc"], r["error_code"], r["requests"]) for r in rows] == [("PushTelemetry", 89, 4.0)]


def test_the_example_queries_are_the_ones_the_docs_show() -> None:
    docs = (REPO / "docs" / "spark.md").read_text()
    for title, query in EXAMPLE_QUERIES.items():
        assert title in docs
        assert query.strip() in docs, title
