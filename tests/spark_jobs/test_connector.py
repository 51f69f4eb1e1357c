"""The Delta Spark connector that setup fetches (``artifacts/delta-spark``) is the one ``delta-spark``'s
own ``configure_spark_with_delta_pip`` names for this PySpark. (That both storage paths of
``spark_jobs.lake`` give the same tables is checked by ``benchmarks/rollup/connector.py``: two cold JVMs
cost five minutes of ``make test``.)"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from artifacts import Artifacts

pytestmark = pytest.mark.integration


def test_delta_sparks_own_helper_names_the_connector_the_setup_fetches() -> None:
    from delta import configure_spark_with_delta_pip  # noqa: PLC0415 - delta-spark's helper, here only

    named = configure_spark_with_delta_pip(SparkSession.builder)._options["spark.jars.packages"]
    group, artifact, version = named.split(":")
    assert f"{artifact}-{version}.jar" in Artifacts("delta-spark").locked()
    assert group == "io.delta"
