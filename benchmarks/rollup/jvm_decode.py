"""Benchmark of the decode in Spark's JVM against the Python decode, on the rollup benchmark's bronze data
(issue 22: "measure at least two decodes and record the choice").

The JVM decoder is the jobs' own (``spark_jobs.jvm``, built by ``make setup``; ``transforms.decode_jvm``
leaves to Python only the pushes it is not sure of, none here). Measured in one Spark session on
``--master`` (``local[2]``), best of ``--repeat``, on the same bronze rows:

- a plain scan of bronze (to ``noop``): the floor under both;
- ``decode(bronze)`` (JVM) and ``decode(bronze, jvm=False)`` (Python ``mapInArrow``), to ``noop``;
- both again written as parquet, as the decode job writes silver (without the Delta commit).

The ratio printed is the Python decode's points/s over the JVM decode's (to ``noop``).

Run: ``.venv/bin/python benchmarks/rollup/jvm_decode.py [--instances N --pushes K]``.
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
from collections.abc import Callable

import pyspark
from pyspark.sql import DataFrame

from benchmarks.rollup.fleet import FleetSpec, land_fleet
from spark_jobs.jobs.decode import decode
from spark_jobs.jvm import JAR, register
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session
from spark_jobs.transforms.decode_jvm import FUNCTIONS


def best_of(repeat: int, job: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        job()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=4000)
    parser.add_argument("--pushes", type=int, default=36)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if not JAR.is_file():
        raise SystemExit(f"jvm_decode: no {JAR}: run `make setup` (or python -m spark_jobs.jvm)")
    workdir = Path(tempfile.mkdtemp(prefix="jvm-decode-"))
    try:
        root = str(workdir / "data")
        land_fleet(FleetSpec(args.instances, args.pushes), root)
        spark = spark_session(SparkSettings(master=args.master, app_name="jvm-decode", delta_connector="off"))
        try:
            assert register(spark, FUNCTIONS), "the JVM decoder did not register"
            lake = DeltaLake(spark)

            def bronze() -> DataFrame:
                frame = lake.read(f"{root}/telemetry_pushes/r1")
                assert frame is not None
                return frame

            points = decode(bronze()).count()
            python_points = decode(bronze(), jvm=False).count()
            assert points == python_points, (points, python_points)
            out = str(workdir / "out")

            def noop(frame: DataFrame) -> None:
                frame.write.format("noop").mode("overwrite").save()

            cases: dict[str, Callable[[], object]] = {
                "scan bronze, noop": lambda: noop(bronze()),
                "JVM decode, noop": lambda: noop(decode(bronze())),
                "Python decode, noop": lambda: noop(decode(bronze(), jvm=False)),
                "JVM decode, parquet": lambda: decode(bronze()).write.mode("overwrite").parquet(out),
                "Python decode, parquet": lambda: (
                    decode(bronze(), jvm=False).write.mode("overwrite").parquet(out)
                ),
            }
            seconds = {name: best_of(args.repeat, job) for name, job in cases.items()}
        finally:
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"jvm_decode: {points:,} points ({args.instances:,} instances x {args.pushes} pushes), {args.master}"
    )
    for name, s in seconds.items():
        print(f"  {name:28s} {s:7.2f} s {points / s:14,.0f} points/s")
    ratio = seconds["JVM decode, noop"] / seconds["Python decode, noop"]
    print(f"  ratio (Python decode points/s / JVM decode points/s)   {ratio:.3f}")
    print(
        json.dumps(
            {
                "benchmark": "jvm_decode",
                "python": platform.python_version(),
                "pyspark": pyspark.__version__,
                "master": args.master,
                "points": points,
                "seconds": seconds,
                "ratio_python_over_jvm": ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
