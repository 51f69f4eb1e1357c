"""Benchmark of the Spark side: data points per second through decode + rollup on ``local[2]``.

One run, on the same bronze data (``fleet.py``: a fleet of librdkafka clients, landed by the real
``DeltaLandingExporter`` in a temporary data root; not timed):

1. **decode ceiling** (this process, one core): ``MetricsData.FromString`` on every payload and a
   visit of every data point (counted). For information, on the same payloads: ``FromString`` alone,
   ``FromString`` plus reading every field the decode reads (``decode_micro.parse_and_read``), and
   ``spark_jobs.transforms.decode.decode_batches`` alone on the bronze rows (read back with delta-rs,
   in batches of Spark's ``arrow.maxRecordsPerBatch``): the Python workers' work without Spark.
2. **end to end** (Spark on ``--master``, default ``local[2]``, after a warm-up run on a small fleet in
   another data root): ``run_decode`` (bronze -> silver ``metric_points``) and then
   ``run_rollup(decode=False)`` (silver -> every gold table), each timed; their sum is the time of a
   ``run_rollup`` from a fresh start.
3. **aggregation ceiling** (same session, best of ``--repeat``): a scan of silver ``metric_points``
   (``DeltaLake.read``) and a plain ``groupBy(client_instance_id, metric_name, attributes_key,
   minute).agg(sum(value), count(*))`` written to the ``noop`` sink.
4. **floors** (same session): what any run must do at the least, each part alone: the JVM decode of
   every push to ``noop``, silver read and written again as parquet (clustered as the job writes it),
   and ``rollup_client_1m`` likewise. With the aggregation ceiling they make a floor: no run can do
   better than ceiling / floor.
5. **incremental** (the same warm session, as ``telemetry-sink rollup --every`` keeps one): a fleet of
   ``--incremental-instances`` (1,000) with an hour of pushes rolled up (``--incremental-history``,
   120 rounds) gains one new minute (2,000
   pushes, landed in commits of 100 as a sink's short batches land them), and one ``run_rollup``
   (decode and the six gold tables) is timed, ``--incremental-runs`` minutes in a row, landed through
   ``--incremental-replicas`` sink replicas (a bronze shard each). Goal: <= 5 s. ``--delta-connector
   on``: every phase on the Delta Spark connector instead of the delta-rs bridge.
   ``--incremental-newcomers N``: in each of the second half of the new minutes, N client instances
   new to the fleet push too (a restarted client is a new instance), whose series have no previous
   point anywhere; the median of those minutes is printed against that of the minutes before them
   (after the first, the session's coldest), the peer.
6. with ``--breakdown``, the parts, each to the ``noop`` sink unless said: the decode alone
   (``mapInArrow``), the decode written as plain parquet (no persist, no count), a scan of silver,
   ``normalize`` (the cumulative-to-delta window), and ``client_rollup(normalize(...), "1m")``.

Printed: points, each stage's points/s, end to end / each ceiling, and the goal (>= 400,000 points/s
end to end); per phase the CPU seconds of the driver, the JVM (by thread kind: tasks, JIT, GC, driver
side), the Python workers and other processes (contention); Spark's stages from its event log (per job
description: executor time, Python time, sort and aggregation time, shuffle, spill, and the slowest
stages' operators). Last, one JSON line with every figure.

Run: ``make bench`` or ``.venv/bin/python benchmarks/rollup/bench.py [--instances N --pushes K
--conf spark.KEY=VALUE --breakdown ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import functools
import gc
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import deltalake
import google.protobuf
import pyarrow as pa
import pyspark
from deltalake import DeltaTable
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from artifacts import classpath
from benchmarks.rollup.accounting import CpuSnapshot, CpuTracker, StageTiming, stage_profile
from benchmarks.rollup.decode_micro import parse_and_read
from benchmarks.rollup.fleet import FleetSpec, land_fleet
from spark_jobs.jobs.decode import SILVER_FILE_ROWS, decode, run_decode
from spark_jobs.jobs.rollup import CLIENT_MINUTE_FILE_ROWS, run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session
from spark_jobs.tables import BRONZE_PUSHES, METRIC_POINTS, METRIC_POINTS_SCHEMA, ROLLUP_CLIENT_1M, table_uri
from spark_jobs.transforms.decode import BRONZE_COLUMNS, decode_batches
from spark_jobs.transforms.rollup import client_rollup, normalize

GOAL: Final = 400_000
"""Data points per second, end to end."""
ARROW_BATCH_ROWS: Final = 10_000
"""``spark.sql.execution.arrow.maxRecordsPerBatch``'s default: the batches ``mapInArrow`` hands over."""

