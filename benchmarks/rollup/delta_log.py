"""What a question to a Delta table's log costs the rollup's driver as the table grows: the files whose
statistics may hold one minute (``spark_jobs.lake._add_actions(within=...)``, what a read ``within`` a
time range and ``all_null`` ask) and those that hold one of two timestamps (``covering``, what
replacing rows asks), on tables of more and more files, against the same question answered the way
the lake answered it before (every add action turned into a Python dict, then filtered) and against
the log's own replay and flattening alone (``get_add_actions``), measured in the same run.

A rollup run asks about 20 such questions; a gold table gains 1.5-3 files a minute, so about 4,000 a
day, and a bronze shard 18,000 an hour until it is compacted.

Run: ``.venv/bin/python benchmarks/rollup/delta_log.py [--files 2000 20000 100000]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repo importable

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from spark_jobs.lake import _add_actions

START = datetime(2026, 11, 29, tzinfo=UTC)


def _table(root: Path, files: int) -> DeltaTable:
    """A table of ``files`` files, one row each, a second apart (a partition each)."""
    times = [START + timedelta(seconds=k) for k in range(files)]
    rows = pa.table(
        {
            "k": [f"{k:07d}" for k in range(files)],
            "at": pa.array(times, pa.timestamp("us", tz="UTC")),
            "v": list(range(files)),
        }
    )
    write_deltalake(str(root), rows, partition_by=["k"], mode="overwrite")
    return DeltaTable(str(root))


def _dicts_within(table: DeltaTable, low: datetime, high: datetime) -> list[dict[str, Any]]:
    """The way before: every add action a dict, then filtered."""
    kept = []
    for action in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        smallest, largest = action.get("min.at"), action.get("max.at")
        if (
            smallest is None
            or largest is None
            or (smallest < high and largest + timedelta(milliseconds=1) >= low)
        ):
            kept.append(action)
    return kept


def _kept(table: DeltaTable, within: tuple[str, datetime, datetime]) -> list[dict[str, Any]]:
    """The way now: filtered in Arrow, the kept actions turned into dicts."""
    kept: list[dict[str, Any]] = _add_actions(table, within=within).to_pylist()
    return kept


def _best(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, nargs="+", default=[2_000, 20_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        for files in args.files:
            table = _table(Path(work) / f"t{files}", files)
            low = START + timedelta(seconds=files // 2)
            high = low + timedelta(minutes=1)
            wanted = [low, low + timedelta(seconds=30)]
            new = _add_actions(table, within=("at", low, high)).to_pylist()
            old = _dicts_within(table, low, high)
            assert [a["path"] for a in new] == [a["path"] for a in old], "the two answers differ"
            covering = _add_actions(table, covering=("at", wanted)).num_rows
            assert covering == 2, covering
            within = ("at", low, high)
            figures = {
                "files": files,
                "replay_s": _best(partial(table.get_add_actions, flatten=True), args.repeat),
                "dicts_s": _best(partial(_dicts_within, table, low, high), args.repeat),
                "within_s": _best(partial(_kept, table, within), args.repeat),
                "covering_s": _best(partial(_add_actions, table, covering=("at", wanted)), args.repeat),
            }
            figures["ratio"] = figures["dicts_s"] / figures["within_s"]
            results.append(figures)
            print(
                f"{files:>8,} files: log replay {figures['replay_s'] * 1000:8.1f} ms   "
                f"dict per file {figures['dicts_s'] * 1000:8.1f} ms   "
                f"within (Arrow) {figures['within_s'] * 1000:8.1f} ms   "
                f"covering {figures['covering_s'] * 1000:8.1f} ms   "
                f"dicts / Arrow {figures['ratio']:5.1f}x",
                flush=True,
            )
    print(
        json.dumps(
            {
                "benchmark": "delta_log",
                "python": platform.python_version(),
                "date": datetime.now(UTC).strftime("%Y-%m-%d"),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
