"""A cold ``telemetry-sink rollup --once`` (the Helm CronJob's run: a fresh JVM each time) after one new
minute of a fleet with an hour of history: issue 36's goal is <= 6 s of job time (the JSON summary's
``seconds``, JVM start not counted) and <= 15 s of wall time, for 1,000 clients.

The fleet (``fleet.py``: librdkafka clients on schedule, ``--instances``, pushing every 30 s) is placed
on the wall clock so that its hour of history (``--history`` rounds) ends now: the command decides by
the wall clock which hours are closed, as it does beside a live sink. The history lands in one bronze
shard through the real ``DeltaLandingExporter`` in commits of 5,000 pushes and is rolled up by one
``rollup --once`` (not timed); then, ``--minutes`` times, one more minute (two pushes an instance) lands in
commits of 100 (a sink's short batches) and one ``rollup --once`` runs, timed: its job time (the
summary's ``seconds``) and its wall time (the process, JVM start included).

Run: ``.venv/bin/python benchmarks/rollup/cold_once.py [--instances 1000 --minutes 3]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repo importable

import argparse
import json
import platform
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from typing import Any, Final

from benchmarks.rollup.fleet import FleetSpec, land_fleet

JOB_GOAL_S: Final = 6.0
WALL_GOAL_S: Final = 15.0
REPO: Final = Path(__file__).resolve().parents[2]


def rollup_once(data_root: str, master: str) -> tuple[dict[str, Any], float]:
    """One ``telemetry-sink rollup --once`` in its own process: its JSON summary and its wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry_sink",
            "rollup",
            "--once",
            "--data-root",
            data_root,
            "--master",
            master,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"rollup --once exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--history", type=int, default=120, help="push rounds of history (120: an hour)")
    parser.add_argument("--minutes", type=int, default=3, help="new minutes, one cold run each")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    rounds = args.history + 2 * args.minutes
    now_ms = time.time_ns() // 1_000_000
    spec = FleetSpec(args.instances, rounds, start_ms=now_ms - args.history * 30_000, seed=13)
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, Python {platform.python_version()}: "
        f"{args.instances:,} instances, {args.history} rounds of history, master {args.master}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="cold-once-") as tmp:
        root = f"{tmp}/data"
        landed = time.perf_counter()
        land_fleet(spec, root, 5000, range(args.history))
        landed_s = time.perf_counter() - landed
        summary, wall = rollup_once(root, args.master)
        rolled = f"rolled up in {summary['seconds']:.1f} s ({wall:.1f} s wall)"
        print(f"history: landed in {landed_s:.1f} s, {rolled}", flush=True)
        runs = []
        for minute in range(args.minutes):
            first = args.history + 2 * minute
            payloads, commits = land_fleet(spec, root, 100, range(first, first + 2))
            summary, wall = rollup_once(root, args.master)
            run = {
                "pushes": len(payloads),
                "bronze_commits": commits,
                "points": summary["points"],
                "job_s": summary["seconds"],
                "wall_s": round(wall, 3),
                "lag_s": summary.get("lag_s"),
            }
            runs.append(run)
            print(json.dumps(run), flush=True)
    jobs, walls = sorted(r["job_s"] for r in runs), sorted(r["wall_s"] for r in runs)
    print(
        json.dumps(
            {
                "benchmark": "cold_once",
                "instances": args.instances,
                "history_rounds": args.history,
                "job_s_median": jobs[len(jobs) // 2],
                "wall_s_median": walls[len(walls) // 2],
                "job_goal_s": JOB_GOAL_S,
                "wall_goal_s": WALL_GOAL_S,
                "goal_met": jobs[-1] <= JOB_GOAL_S and walls[-1] <= WALL_GOAL_S,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
