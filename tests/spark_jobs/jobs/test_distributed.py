"""The rollup on a Spark cluster: executors in JVMs of their own (Spark's ``local-cluster`` master, a
master and two workers that Spark starts, each executor a process with its own Python workers) give
the tables a ``local`` master gives, so nothing in the jobs depends on running inside the driver's
process. Both are ``telemetry-sink rollup --once`` processes (not the tests' shared session), so this
runs beside the Spark tests rather than after them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from exporters import TelemetryPush
from spark_jobs.tables import ACTIVITY_TABLES
from tests.support.fleet import START_MS, context, kafka_pushes, land, sdk_pushes
from tests.support.gold import assert_gold_matches_reference
from tests.support.lake_rows import table_rows

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("telemetry-sink"))
CLUSTER = "local-cluster[2,1,1024]"
"""Two workers of one core and 1 GiB each: one executor JVM each."""


def _spark_home(home: Path) -> Path:
    """A Spark home of the test's own, with pip's PySpark's scripts and jars: the workers of a
    ``local-cluster`` master keep their executors' folders in ``work`` under it."""
    installed = Path(pyspark.__file__).parent
    home.mkdir()
    for part in ("bin", "jars"):
        (home / part).symlink_to(installed / part)
    return home


def _rollup(root: Path, master: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``telemetry-sink rollup --once`` of ``root`` on ``master``: its JSON summary."""
    done = subprocess.run(
        [CLI, "rollup", "--once", "--data-root", str(root), "--master", master,
         "--delta-connector", "off"],
        capture_output=True, text=True, timeout=600, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def test_a_rollup_with_executors_in_their_own_jvms_gives_the_same_tables(tmp_path: Path) -> None:
    pushes = kafka_pushes(clients=3, pushes=4) + sdk_pushes()
    local, cluster, home = tmp_path / "local", tmp_path / "cluster", tmp_path / "spark-home"
    land(pushes, str(local))
    land([TelemetryPush(context(3, START_MS), b"\x0a\xff not otlp")], str(local), replica="r2")
    shutil.copytree(local, cluster)  # the same bronze, push ids and all
    on_cluster = _rollup(cluster, CLUSTER, {"SPARK_HOME": str(_spark_home(home))})
    assert on_cluster["points"] == _rollup(local, "local[2]")["points"] > 0
    executors = sorted(p.name for p in (home / "work").glob("app-*/*") if (p / "stderr").is_file())
    assert executors == ["0", "1"]  # two executor processes ran, apart from the driver
    for table in ("metric_points", "decode_quarantine", *ACTIVITY_TABLES):
        assert table_rows(cluster, table) == table_rows(local, table), table
    assert assert_gold_matches_reference(cluster) == assert_gold_matches_reference(local) > 0