T = TypeVar("T")


# -- in-process ceilings ----------------------------------------------------------------------------


def parse_only(payloads: list[bytes]) -> int:
    for payload in payloads:
        MetricsData.FromString(payload)
    return 0


def parse_and_count(payloads: list[bytes]) -> int:
    """The decode ceiling: parse every payload and visit every data point; the number of points."""
    points = 0
    for payload in payloads:
        for resource_metrics in MetricsData.FromString(payload).resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    if kind is None:
                        continue
                    for _ in getattr(metric, kind).data_points:
                        points += 1
    return points


def bronze_batches(data_root: str) -> list[pa.RecordBatch]:
    """The bronze rows ``mapInArrow`` would hand ``decode_batches``, in batches of its size."""
    shard = DeltaTable(f"{table_uri(data_root, BRONZE_PUSHES)}/r1")
    table = shard.to_pyarrow_table(columns=list(BRONZE_COLUMNS))
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=ARROW_BATCH_ROWS)
    return batches


def decode_alone(batches: list[pa.RecordBatch]) -> int:
    return sum(out.num_rows for out in decode_batches(iter(batches)))


def timed(run: Callable[[], T], repeat: int = 1) -> tuple[T, float, float]:
    """``run()``'s result, and its best wall and CPU seconds over ``repeat`` runs."""
    best_wall = best_cpu = float("inf")
    result: T | None = None
    for _ in range(repeat):
        gc.collect()
        cpu, wall = time.process_time(), time.perf_counter()
        result = run()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    assert result is not None
    return result, best_wall, best_cpu


# -- Spark ------------------------------------------------------------------------------------------


class Phases:
    """Wall time, CPU by process and a progress timeline for each phase of the Spark run; each phase
    also becomes the Spark job description, so its stages can be told apart in the event log."""

    def __init__(self, spark: SparkSession, tracker: CpuTracker) -> None:
        self.spark = spark
        self.tracker = tracker
        self.results: dict[str, dict[str, Any]] = {}
        self.timeline: list[tuple[float, str]] = []
        self._started = 0.0
        self.current = ""

    def describe(self, description: str) -> None:
        self.spark.sparkContext.setJobDescription(description)

    def progress(self, message: str) -> None:
        """``run_rollup``'s progress: the timeline, and the job description of what follows."""
        self.timeline.append((time.perf_counter() - self._started, message))
        table = message.split(":", 1)[0]
        table = "decode" if table.startswith("decode") else table
        self.describe(table if table == self.current else f"{self.current}/{table}")

    def run(self, name: str, job: Callable[[], T]) -> T:
        self.current = name
        self.describe(name)
        before: CpuSnapshot = self.tracker.snapshot()
        self._started = started = time.perf_counter()
        self.timeline.append((0.0, f"-- {name}"))
        try:
            result = job()
        finally:
            wall = time.perf_counter() - started
            after = self.tracker.snapshot()
            self.results[name] = {
                "wall_s": wall,
                "cpu_s": after.minus(before),
                "jvm_threads_s": after.jvm_minus(before),
            }
            self.describe(f"after {name}")
        return result


def aggregation_ceiling(lake: DeltaLake, data_root: str) -> None:
    silver = lake.read(table_uri(data_root, METRIC_POINTS))
    assert silver is not None
    minute = F.date_trunc("minute", "time").alias("minute")
    grouped = silver.groupBy("client_instance_id", "metric_name", "attributes_key", minute)
    grouped.agg(F.sum("value"), F.count(F.lit(1))).write.format("noop").mode("overwrite").save()


