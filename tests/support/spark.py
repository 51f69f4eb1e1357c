"""One real local Spark session, shared by every Spark test in the session (starting a JVM takes
seconds), wherever the test lives (a pytest plugin of ``tests/conftest.py``). It loads the Delta Spark
connector that setup fetched (``artifacts/delta-spark``), so that both storage paths of
``spark_jobs.lake`` run in it: ``lake`` is the delta-rs bridge, ``connector_lake`` the connector."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from artifacts import classpath
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session

__all__ = ["connector_lake", "lake", "pytest_collection_modifyitems", "spark"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs the Spark tests in a process of their own (``-m spark``): one that uses the
    session without the mark would start the JVM in the other process."""
    for item in items:
        uses_spark = {"spark", "lake", "connector_lake"} & set(getattr(item, "fixturenames", ()))
        if uses_spark and item.get_closest_marker("spark") is None:
            raise pytest.UsageError(f"{item.nodeid} uses Spark: mark it with pytest.mark.spark")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        SparkSettings(
            master="local[2]",
            app_name="telemetry-sink-tests",
            settings={
                "spark.sql.shuffle.partitions": "2",
                "spark.default.parallelism": "2",
                "spark.jars": classpath("delta-spark").replace(os.pathsep, ","),
            },
            delta_connector="on",
        )
    )
    yield session
    session.stop()


@pytest.fixture
def lake(spark: SparkSession) -> DeltaLake:
    return DeltaLake(spark)


@pytest.fixture
def connector_lake(spark: SparkSession) -> DeltaLake:
    return DeltaLake(spark, connector=True)
