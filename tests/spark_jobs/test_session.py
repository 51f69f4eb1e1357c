"""The one SparkSession factory: its settings, their validation, and when it loads the Delta connector."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import SparkSession

from spark_jobs.session import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    DELTA_SNAPSHOT_PARTITIONS,
    SparkSettings,
    delta_connector_jars,
    local_cores,
    shuffle_partitions,
    uses_connector,
)


@pytest.mark.spark
def test_the_session_has_the_settings_delta_tables_need(spark: SparkSession) -> None:
    conf = spark.conf
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    assert conf.get("spark.sql.sources.partitionColumnTypeInference.enabled") == "false"
    assert conf.get("spark.sql.globalTempDatabase") == "telemetry"
    assert spark.sparkContext.getConf().get("spark.ui.enabled") == "false"
    assert spark.sparkContext.master == "local[2]"  # the tests' own master, passed through
    assert conf.get("spark.sql.codegen.cache.maxEntries") == "1000"  # a warm session reuses its classes
    # the tests' session loads the connector: its extension, its catalog, a log replay task a core
    assert str(conf.get("spark.sql.extensions")).split(",")[0] == DELTA_EXTENSION
    assert conf.get("spark.sql.catalog.spark_catalog") == DELTA_CATALOG
    assert conf.get(DELTA_SNAPSHOT_PARTITIONS) == "2"


def test_shuffle_partitions_follow_the_cores_of_a_local_master_and_spark_on_a_cluster() -> None:
    assert [local_cores(m) for m in ["local", "local[2]", "local[3, 2]", "local[*]"]] == [
        1, 2, 3, os.cpu_count(),
    ]  # fmt: skip
    assert shuffle_partitions("local[2]") == "8"  # what the benchmarks were tuned with
    assert shuffle_partitions("local[16]") == "64"
    for cluster in ["spark://master:7077", "k8s://https://api:6443", "yarn", "local-cluster[2,1,1024]"]:
        assert shuffle_partitions(cluster) is None  # Spark's 200, coalesced by adaptive execution


def test_settings_report_every_problem_at_once() -> None:
    settings = SparkSettings(
        master="",
        settings={"spark.sql.session.timeZone": "Europe/Paris", "spark.executor.memory": "2g"},
        delta_connector="sometimes",  # type: ignore[arg-type]
    )
    assert settings.validate() == [
        "spark.master must not be empty",
        "spark.delta_connector must be auto, on or off, not 'sometimes'",
        "spark.sql.session.timeZone is set by telemetry-sink to UTC and cannot be changed",
    ]


def test_the_connector_is_used_when_its_jar_is_on_the_classpath_or_asked_for() -> None:
    assert delta_connector_jars({}) == []  # pip's PySpark ships no Delta jar
    assert not uses_connector(SparkSettings())
    jar = "/opt/jars/delta-spark_4.2_2.13-4.4.1.jar"
    assert uses_connector(SparkSettings(settings={"spark.jars": f"/opt/jars/other.jar,{jar}"}))
    assert uses_connector(SparkSettings(delta_connector="on"))
    assert not uses_connector(SparkSettings(settings={"spark.jars": jar}, delta_connector="off"))