def breakdown(lake: DeltaLake, data_root: str, workdir: Path, phases: Phases) -> None:
    """The decode and the 1-minute client rollup in parts, each to the ``noop`` sink unless said."""
    shard = f"{table_uri(data_root, BRONZE_PUSHES)}/r1"

    def decoded() -> DataFrame:
        frame = lake.read(shard)
        assert frame is not None
        return decode(frame)

    def silver() -> DataFrame:
        frame = lake.read(table_uri(data_root, METRIC_POINTS))
        assert frame is not None
        return frame

    def noop(frame: DataFrame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    phases.run("breakdown: decode, noop", lambda: noop(decoded()))
    target = (workdir / "silver-parquet").as_uri()
    phases.run(
        "breakdown: decode, parquet",
        lambda: decoded().select(*METRIC_POINTS_SCHEMA.names).write.partitionBy("date").parquet(target),
    )
    phases.run("breakdown: scan silver, noop", lambda: noop(silver()))
    phases.run("breakdown: normalize, noop", lambda: noop(normalize(silver())))
    phases.run(
        "breakdown: client_rollup 1m, noop",
        lambda: noop(client_rollup(normalize(silver()), "1m", time_column="time")),
    )


def floors(lake: DeltaLake, data_root: str, workdir: Path, phases: Phases) -> None:
    """What any run from bronze to these tables must do at the least, each part alone: decode every
    push (the JVM decoder, to ``noop``), write the silver rows (silver read and written again as
    parquet, clustered as the job writes it) and write the 1-minute client rows (likewise); the
    aggregation ceiling stands for reading silver and rolling it up once."""
    shard = lake.read(f"{table_uri(data_root, BRONZE_PUSHES)}/r1")
    assert shard is not None
    phases.run("floor: decode, noop", lambda: decode(shard).write.format("noop").mode("overwrite").save())

    def rewrite(table: str, partition: str, column: str, rows: int) -> None:
        frame = lake.read(table_uri(data_root, table))
        assert frame is not None
        writer = frame.sortWithinPartitions(partition, column).write.option("maxRecordsPerFile", rows)
        writer.partitionBy(partition).parquet((workdir / f"floor-{table}").as_uri())

    phases.run("floor: silver written", lambda: rewrite(METRIC_POINTS, "date", "time", SILVER_FILE_ROWS))
    phases.run(
        "floor: rollup_client_1m written",
        lambda: rewrite(ROLLUP_CLIENT_1M, "bucket_hour", "bucket_start", CLIENT_MINUTE_FILE_ROWS),
    )


INCREMENTAL_GOAL_S: Final = 5.0


def incremental(args: argparse.Namespace, lake: DeltaLake, root: str, phases: Phases) -> list[dict[str, Any]]:
    """The ``--every`` case: in the warm session, a fleet of ``--incremental-instances`` with
    ``--incremental-history`` rounds already rolled up gains one new minute (two pushes per instance,
    landed in commits of ``--incremental-commit-rows``, as a sink's short batches), and one
    ``run_rollup`` (decode and every gold table) is timed; ``--incremental-runs`` minutes in a row."""
    minutes, history = args.incremental_runs, args.incremental_history
    spec = FleetSpec(args.incremental_instances, history + 2 * minutes, seed=13, users=args.users)

    def landed_by(rounds: int) -> datetime:
        """The wall clock of a sink that has just landed the first ``rounds`` rounds: which hours are
        closed (the runs roll up the fleet's time as it happens, not as history)."""
        return datetime.fromtimestamp((spec.start_ms + rounds * spec.interval_ms + 5_000) / 1000, UTC)

    land_fleet(spec, root, args.commit_rows, range(history), args.incremental_replicas)
    phases.run(
        "incremental catch-up",
        lambda: run_rollup(lake, root, now=landed_by(history), progress=phases.progress),
    )
    runs = []
    for minute in range(minutes):
        first = history + 2 * minute
        payloads, commits = land_fleet(
            spec, root, args.incremental_commit_rows, range(first, first + 2), args.incremental_replicas
        )
        newcomers = args.incremental_newcomers if minute >= minutes // 2 else 0
        if newcomers:  # client instances that never pushed before (KIP-714: a restarted client is one)
            joining = FleetSpec(
                newcomers,
                2,
                seed=17 + minute,
                users=args.users,
                start_ms=spec.start_ms + first * spec.interval_ms,
                first_index=spec.instances + minute * newcomers,
            )
            more, more_commits = land_fleet(
                joining, root, args.incremental_commit_rows, replicas=args.incremental_replicas
            )
            payloads, commits = payloads + more, commits + more_commits
        now = landed_by(first + 2)
        report = phases.run(
            f"incremental minute {minute + 1}",
            functools.partial(run_rollup, lake, root, now=now, progress=phases.progress),
        )
        runs.append(
            {
                "pushes": len(payloads),
                "newcomers": newcomers,
                "bronze_commits": commits,
                "points": report.decode.points,
                "tables": len(report.tables),
                "wall_s": phases.results[f"incremental minute {minute + 1}"]["wall_s"],
            }
        )
    return runs


def gold_rows(data_root: str, tables: list[str]) -> dict[str, int]:
    return {
        table: DeltaTable(table_uri(data_root, table)).to_pyarrow_dataset().count_rows() for table in tables
    }


def spark_run(args: argparse.Namespace, workdir: Path, data_root: str, points: int) -> dict[str, Any]:
    events = workdir / "events"
    events.mkdir()
    settings = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        **dict(args.conf),
    }
    tracker = CpuTracker()
    session_started = time.perf_counter()
    try:
        if args.delta_connector == "on":  # the jars setup fetched (artifacts/delta-spark)
            settings["spark.jars"] = classpath("delta-spark").replace(os.pathsep, ",")
        spark = spark_session(
            SparkSettings(
                master=args.master,
                app_name="rollup-bench",
                settings=settings,
                delta_connector=args.delta_connector,
            )
        )
    except BaseException:
        tracker.close()
        raise
    out: dict[str, Any] = {"session_start_s": time.perf_counter() - session_started}
    lake = DeltaLake(spark, connector=args.delta_connector == "on")
    phases = Phases(spark, tracker)
    try:
        if args.warmup_instances:
            warm_root = str(workdir / "warmup")
            land_fleet(FleetSpec(args.warmup_instances, 3, seed=11), warm_root)
            phases.run("warm-up", lambda: run_rollup(lake, warm_root, progress=phases.progress))
        decoded = phases.run("decode", lambda: run_decode(lake, data_root, progress=phases.progress))
        rolled = phases.run(
            "rollup", lambda: run_rollup(lake, data_root, decode=False, progress=phases.progress)
        )
        for k in range(args.repeat):
            phases.run(f"aggregation ceiling {k + 1}", lambda: aggregation_ceiling(lake, data_root))
        floors(lake, data_root, workdir, phases)
        if args.incremental_instances:
            out["incremental"] = incremental(args, lake, str(workdir / "incremental"), phases)
        if args.breakdown:
            breakdown(lake, data_root, workdir, phases)
    finally:
        spark.stop()
        tracker.close()
    if decoded.points != points or decoded.quarantined:
        raise SystemExit(f"decode wrote {decoded.points} points, quarantined {decoded.quarantined}: "
                         f"expected {points} and none")  # fmt: skip
    out["phases"] = phases.results
    out["timeline"] = phases.timeline
    out["gold_tables"] = sorted({t.table for t in rolled.tables})
    out["stages"] = stage_profile(events)
    return out


