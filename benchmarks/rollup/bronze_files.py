"""What a rollup run loads of a bronze shard as an hour of a sink's commits piles up, with the rollup's
compaction (``spark_jobs.jobs.upkeep.compact_bronze`` at the end of each minute's run) and without it
(compaction left to the daily ``telemetry-sink maintain``), measured in the same run on the same pushes.

A fleet's pushes (``fleet.py``: librdkafka clients on schedule) land minute by minute through the real
``DeltaLandingExporter`` into two shards, in ``--commits-per-minute`` commits a minute (a sink replica
under load commits every 200 ms: 300 a minute, 18,000 an hour), each minute spread over
``--seconds-per-minute`` of wall time (60: as a sink lands them; the log's expiry goes by the wall
clock). After each minute shard B is compacted, and its log expired, as a rollup run that has read
everything would do it; shard A is not. Every ``--every`` minutes, for each shard: its files, its log
entries, the time to load its latest snapshot and its add actions (``DeltaTable`` and
``get_add_actions``, what each run does for every shard, best of ``--repeat``), and the sink's mean time
per commit over the last minute. Printed: those figures, the compactions' time, and the ratio of the
last load to the first for each shard (flat: about 1).

Run: ``.venv/bin/python benchmarks/rollup/bronze_files.py [--instances 100 --minutes 60]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repo importable

import argparse
import asyncio
import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import groupby

import deltalake
import pyarrow as pa
from deltalake import DeltaTable

from benchmarks.rollup.fleet import FleetSpec, fleet_pushes
from exporters import DeltaLandingExporter, ExportResult, TelemetryPush
from spark_jobs.jobs.upkeep import COMPACT_AT_FILES, compact_bronze


def _minutes(spec: FleetSpec) -> Iterator[list[TelemetryPush]]:
    """The fleet's pushes, a minute of arrivals at a time."""
    for _, pushes in groupby(
        fleet_pushes(spec), key=lambda p: (p.context.received_ms - spec.start_ms) // 60_000
    ):
        yield list(pushes)


async def _land(
    pushes: list[TelemetryPush], exporters: list[DeltaLandingExporter], commit_rows: int, seconds: float
) -> list[float]:
    """Land the pushes in commits of ``commit_rows`` into each shard, spread over ``seconds``; each
    shard's total time in its commits."""
    spent = [0.0] * len(exporters)
    started = time.perf_counter()
    chunks = range(0, len(pushes), commit_rows)
    for n, k in enumerate(chunks):
        chunk = pushes[k : k + commit_rows]
        for e, exporter in enumerate(exporters):
            committing = time.perf_counter()
            results = await asyncio.gather(*(exporter.export(p) for p in chunk))
            spent[e] += time.perf_counter() - committing
            if set(results) != {ExportResult.SUCCESS}:
                raise RuntimeError(f"landing failed: {sorted(r.name for r in set(results))}")
        await asyncio.sleep(max(0.0, started + seconds * (n + 1) / len(chunks) - time.perf_counter()))
    return spent


def _everything_read(_: str, shard: str) -> int:
    """A rollup that has read every version of the shard."""
    return DeltaTable(shard).version()


def _load(uri: str, repeat: int) -> tuple[int, float]:
    """The shard's files, and the best time to load its snapshot and add actions."""
    best, files = math.inf, 0
    for _ in range(repeat):
        started = time.perf_counter()
        files = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).num_rows
        best = min(best, time.perf_counter() - started)
    return files, best


async def _run(args: argparse.Namespace, root: Path) -> dict[str, object]:
    spec = FleetSpec(instances=args.instances, pushes=args.minutes * 2 + 1)
    commit_rows = max(1, math.ceil(args.instances * 2 / args.commits_per_minute))
    uris = {name: f"{root}/{name}/telemetry_pushes/r1" for name in ("A", "B")}
    exporters = [
        DeltaLandingExporter(uri, writer_id=f"bench-{n}", max_batch_rows=commit_rows)
        for n, uri in uris.items()
    ]
    for exporter in exporters:
        await exporter.start()
    marks: list[dict[str, object]] = []
    compaction_s: list[float] = []
    try:
        for minute, pushes in enumerate(_minutes(spec), start=1):
            if minute > args.minutes:
                break
            spent = await _land(pushes, exporters, commit_rows, args.seconds_per_minute)
            started = time.perf_counter()
            done = compact_bronze(str(root / "B"), at_files=args.compact_at, read_through=_everything_read)
            if done:
                compaction_s.append(time.perf_counter() - started)
            if minute % args.every == 0 or minute == args.minutes:
                mark: dict[str, object] = {"minute": minute, "commits": exporters[0].commits}
                for n, (name, uri) in enumerate(uris.items()):
                    files, seconds = _load(uri, args.repeat)
                    mark[f"{name}_files"], mark[f"{name}_load_ms"] = files, round(seconds * 1000, 2)
                    mark[f"{name}_log_entries"] = len(os.listdir(f"{uri}/_delta_log"))
                    commits = math.ceil(len(pushes) / commit_rows)
                    mark[f"{name}_commit_ms"] = round(spent[n] * 1000 / commits, 2)
                marks.append(mark)
                print(json.dumps(mark), flush=True)
    finally:
        for exporter in exporters:
            await exporter.shutdown()
    first, last = marks[0], marks[-1]
    return {
        "instances": args.instances,
        "minutes": args.minutes,
        "commits_per_minute": args.commits_per_minute,
        "commit_rows": commit_rows,
        "compact_at_files": args.compact_at,
        "compactions": len(compaction_s),
        "compaction_s_median": sorted(compaction_s)[len(compaction_s) // 2] if compaction_s else None,
        "compaction_s_max": max(compaction_s, default=None),
        "A_load_last_over_first": round(float(str(last["A_load_ms"])) / float(str(first["A_load_ms"])), 2),
        "B_load_last_over_first": round(float(str(last["B_load_ms"])) / float(str(first["B_load_ms"])), 2),
        "A_over_B_at_the_end": round(float(str(last["A_load_ms"])) / float(str(last["B_load_ms"])), 2),
        "seconds_per_minute": args.seconds_per_minute,
        "marks": marks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100, help="client instances, pushing every 30 s")
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--commits-per-minute", type=int, default=300, help="a sink's 200 ms group commits")
    parser.add_argument(
        "--compact-at", type=int, default=COMPACT_AT_FILES, help="shard B's compaction threshold"
    )
    parser.add_argument(
        "--seconds-per-minute", type=float, default=60.0, help="wall time a minute's commits are spread over"
    )
    parser.add_argument("--every", type=int, default=5, help="measure every this many minutes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, Python {platform.python_version()}, "
        f"deltalake {deltalake.__version__}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bronze-files-") as tmp:
        summary = asyncio.run(_run(args, Path(tmp)))
    print(json.dumps({k: v for k, v in summary.items() if k != "marks"}))


if __name__ == "__main__":
    main()
