"""Benchmark of ``telemetry-sink sql-server``: the dashboard's named queries through JDBC/ODBC (the
Thrift server, queried with PyHive) against the same queries in-process, same data and same session
settings, in one run; then 8 clients at once.

1. **Data** (timed apart): ``benchmarks/dashboard/fleet.py`` writes a day of a fleet's rollups into
   the gold tables of a temporary data root (or ``--data DIR``, reused when it exists).
2. **Server:** ``telemetry-sink sql-server`` started on the data root, on ``--master`` (the
   command's own process, as users run it).
3. **In-process (the ceiling):** a Spark session of the same settings in this process: the views
   registered, the session variables set to the day, the window's views created, each query of
   ``spark_jobs/dashboards/queries/`` run and its rows fetched (``toArrow``).
4. **JDBC:** one PyHive connection runs the same statements (``variables.sql``, ``SET VAR``,
   ``window.sql``, each query) and fetches every row.

After a warm-up of each, 3 and 4 alternate ``--repeat`` times; the best of each counts. The ratio is
in-process seconds / JDBC seconds (1.0: JDBC costs nothing on top; the goal is at least 0.8).

5. **Concurrency:** ``--clients`` (8) PyHive connections at once, each running every query over the
   day; printed: errors (must be 0), the wall time, and each client's time.

Run: ``.venv/bin/python benchmarks/sql_server/bench.py [--clients-in-fleet N --hours H --repeat K
--data DIR --master local[2]]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import json
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import timedelta

import pyspark
from pyhive import hive

from benchmarks.dashboard.fleet import DAY_START, FleetSpec, write_fleet
from spark_jobs.dashboards import Window
from spark_jobs.dashboards.queries import QUERY_NAMES, _statements, query_text
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session
from spark_jobs.views import register_views
from tests.support.process import free_port

SETTINGS = {"spark.sql.shuffle.partitions": "8"}


def session_statements(window: Window) -> list[str]:
    """What a session runs before the queries: the variables, set to ``window``, and the window's views."""
    return [
        *_statements(query_text("variables")),
        f"SET VAR dashboard_from = TIMESTAMP '{window.start:%Y-%m-%d %H:%M:%S}'",
        f"SET VAR dashboard_to = TIMESTAMP '{window.end:%Y-%m-%d %H:%M:%S}'",
        *_statements(query_text("window")),
    ]


def in_process(lake: DeltaLake, root: str, window: Window) -> tuple[dict[str, float], int]:
    session = lake.spark
    started = time.perf_counter()
    register_views(lake, root)
    for statement in session_statements(window):
        session.sql(statement)
    seconds, rows = {}, 0
    for name in QUERY_NAMES:
        rows += session.sql(query_text(name)).toArrow().num_rows
        seconds[name] = time.perf_counter() - started
        started = time.perf_counter()
    return seconds, rows


def over_jdbc(port: int, window: Window) -> tuple[dict[str, float], int]:
    started = time.perf_counter()
    with hive.connect(host="127.0.0.1", port=port, username="bench", database="default") as connection:
        cursor = connection.cursor()
        for statement in session_statements(window):
            cursor.execute(statement)
        seconds, rows = {}, 0
        for name in QUERY_NAMES:
            cursor.execute(query_text(name))
            rows += len(cursor.fetchall())
            seconds[name] = time.perf_counter() - started
            started = time.perf_counter()
    return seconds, rows


