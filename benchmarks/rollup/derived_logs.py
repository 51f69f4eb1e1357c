"""What the log of a table the rollup writes costs each load of it as the table ages, under Delta's
default log retention (30 days) and under the day the rollup now keeps (``spark_jobs.lake``'s
``TABLE_CONFIGURATION``, expired by ``spark_jobs.jobs.upkeep.expire_logs``), measured in the same run.

The rollup commits to each of its tables about once a minute (silver, the quarantine, the 1-minute
gold tables; a run loads each of them a few times, 28 loads on the driver's main thread of a warm
minute by a profile). For each age, a table gets one log entry a minute of that age (written straight
into ``_delta_log``, a ``txn`` commit each, as the quarantine's usual commit is; stamped a minute apart
on the clock) and a checkpoint at its newest version, as delta-rs leaves it every 100 commits. Each
load is timed (best of ``--repeat``) with the whole age in the log (the default's 30 days keep all of
it) and after ``expire_log`` with a day's retention (what a run's expiry leaves).

Run: ``.venv/bin/python benchmarks/rollup/derived_logs.py [--days 0.0417 1 7 30]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repo importable

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import deltalake
import pyarrow as pa
from deltalake import DeltaTable

from exporters import expire_log
from spark_jobs.lake import TABLE_CONFIGURATION

ENTRIES_A_DAY = 1_440
CHECKPOINT_INTERVAL = 100
"""delta-rs's default ``delta.checkpointInterval``."""
SCHEMA = pa.schema([pa.field("bucket_start", pa.timestamp("us", tz="UTC")), pa.field("value", pa.float64())])


def _aged_table(root: Path, entries: int) -> str:
    """A table with ``entries`` commits after its creation, one a minute up to now, and a checkpoint
    every ``CHECKPOINT_INTERVAL`` of them, as delta-rs leaves it; Delta's default log retention (no
    ``TABLE_CONFIGURATION``)."""
    uri = str(root)
    DeltaTable.create(uri, SCHEMA)
    log = root / "_delta_log"
    now = time.time()

    def stamp(path: Path, version: int) -> None:
        at = now - (entries - version) * 60
        os.utime(path, (at, at))

    stamp(log / f"{0:020d}.json", 0)
    for version in range(1, entries + 1):
        at_ms = int((now - (entries - version) * 60) * 1000)
        actions = [
            {"txn": {"appId": "telemetry-sink-rollup/bench", "version": version, "lastUpdated": at_ms}},
            {"commitInfo": {"timestamp": at_ms, "operation": "WRITE", "operationParameters": {}}},
        ]
        entry = log / f"{version:020d}.json"
        entry.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        stamp(entry, version)
        if version % CHECKPOINT_INTERVAL == 0 or version == entries:
            DeltaTable(uri).create_checkpoint()
            stamp(log / f"{version:020d}.checkpoint.parquet", version)
    return uri


def _load_ms(uri: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        DeltaTable(uri).version()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def _log_entries(uri: str) -> int:
    return sum(1 for name in os.listdir(Path(uri) / "_delta_log") if name.endswith(".json"))


def measure(days: float, repeat: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="derived-logs-"))
    try:
        entries = max(1, round(days * ENTRIES_A_DAY))
        uri = _aged_table(workdir / "t", entries)
        before = {"entries": _log_entries(uri), "load_ms": _load_ms(uri, repeat)}
        table = DeltaTable(uri)
        table.alter.set_table_properties(dict(TABLE_CONFIGURATION))
        table.create_checkpoint()
        started = time.perf_counter()
        expired = expire_log(uri, DeltaTable(uri).version())
        expiry_ms = (time.perf_counter() - started) * 1000
        after = {"entries": _log_entries(uri), "load_ms": _load_ms(uri, repeat)}
        return {"days": days, "default": before, "a_day": after, "expired": expired, "expiry_ms": expiry_ms}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--days", type=float, nargs="+", default=[1 / 24, 1, 7, 30])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"derived_logs: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, deltalake {deltalake.__version__}"
    )
    print("  age        log entries (30-day default / a day)   load (default / a day)   expiry")
    rows = [measure(days, args.repeat) for days in args.days]
    for r in rows:
        d, a = r["default"], r["a_day"]
        print(
            f"  {r['days'] * 24:7.1f} h   {d['entries']:>9,} / {a['entries']:>6,}"
            f"                  {d['load_ms']:8.2f} / {a['load_ms']:6.2f} ms"
            f"      {r['expiry_ms']:7.1f} ms"
        )
    first, last = rows[0], rows[-1]
    default = last["default"]["load_ms"] / first["default"]["load_ms"]
    a_day = last["a_day"]["load_ms"] / first["a_day"]["load_ms"]
    print(f"  oldest / youngest load: under the default {default:.2f}x, with a day's log {a_day:.2f}x")
    print(json.dumps({"benchmark": "derived_logs", "rows": rows}))


if __name__ == "__main__":
    main()
