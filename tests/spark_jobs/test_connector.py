"""The Delta Spark connector that setup fetches (``artifacts/delta-spark``) is the one ``delta-spark``'s
own ``configure_spark_with_delta_pip`` names for this PySpark, and ``spark_jobs.lake``'s two storage
paths (the connector and the delta-rs bridge), each in the tests' shared session, roll the same bronze
up into the same tables, first and incrementally, and commit nothing on a re-run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from artifacts import Artifacts
from exporters import TelemetryPush
from spark_jobs.jobs.rollup import RollupReport, run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.tables import ACTIVITY_TABLES, ROLLUP_TABLES
from tests.support.fleet import START_MS, context, kafka_pushes, land, sdk_pushes
from tests.support.gold import assert_gold_matches_reference
from tests.support.lake_rows import table_rows

DERIVED = ("metric_points", "decode_quarantine", *ROLLUP_TABLES, *ACTIVITY_TABLES)


@pytest.mark.integration
def test_delta_sparks_own_helper_names_the_connector_the_setup_fetches() -> None:
    from delta import configure_spark_with_delta_pip  # noqa: PLC0415 - delta-spark's helper, here only

    named = configure_spark_with_delta_pip(SparkSession.builder)._options["spark.jars.packages"]
    group, artifact, version = named.split(":")
    assert f"{artifact}-{version}.jar" in Artifacts("delta-spark").locked()
    assert group == "io.delta"


def _recomputed(report: RollupReport) -> dict[str, set[str]]:
    """The buckets each table recomputed (in one commit on the bridge, one a source on the
    connector)."""
    out: dict[str, set[str]] = {}
    for table in report.tables:
        out.setdefault(table.table, set()).update(table.partitions)
    return out


def _versions(root: Path) -> dict[str, int]:
    return {t: DeltaTable(str(root / t)).version() for t in DERIVED if (root / t / "_delta_log").is_dir()}


@pytest.mark.spark
def test_the_connector_and_the_bridge_give_the_same_tables_first_incrementally_and_on_a_rerun(
    lake: DeltaLake, connector_lake: DeltaLake, tmp_path: Path
) -> None:
    bridge, connector = tmp_path / "bridge", tmp_path / "connector"
    first = kafka_pushes(clients=3, pushes=4) + sdk_pushes()
    later = kafka_pushes(clients=3, pushes=2, start_ms=START_MS + 4 * 30_000, seed=7)
    land(first, str(bridge))
    land([TelemetryPush(context(3, START_MS), b"\x0a\xff not otlp")], str(bridge), replica="r2")
    shutil.copytree(bridge, connector)  # the same bronze, push ids and all
    for batch in (None, later):
        if batch is not None:
            land(batch, str(bridge))
            shutil.rmtree(connector / "telemetry_pushes")
            shutil.copytree(bridge / "telemetry_pushes", connector / "telemetry_pushes")
        on, off = run_rollup(connector_lake, str(connector)), run_rollup(lake, str(bridge))
        assert on.decode.points == off.decode.points > 0
        assert _recomputed(on) == _recomputed(off)
        for table in DERIVED:
            assert table_rows(connector, table) == table_rows(bridge, table), table
    assert assert_gold_matches_reference(connector) == assert_gold_matches_reference(bridge) > 0
    versions = _versions(connector)
    again = run_rollup(connector_lake, str(connector))
    assert (again.decode.points, again.tables, _versions(connector)) == (0, [], versions)
