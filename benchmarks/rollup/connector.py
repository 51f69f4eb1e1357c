"""The lake's two storage paths (``spark_jobs.lake``) on the same bronze, in one run: the Delta Spark
connector (the jars ``artifacts/delta-spark`` fetched at setup) against the delta-rs bridge, each a
cold ``telemetry-sink rollup --once`` in a JVM of its own; prints each one's job time (the JSON
summary's ``seconds``) and wall time, the ratio connector / bridge, and checks that every silver and
gold table holds the same rows (exit 1 if not).

The cold case only: ``make test`` compares the two paths in the tests' shared session
(``tests/spark_jobs/test_connector.py``), and ``bench.py --delta-connector on`` times the warm one.

Run: ``.venv/bin/python benchmarks/rollup/connector.py [--clients 4 --pushes 6]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repo importable

import argparse
import json
import subprocess
import tempfile
import time
from typing import Any

from artifacts import classpath
from spark_jobs.tables import ACTIVITY_TABLES, ROLLUP_TABLES
from tests.support.fleet import kafka_pushes, land
from tests.support.lake_rows import table_rows

DERIVED = ("metric_points", "decode_quarantine", *ROLLUP_TABLES, *ACTIVITY_TABLES)
CLI = str(Path(sys.executable).with_name("telemetry-sink"))


def _rollup(root: Path, *connector: str) -> tuple[dict[str, Any], float]:
    """``telemetry-sink rollup --once`` over ``root`` with the ``connector`` options: its JSON summary
    and its wall time."""
    started = time.monotonic()
    done = subprocess.run(
        [CLI, "rollup", "--once", "--data-root", str(root), "--master", "local[2]",
         "--conf", "spark.sql.shuffle.partitions=2", *connector],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"rollup {connector} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--pushes", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        connector, bridge = Path(work) / "connector", Path(work) / "bridge"
        pushes = kafka_pushes(clients=args.clients, pushes=args.pushes)
        for root in (connector, bridge):
            land(pushes, str(root))
        jars = classpath("delta-spark").replace(":", ",")
        on, on_wall = _rollup(connector, "--delta-connector", "on", "--conf", f"spark.jars={jars}")
        off, off_wall = _rollup(bridge, "--delta-connector", "off")
        different = [t for t in DERIVED if table_rows(connector, t) != table_rows(bridge, t)]
    print(f"points {on['points']} (connector) / {off['points']} (bridge)")
    print(f"connector: job {on['seconds']:.1f} s, wall {on_wall:.1f} s")
    print(f"bridge:    job {off['seconds']:.1f} s, wall {off_wall:.1f} s")
    print(f"connector / bridge job time: {on['seconds'] / off['seconds']:.2f}")
    print("tables: " + ("all equal" if not different else f"DIFFERENT: {', '.join(different)}"))
    if different or on["points"] != off["points"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