def concurrently(port: int, window: Window, clients: int) -> tuple[float, list[float], list[str]]:
    errors: list[str] = []
    times: list[float] = [0.0] * clients

    def client(k: int) -> None:
        started = time.perf_counter()
        try:
            over_jdbc(port, window)
        except Exception as exc:  # counted and printed: the benchmark's point is that there are none
            errors.append(f"client {k}: {str(exc)[:300]}")
        times[k] = time.perf_counter() - started

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, times, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients-in-fleet", type=int, default=2_000)
    parser.add_argument("--entities", type=int, default=100)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8, help="concurrent SQL clients")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data", help="data root to use (written when it does not exist, kept after)")
    args = parser.parse_args()
    spec = FleetSpec(clients=args.clients_in_fleet, entities=args.entities, hours=args.hours)
    scratch = Path(tempfile.mkdtemp(prefix="sql-server-bench-"))
    root = args.data or str(scratch / "data")
    server = None
    try:
        started = time.perf_counter()
        if not Path(root, "rollup_client_1m").exists():
            write_fleet(root, spec)
        print(f"data: {spec} in {time.perf_counter() - started:.1f} s ({root})", flush=True)
        port, health = free_port(), free_port()
        conf = [x for key, value in SETTINGS.items() for x in ("--conf", f"{key}={value}")]
        server = subprocess.Popen(
            [sys.executable, "-m", "telemetry_sink", "sql-server", "--data-root", root, "--master",
             args.master, *conf, "--port", str(port), "--health-port", str(health),
             "--max-result-rows", "1000000", "--query-timeout", "3600"],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stderr is not None
        for line in server.stderr:
            if "telemetry-sink sql-server: serving" in line:
                break
        else:
            raise SystemExit("the SQL server did not start")
        threading.Thread(target=server.stderr.read, daemon=True).start()  # keep its pipe drained

        spark = spark_session(
            SparkSettings(
                master=args.master, app_name="sql-server-bench", settings=SETTINGS, delta_connector="off"
            )
        )
        lake = DeltaLake(spark)
        window = Window(DAY_START, DAY_START + timedelta(hours=spec.hours))
        warm = Window(DAY_START, DAY_START + timedelta(hours=1))
        print(
            f"warm-up: in-process {sum(in_process(lake, root, warm)[0].values()):.1f} s, "
            f"JDBC {sum(over_jdbc(port, warm)[0].values()):.1f} s",
            flush=True,
        )
        local: list[tuple[dict[str, float], int]] = []
        remote: list[tuple[dict[str, float], int]] = []
        for k in range(args.repeat):
            local.append(in_process(lake, root, window))
            remote.append(over_jdbc(port, window))
            print(
                f"round {k + 1}: in-process {sum(local[-1][0].values()):.1f} s, "
                f"JDBC {sum(remote[-1][0].values()):.1f} s ({remote[-1][1]} rows)",
                flush=True,
            )
        spark.stop()
        best_local = min(local, key=lambda r: sum(r[0].values()))
        best_remote = min(remote, key=lambda r: sum(r[0].values()))
        assert best_local[1] == best_remote[1], "JDBC and in-process gave different row counts"
        ceiling, seconds = sum(best_local[0].values()), sum(best_remote[0].values())
        print(f"\n{'query':<22}{'in-process s':>14}{'JDBC s':>10}")
        for name in QUERY_NAMES:
            print(f"{name:<22}{best_local[0][name]:>14.2f}{best_remote[0][name]:>10.2f}")
        print(f"\nin-process (ceiling): {ceiling:.1f} s; JDBC: {seconds:.1f} s; rows {best_remote[1]}")
        print(f"ratio in-process / JDBC: {ceiling / seconds:.3f} (goal >= 0.8)")

        wall, times, errors = concurrently(port, window, args.clients)
        print(
            f"{args.clients} clients at once: {len(errors)} errors, {wall:.1f} s wall, "
            f"each {min(times):.1f}-{max(times):.1f} s"
        )
        for error in errors:
            print(f"  {error}")
        print(
            json.dumps(
                {
                    "benchmark": "sql_server",
                    "python": platform.python_version(),
                    "pyspark": pyspark.__version__,
                    "master": args.master,
                    "fleet": {"clients": spec.clients, "entities": spec.entities, "hours": spec.hours},
                    "rows": best_remote[1],
                    "in_process_s": round(ceiling, 3),
                    "jdbc_s": round(seconds, 3),
                    "ratio": round(ceiling / seconds, 4),
                    "per_query_in_process_s": {k: round(v, 3) for k, v in best_local[0].items()},
                    "per_query_jdbc_s": {k: round(v, 3) for k, v in best_remote[0].items()},
                    "concurrent_clients": args.clients,
                    "concurrent_errors": len(errors),
                    "concurrent_wall_s": round(wall, 3),
                    "concurrent_client_s": [round(t, 3) for t in times],
                }
            )
        )
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