# -- report -----------------------------------------------------------------------------------------


def rate(points: int, seconds: float) -> float:
    return points / seconds if seconds > 0 else 0.0


def line(label: str, points_per_s: float, note: str = "") -> None:
    print(f"  {label:<64} {points_per_s:>11,.0f} points/s{note}")


def print_cpu(name: str, phase: dict[str, Any]) -> None:
    cpu = phase["cpu_s"]
    ours = cpu["driver"] + cpu["jvm"] + cpu["python_workers"]
    print(
        f"    {name:<34} wall {phase['wall_s']:7.2f} s   driver {cpu['driver']:6.2f}   "
        f"jvm {cpu['jvm']:6.2f}   python workers {cpu['python_workers']:6.2f}   "
        f"(= {ours / phase['wall_s']:.2f} cores)   others {cpu['others']:6.2f}"
    )
    threads = phase["jvm_threads_s"]
    print(
        f"      {'jvm threads:':<22} "
        + "   ".join(f"{kind} {seconds:6.2f}" for kind, seconds in threads.items())
    )


SQL_METRICS: Final = {
    "python_exec_s": ("time to execute Python code", 1e-3),  # Spark 4's metrics of mapInArrow
    "python_run_s": ("time to run Python workers", 1e-3),
    "sort_s": ("sort time", 1e-3),
    "aggregate_s": ("time in aggregation build", 1e-3),
    "shuffle_write_s": ("internal.metrics.shuffle.write.writeTime", 1e-9),
    "shuffle_mb": ("internal.metrics.shuffle.write.bytesWritten", 2**-20),
    "spill_mb": ("spill size", 2**-20),
    "read_mb": ("internal.metrics.input.bytesRead", 2**-20),
    "written_mb": ("internal.metrics.output.bytesWritten", 2**-20),
}
"""Stage metrics shown per phase: (name in the event log, factor to the unit)."""


