"""Benchmark of ``telemetry-sink dashboard``: the time to render the page over one day of a 10,000-client
fleet's 1-minute rollups, against the time of the same queries alone, in one run.

1. **Data** (timed apart, not in the ratio): ``fleet.write_fleet`` writes the day straight into the
   gold tables of a temporary data root (or ``--data DIR``, reused when it exists).
2. **Warm-up:** the whole dashboard over the first hour (JIT, file listings).
3. **Queries alone (the ceiling):** the views registered, the session variables set, the window's
   views created, and each query of ``spark_jobs/dashboards/queries/`` run with
   ``spark.sql(...).toArrow()``, nothing else.
4. **Dashboard:** ``build_page`` (views, queries, rows to JSON, charts, HTML) and the page written to
   a file, as ``telemetry-sink dashboard --out`` does.

Steps 3 and 4 alternate ``--repeat`` times; the best of each counts. Printed: rows per table, each
query's time, the page's size, the ratio queries alone / dashboard (1.0: rendering costs nothing on
top of the queries), and one JSON line with every figure.

Run: ``make bench`` or ``.venv/bin/python benchmarks/dashboard/bench.py [--clients N --hours H
--repeat K --data DIR]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import json
import platform
import shutil
import tempfile
import time
from datetime import timedelta

import pyspark
from deltalake import DeltaTable

from benchmarks.dashboard.fleet import DAY_START, FleetSpec, write_fleet
from spark_jobs.dashboards import Window, build_page
from spark_jobs.dashboards.queries import QUERY_NAMES, create_window_views, query_text, set_variables
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session
from spark_jobs.views import register_views


def queries_alone(lake: DeltaLake, root: str, window: Window) -> dict[str, float]:
    """Each query's seconds, views and variables included in the first."""
    spark = lake.spark
    started = time.perf_counter()
    views = register_views(lake, root)
    set_variables(spark, window)
    create_window_views(spark, views)
    seconds = {}
    for name in QUERY_NAMES:
        spark.sql(query_text(name)).toArrow()
        seconds[name] = time.perf_counter() - started
        started = time.perf_counter()
    return seconds


def dashboard(lake: DeltaLake, root: str, window: Window, out: Path) -> tuple[float, int, dict[str, float]]:
    started = time.perf_counter()
    page, results = build_page(lake.spark, lake, root, window)
    out.write_text(page, encoding="utf-8")
    return time.perf_counter() - started, len(page), {n: r.seconds for n, r in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--entities", type=int, default=200)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--interval-s", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data", help="data root to use (written when it does not exist, kept after)")
    args = parser.parse_args()
    spec = FleetSpec(
        clients=args.clients, entities=args.entities, hours=args.hours, interval_s=args.interval_s
    )
    scratch = Path(tempfile.mkdtemp(prefix="dashboard-bench-"))
    root = args.data or str(scratch / "data")
    try:
        started = time.perf_counter()
        if not Path(root, "rollup_client_1m").exists():
            write_fleet(root, spec)
        rows = {
            t: DeltaTable(f"{root}/{t}").to_pyarrow_dataset().count_rows()
            for t in ("rollup_client_1m", "rollup_client_1h", "rollup_entity_1m", "rollup_entity_activity_1m")
        }
        print(f"data: {rows} in {time.perf_counter() - started:.1f} s ({root})", flush=True)

        spark = spark_session(
            SparkSettings(master=args.master, app_name="dashboard-bench", delta_connector="off")
        )
        lake = DeltaLake(spark)
        window = Window(DAY_START, DAY_START + timedelta(hours=spec.hours))
        out = scratch / "dashboard.html"
        warm, _, _ = dashboard(lake, root, Window(DAY_START, DAY_START + timedelta(hours=1)), out)
        print(f"warm-up (first hour): {warm:.1f} s", flush=True)
        alone: list[dict[str, float]] = []
        rendered: list[tuple[float, int, dict[str, float]]] = []
        for k in range(args.repeat):
            alone.append(queries_alone(lake, root, window))
            rendered.append(dashboard(lake, root, window, out))
            print(
                f"round {k + 1}: queries alone {sum(alone[-1].values()):.1f} s, "
                f"dashboard {rendered[-1][0]:.1f} s",
                flush=True,
            )
        best_alone = min(alone, key=lambda s: sum(s.values()))
        best_render = min(rendered, key=lambda r: r[0])
        ceiling, seconds, page_bytes = sum(best_alone.values()), best_render[0], best_render[1]
        print(f"\n{'query':<22}{'alone s':>10}{'in dashboard s':>16}")
        for name in QUERY_NAMES:
            print(f"{name:<22}{best_alone[name]:>10.2f}{best_render[2][name]:>16.2f}")
        print(f"\nqueries alone (ceiling): {ceiling:.1f} s")
        print(
            f"dashboard (views + queries + render + write): {seconds:.1f} s, "
            f"page {page_bytes / 2**20:.1f} MiB"
        )
        print(f"ratio queries alone / dashboard: {ceiling / seconds:.3f}")
        spark.stop()
        print(
            json.dumps(
                {
                    "benchmark": "dashboard",
                    "python": platform.python_version(),
                    "pyspark": pyspark.__version__,
                    "master": args.master,
                    "clients": spec.clients,
                    "entities": spec.entities,
                    "hours": spec.hours,
                    "interval_s": spec.interval_s,
                    "rows": rows,
                    "queries_alone_s": round(ceiling, 3),
                    "dashboard_s": round(seconds, 3),
                    "ratio": round(ceiling / seconds, 4),
                    "page_bytes": page_bytes,
                    "per_query_alone_s": {k: round(v, 3) for k, v in best_alone.items()},
                    "per_query_in_dashboard_s": {k: round(v, 3) for k, v in best_render[2].items()},
                }
            )
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
