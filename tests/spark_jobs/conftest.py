"""One real local Spark session, shared by every Spark test (starting a JVM takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session(
        SparkSettings(
            master="local[2]",
            app_name="telemetry-sink-tests",
            settings={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
            delta_connector="off",
        )
    )
    yield session
    session.stop()


@pytest.fixture
def lake(spark: SparkSession) -> DeltaLake:
    return DeltaLake(spark)