def group_stages(stages: list[StageTiming]) -> dict[str, dict[str, Any]]:
    """Per job description, in order of first appearance (warm-up left out): totals and stages."""
    phases: dict[str, dict[str, Any]] = {}
    for stage in stages:
        if stage.phase.startswith(("warm-up", "after warm-up")):
            continue
        phase = phases.setdefault(
            stage.phase,
            {"stages": [], "wall_s": 0.0, "run_s": 0.0, "cpu_s": 0.0, "gc_s": 0.0}
            | dict.fromkeys(SQL_METRICS, 0.0),
        )
        phase["stages"].append(stage)
        for key in ("wall_s", "run_s", "cpu_s", "gc_s"):
            phase[key] += getattr(stage, key)
        for key, (metric, factor) in SQL_METRICS.items():
            phase[key] += stage.metrics.get(metric, 0.0) * factor
    return phases


def print_stages(phases: dict[str, dict[str, Any]], top: int) -> None:
    print(
        "  Spark stages (event log) by job description. run/cpu/gc: executor time summed over tasks; "
        "python: mapInArrow's time to execute Python code; sort, agg: sort time, time in aggregation "
        "build; shuffle: MiB written; spill: MiB"
    )
    columns = ("stages", "wall s", "run s", "cpu s", "gc s", "python", "sort", "agg", "shuffle", "spill")
    print(f"    {'phase':<34} " + " ".join(f"{c:>7}" for c in columns))
    for name, phase in phases.items():
        values = [len(phase["stages"])] + [
            phase[k]
            for k in (
                "wall_s",
                "run_s",
                "cpu_s",
                "gc_s",
                "python_exec_s",
                "sort_s",
                "aggregate_s",
                "shuffle_mb",
            )
        ]
        values.append(phase["spill_mb"])
        print(
            f"    {name:<34} " + " ".join(f"{v:>7.1f}" if isinstance(v, float) else f"{v:>7}" for v in values)
        )
        for stage in sorted(phase["stages"], key=lambda s: -s.run_s)[:top]:
            print(
                f"      #{stage.stage_id:<4} {stage.run_s:6.1f} s run over {stage.tasks} tasks "
                f"(wall {stage.wall_s:5.1f} s): {' > '.join(stage.operators)}"
            )


