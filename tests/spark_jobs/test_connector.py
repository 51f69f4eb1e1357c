"""The lake's two storage paths (``spark_jobs.lake``) give the same tables: the same bronze, landed by
the real exporter, rolled up by ``telemetry-sink rollup --once`` with the Delta Spark connector (the
jars ``artifacts/delta-spark`` fetched, those ``delta-spark``'s own ``configure_spark_with_delta_pip``
names) and with the delta-rs bridge, each in a JVM of its own: every silver and gold table holds the
same rows. (Run in the non-Spark process: neither rollup starts a JVM in the test's own process.)"""

from __future__ import annotations

import json
import math
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from artifacts import Artifacts, classpath
from spark_jobs.tables import ACTIVITY_TABLES, ROLLUP_TABLES
from tests.support.fleet import kafka_pushes, land
from tests.support.process import CLI

pytestmark = pytest.mark.integration

DERIVED = ("metric_points", "decode_quarantine", *ROLLUP_TABLES, *ACTIVITY_TABLES)


def _rollup(root: Path, *connector: str) -> dict[str, Any]:
    """``telemetry-sink rollup --once`` over ``root`` with the ``connector`` options; its JSON summary."""
    done = subprocess.run(
        [CLI, "rollup", "--once", "--data-root", str(root), "--master", "local[2]",
         "--conf", "spark.sql.shuffle.partitions=2", *connector],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a map, as pairs
            return sorted((k, _canonical(v)) for k, v in value)
        return [_canonical(v) for v in value]
    return value


def _rows(root: Path, table: str) -> Counter[str]:
    """The table's rows as a multiset of canonical JSON texts (none when it does not exist)."""
    path = root / table
    if not (path / "_delta_log").is_dir():
        return Counter()
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter(
        json.dumps({k: _canonical(v) for k, v in row.items()}, sort_keys=True, default=str) for row in rows
    )


def test_delta_sparks_own_helper_names_the_connector_the_setup_fetches() -> None:
    from delta import configure_spark_with_delta_pip  # noqa: PLC0415 - delta-spark's helper, here only

    named = configure_spark_with_delta_pip(SparkSession.builder)._options["spark.jars.packages"]
    group, artifact, version = named.split(":")
    assert f"{artifact}-{version}.jar" in Artifacts("delta-spark").locked()
    assert group == "io.delta"


def test_the_connector_and_the_bridge_give_the_same_tables(tmp_path: Path) -> None:
    connector, bridge = tmp_path / "connector", tmp_path / "bridge"
    pushes = kafka_pushes(clients=4, pushes=8)
    for root in (connector, bridge):
        land(pushes, str(root))
    jars = classpath("delta-spark").replace(":", ",")
    by_connector = _rollup(connector, "--delta-connector", "on", "--conf", f"spark.jars={jars}")
    by_bridge = _rollup(bridge, "--delta-connector", "off")
    assert by_connector["points"] == by_bridge["points"] > 0
    for table in DERIVED:
        assert _rows(connector, table) == _rows(bridge, table), table
