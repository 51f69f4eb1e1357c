"""The Spark side's subcommand of ``telemetry-sink``: ``rollup``.

``telemetry-sink rollup [--once | --every SECONDS] [--since TIME]`` decodes what the bronze tables
gained and brings the gold rollups up to date (``jobs.rollup``), once or every ``SECONDS`` until
SIGTERM/SIGINT (a run in progress finishes first). Progress goes to stderr, one line per step; each
run ends with a JSON summary on stdout. A run that fails (storage, Spark) is reported in one line on
stderr: ``--once`` then exits 1, ``--every`` tries again at the next period (a failed run leaves every
table consistent, and the next one catches up).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from types import FrameType

from spark_jobs.jobs.rollup import RollupReport, run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.session import DEFAULT_MASTER, SparkSettings, spark_session, uses_connector
from spark_jobs.transforms.rollup import DEFAULT_LOOKBACK_S

__all__ = ["add_commands", "parse_since"]

log = logging.getLogger(__name__)


def parse_since(text: str) -> datetime:
    """``2026-11-22``, ``2026-11-22T03:00`` or any ISO 8601 time (UTC unless it says otherwise)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date or time: {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"expected spark.KEY=VALUE, got {text!r}")
    return key, value


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], lake: argparse.ArgumentParser
) -> None:
    """``rollup``, with the ``lake`` options (``--data-root``, ``--storage-option``)."""
    rollup = commands.add_parser(
        "rollup",
        parents=[lake],
        help="decode the landed pushes and roll them up by client and by quota entity (Spark)",
        description="Decode what the bronze tables gained into metric_points, quarantine what does not "
        "decode, and recompute the 1-minute and 1-hour rollups that the new data touches, exactly once. "
        "Spark runs on --master (default local[*]).",
    )
    when = rollup.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one run, then exit (the default)")
    when.add_argument("--every", type=float, metavar="SECONDS", help="a run every SECONDS until stopped")
    rollup.add_argument(
        "--since",
        type=parse_since,
        metavar="TIME",
        help="also recompute every rollup from TIME on (ISO 8601, UTC unless it says otherwise)",
    )
    rollup.add_argument(
        "--lookback-s",
        type=int,
        default=DEFAULT_LOOKBACK_S,
        help=f"how far back a cumulative point's previous point may be (default: {DEFAULT_LOOKBACK_S})",
    )
    rollup.add_argument("--master", default=DEFAULT_MASTER, help=f"Spark master (default: {DEFAULT_MASTER})")
    rollup.add_argument(
        "--conf", type=_setting, action="append", default=[], metavar="spark.KEY=VALUE", help="repeatable"
    )
    rollup.add_argument(
        "--delta-connector",
        choices=("auto", "on", "off"),
        default="auto",
        help="the Delta Spark connector: auto uses it when its jar is on Spark's classpath",
    )
    rollup.set_defaults(run=_rollup)


def _summary(report: RollupReport, seconds: float) -> dict[str, object]:
    return {
        "seconds": round(seconds, 3),
        "points": report.decode.points,
        "quarantined": report.decode.quarantined,
        "bronze": [
            {"shard": s.shard, "versions": [s.from_version, s.to_version], "points": s.points}
            for s in report.decode.shards
        ],
        "tables": {
            t.table: {"source_version": t.source_version, "partitions": t.partitions} for t in report.tables
        },
    }


def _rollup(args: argparse.Namespace) -> int:
    if args.every is not None and args.every <= 0:
        print("telemetry-sink rollup: --every must be positive", file=sys.stderr)
        return 2
    if args.lookback_s < 0:
        print("telemetry-sink rollup: --lookback-s must not be negative", file=sys.stderr)
        return 2
    settings = SparkSettings(
        master=args.master, settings=dict(args.conf), delta_connector=args.delta_connector
    )
    problems = settings.validate()
    if problems:
        print(f"telemetry-sink rollup: {'; '.join(problems)}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        print("telemetry-sink rollup: stopping after this run", file=sys.stderr, flush=True)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    spark = spark_session(settings)
    lake = DeltaLake(spark, storage_options=dict(args.storage_option), connector=uses_connector(settings))
    since = args.since
    try:
        while True:
            started = time.monotonic()

            def progress(message: str, started: float = started) -> None:
                print(f"[{time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

            try:
                report = run_rollup(
                    lake, args.data_root, lookback_s=args.lookback_s, since=since, progress=progress
                )
            except Exception as exc:  # storage or Spark: every table is still consistent (jobs.rollup)
                log.debug("rollup run failed", exc_info=True)
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                print(f"telemetry-sink rollup: the run failed: {message}", file=sys.stderr, flush=True)
                if args.every is None:
                    return 1
            else:
                print(json.dumps(_summary(report, time.monotonic() - started)), flush=True)
                since = None  # a recompute from a time is done once
            if args.every is None or stop.wait(args.every):
                return 0
    finally:
        spark.stop()