def spark_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"expected spark.KEY=VALUE, got {text!r}")
    return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=4000, help="client instances (default 4000)")
    parser.add_argument("--pushes", type=int, default=36, help="pushes per instance (default 36)")
    parser.add_argument("--interval-s", type=float, default=30.0, help="push interval (default 30 s)")
    parser.add_argument("--users", type=int, default=16, help="principals, one quota entity each")
    parser.add_argument("--commit-rows", type=int, default=5000, help="pushes per bronze commit")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--conf",
        type=spark_setting,
        action="append",
        default=[],
        metavar="spark.KEY=VALUE",
        help="a Spark setting (repeatable)",
    )
    parser.add_argument(
        "--delta-connector",
        choices=("on", "off"),
        default="off",
        help="the lake's storage path: the Delta Spark connector or the delta-rs bridge (default off)",
    )
    parser.add_argument("--warmup-instances", type=int, default=200, help="warm-up fleet (0: none)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each ceiling (the best counts)")
    parser.add_argument("--top-stages", type=int, default=3, help="slowest stages shown per phase")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="then time the decode and the 1-minute client rollup in parts (noop sink)",
    )
    parser.add_argument(
        "--incremental-instances", type=int, default=1000, help="the incremental case's fleet (0: skip it)"
    )
    parser.add_argument("--incremental-runs", type=int, default=3, help="new minutes rolled up one by one")
    parser.add_argument(
        "--incremental-history",
        type=int,
        default=120,
        help="push rounds (30 s apart) rolled up before the new minutes (default 120: an hour)",
    )
    parser.add_argument(
        "--incremental-commit-rows", type=int, default=100, help="pushes per bronze commit of a new minute"
    )
    parser.add_argument(
        "--incremental-newcomers",
        type=int,
        default=0,
        help="client instances new to the fleet in each of the second half of the new minutes (default 0)",
    )
    parser.add_argument(
        "--incremental-replicas",
        type=int,
        default=1,
        help="sink replicas the incremental fleet lands through, a bronze shard each (default 1)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data root (its path is printed)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="rollup-bench-"))
    data_root = str(workdir / "data")
    try:
        spec = FleetSpec(
            args.instances, args.pushes, interval_ms=round(args.interval_s * 1000), users=args.users
        )
        started = time.perf_counter()
        payloads, commits = land_fleet(spec, data_root, args.commit_rows)
        landed_s = time.perf_counter() - started
        points = parse_and_count(payloads)
        payload_bytes = sum(len(p) for p in payloads)
        print(
            f"rollup: {args.instances:,} instances x {args.pushes} pushes = {len(payloads):,} pushes, "
            f"{points:,} points ({points / len(payloads):.1f} per push, "
            f"{payload_bytes / len(payloads):,.0f} B per payload), landed in {commits} bronze commits "
            f"in {landed_s:.1f} s (not timed)"
        )
        counted, parse_count_s, _ = timed(lambda: parse_and_count(payloads), args.repeat)
        assert counted == points
        _, parse_s, _ = timed(lambda: parse_only(payloads), args.repeat)
        read, read_s, _ = timed(lambda: parse_and_read(payloads), 1)
        assert read == points
        batches = bronze_batches(data_root)
        decoded, decode_s, decode_cpu = timed(lambda: decode_alone(batches), 1)
        assert decoded == points, f"decode_batches made {decoded} rows of {points} points"
        batches.clear()
        spark = spark_run(args, workdir, data_root, points)
        phases = spark["phases"]
        e2e_s = phases["decode"]["wall_s"] + phases["rollup"]["wall_s"]
        ceiling_s = min(v["wall_s"] for k, v in phases.items() if k.startswith("aggregation ceiling"))
        results: dict[str, Any] = {
            "pushes": len(payloads),
            "points": points,
            "payload_bytes": payload_bytes,
            "bronze_commits": commits,
            "decode_ceiling_pps": rate(points, parse_count_s),
            "parse_only_pps": rate(points, parse_s),
            "parse_and_read_pps": rate(points, read_s),
            "decode_batches_pps": rate(points, decode_s),
            "decode_batches_cpu_s": decode_cpu,
            "spark_decode_s": phases["decode"]["wall_s"],
            "spark_rollup_s": phases["rollup"]["wall_s"],
            "end_to_end_s": e2e_s,
            "spark_decode_pps": rate(points, phases["decode"]["wall_s"]),
            "spark_rollup_pps": rate(points, phases["rollup"]["wall_s"]),
            "end_to_end_pps": rate(points, e2e_s),
            "aggregation_ceiling_s": ceiling_s,
            "aggregation_ceiling_pps": rate(points, ceiling_s),
        }
        floor_s = ceiling_s + sum(v["wall_s"] for k, v in phases.items() if k.startswith("floor:"))
        results["floor_s"] = floor_s
        results["ratio_floor"] = ceiling_s / floor_s
        results["ratio_decode_ceiling"] = results["end_to_end_pps"] / results["decode_ceiling_pps"]
        results["ratio_aggregation_ceiling"] = results["end_to_end_pps"] / results["aggregation_ceiling_pps"]
        results["goal_met"] = results["end_to_end_pps"] >= GOAL
        report(args, results, spark, data_root)
        if args.keep:
            print(f"data root kept: {data_root}")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def newcomer_ratio(runs: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The median wall time of the incremental minutes with newcomers and of those before them (after
    the first minute, the session's coldest), when there are both."""
    warm = runs[1:]
    joined = [run["wall_s"] for run in warm if run["newcomers"]]
    plain = [run["wall_s"] for run in warm if not run["newcomers"]]
    return (statistics.median(joined), statistics.median(plain)) if joined and plain else None


def report(args: argparse.Namespace, r: dict[str, Any], spark: dict[str, Any], data_root: str) -> None:
    phases = spark["phases"]
    tables = spark["gold_tables"]
    line("decode ceiling: FromString + visit every point (this process)", r["decode_ceiling_pps"])
    line("  for information: FromString alone", r["parse_only_pps"])
    line("  FromString + read every field the decode reads", r["parse_and_read_pps"])
    line(
        "  decode_batches alone (this process)",
        r["decode_batches_pps"],
        f"   {r['decode_batches_cpu_s']:7.2f} s CPU",
    )
    warmup = phases.get("warm-up")
    print(
        f"  Spark {args.master}: session start {spark['session_start_s']:.1f} s, "
        + (
            f"warm-up run ({args.warmup_instances} instances x 3 pushes) {warmup['wall_s']:.1f} s"
            if warmup
            else "no warm-up"
        )
    )
    line(
        "end to end: run_decode (bronze -> silver)", r["spark_decode_pps"], f"   {r['spark_decode_s']:7.2f} s"
    )
    line(
        f"            run_rollup(decode=False) ({len(tables)} gold tables)",
        r["spark_rollup_pps"],
        f"   {r['spark_rollup_s']:7.2f} s",
    )
    line("            decode + rollup", r["end_to_end_pps"], f"   {r['end_to_end_s']:7.2f} s")
    line(
        "aggregation ceiling: scan silver, groupBy minute, noop",
        r["aggregation_ceiling_pps"],
        f"   {r['aggregation_ceiling_s']:7.2f} s",
    )
    print(f"  ratio end to end / decode ceiling        {r['ratio_decode_ceiling']:.3f}")
    print(f"  ratio end to end / aggregation ceiling   {r['ratio_aggregation_ceiling']:.3f}")
    print(
        f"  floor (decode + silver written + 1-minute client rows written + the ceiling) "
        f"{r['floor_s']:.2f} s: no run can do better than {r['ratio_floor']:.3f} of the aggregation ceiling"
    )
    verdict = "met" if r["goal_met"] else "NOT met"
    print(f"  goal >= {GOAL:,} points/s end to end: {verdict} ({r['end_to_end_pps']:,.0f} points/s)")
    for k, run in enumerate(spark.get("incremental", [])):
        verdict = "met" if run["wall_s"] <= INCREMENTAL_GOAL_S else "NOT met"
        joined = f" ({run['newcomers']:,} of them new to the fleet)" if run["newcomers"] else ""
        print(
            f"  incremental minute {k + 1}: {run['pushes']:,} pushes{joined} in {run['bronze_commits']} "
            f"commits, {run['points']:,} points, {run['tables']} gold tables: run_rollup "
            f"{run['wall_s']:.2f} s (goal <= {INCREMENTAL_GOAL_S:.0f} s: {verdict})"
        )
    by_newcomers = newcomer_ratio(spark.get("incremental", []))
    if by_newcomers is not None:
        print(
            f"  minutes with newcomers: p50 {by_newcomers[0]:.2f} s; the others (the peer): p50 "
            f"{by_newcomers[1]:.2f} s; ratio {by_newcomers[0] / by_newcomers[1]:.2f}"
        )
    print("  CPU seconds by process over each phase (others: the rest of the machine meanwhile):")
    for name, phase in phases.items():
        print_cpu(name, phase)
    workers = phases["decode"]["cpu_s"]["python_workers"]
    print(
        f"  Python workers' CPU in run_decode {workers:.2f} s; decode_batches alone "
        f"{r['decode_batches_cpu_s']:.2f} s ({workers / r['decode_batches_cpu_s']:.2f}x)"
    )
    print("  timeline (s from the start of each phase):")
    for at, message in spark["timeline"]:
        print(f"    {at:7.2f}  {message}")
    stages = group_stages(spark["stages"])
    print_stages(stages, args.top_stages)
    rows = gold_rows(data_root, tables)
    print("  rows: " + ", ".join(f"{t} {n:,}" for t, n in rows.items()))
    print(
        json.dumps(
            {
                "benchmark": "rollup",
                "python": platform.python_version(),
                "pyspark": pyspark.__version__,
                "deltalake": deltalake.__version__,
                "protobuf": google.protobuf.__version__,
                "master": args.master,
                "delta_connector": args.delta_connector,
                "instances": args.instances,
                "pushes_per_instance": args.pushes,
                "commit_rows": args.commit_rows,
                "incremental_replicas": args.incremental_replicas,
                "conf": dict(args.conf),
                **r,
                "phases": phases,
                "incremental": spark.get("incremental", []),
                "gold_rows": rows,
                "stages": {
                    name: {k: round(v, 3) for k, v in phase.items() if k != "stages"}
                    | {"count": len(phase["stages"])}
                    for name, phase in stages.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
