"""``telemetry-sink rollup``, ``dashboard`` and ``sql-server``: the Spark side's subcommands (``spark_jobs``).

``telemetry-sink rollup [--once | --every SECONDS] [--since TIME]`` decodes what the bronze tables
gained and brings the gold rollups up to date (``jobs.rollup``), once or every ``SECONDS`` until
SIGTERM/SIGINT (a run in progress finishes first). ``--every`` keeps a fixed rate on the wall clock
(``next_run_at``): runs start ``RUN_DELAY_S`` past each multiple of ``SECONDS``, so with 60 each run
starts just after a minute ends, and a run that overruns skips the starts it missed rather than
drifting or bunching. Progress goes to stderr, one line per step; each run ends with a JSON summary on
stdout. A run that fails (storage, Spark) is reported in one line on stderr: ``--once`` then exits 1,
``--every`` tries again at the next period (a failed run leaves every table consistent, and the next
one catches up).

``telemetry-sink dashboard [--from T] [--to T] [--out FILE.html] [--serve --port P]`` renders the
dashboard (``spark_jobs.dashboards``) of a window (default: the last 24 hours) into one offline HTML
file, or serves it, rendered again every ``--refresh`` seconds, until SIGTERM/SIGINT. A failed render is
one line on stderr (exit 1; with ``--serve`` the previous page stays up).

``telemetry-sink sql-server [--host H] [--port 10000] [--transport binary|http] [--connect-port P]``
serves the tables read-only over JDBC/ODBC and Spark Connect (``spark_jobs.sql_server``) until
SIGTERM/SIGINT: it says on stderr where it listens, which views it makes as tables change, and
refresh failures (the previous views stay up); wrong settings exit 2 before Spark starts, a port it
cannot listen on exits 1, and so does a server that cannot serve any more (its JVM, Spark or a
listener is gone: its watchdog says which). ``--hash-password USER`` prints a password file line for
the password read from stdin, and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from spark_jobs.dashboards import Window
    from spark_jobs.jobs.rollup import RollupReport
    from spark_jobs.lake import DeltaLake
    from spark_jobs.session import SparkSettings
    from spark_jobs.sql_server import SqlServerSettings

__all__ = ["RUN_DELAY_S", "add_arguments", "next_run_at", "parse_since"]

log = logging.getLogger(__name__)

DASHBOARD_SPAN: Final = timedelta(days=1)
RUN_DELAY_S: Final = 5.0
"""How long after each multiple of ``--every`` a run starts (a quarter of the period if that is less):
the pushes of the minute just ended are in a sink's next group commit, 200 ms later, by then."""


def next_run_at(now: float, every: float) -> float:
    """When the next ``--every`` run starts (seconds since the epoch): the first time after ``now``
    that is ``RUN_DELAY_S`` (at most a quarter of ``every``) past a multiple of ``every``."""
    delay = min(RUN_DELAY_S, every / 4)
    return (math.floor((now - delay) / every) + 1) * every + delay


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


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """Declare ``rollup`` or ``dashboard`` on ``parser``, with its ``run`` function as a default
    (``telemetry_sink.cli`` has already added ``--config`` and the lake options ``--data-root`` and
    ``--storage-option``). Spark is imported when the command runs."""
    _add_spark_options(parser)
    if command == "rollup":
        _add_rollup(parser)
    elif command == "dashboard":
        _add_dashboard(parser)
    else:
        _add_sql_server(parser)


def _add_spark_options(parser: argparse.ArgumentParser) -> None:
    from spark_jobs.session import DEFAULT_MASTER  # noqa: PLC0415 - see add_arguments

    parser.add_argument(
        "--master", help=f"Spark master (default: the config's spark.master, else {DEFAULT_MASTER})"
    )
    parser.add_argument(
        "--conf",
        type=_setting,
        action="append",
        default=[],
        metavar="spark.KEY=VALUE",
        help="over the config's spark.conf; repeatable",
    )
    parser.add_argument(
        "--delta-connector",
        choices=("auto", "on", "off"),
        help="the Delta Spark connector: auto uses it when its jar is on Spark's classpath (default: the "
        "config's spark.delta_connector, else auto)",
    )


def _add_rollup(rollup: argparse.ArgumentParser) -> None:
    from spark_jobs.transforms.rollup import DEFAULT_LOOKBACK_S  # noqa: PLC0415 - see add_arguments

    rollup.description = (
        "Decode what the bronze tables gained into metric_points, quarantine what does not "
        "decode, and recompute the 1-minute and 1-hour rollups that the new data touches, exactly once. "
        "Spark runs on --master."
    )
    when = rollup.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one run, then exit (the default)")
    when.add_argument(
        "--every",
        type=float,
        metavar="SECONDS",
        help="a run every SECONDS until stopped, at a fixed rate: each starts a few seconds past a "
        "multiple of SECONDS on the clock (the first at once)",
    )
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
    rollup.set_defaults(run=_rollup)


def _summary(report: RollupReport, seconds: float) -> dict[str, object]:
    return {
        "seconds": round(seconds, 3),
        "lag_s": None if report.lag_s is None else round(report.lag_s, 3),
        "points": report.decode.points,
        "quarantined": report.decode.quarantined,
        "bronze": [
            {"shard": s.shard, "versions": [s.from_version, s.to_version]} for s in report.decode.shards
        ],
        "tables": {
            t.table: {"source_version": t.source_version, "partitions": t.partitions} for t in report.tables
        },
        "compacted": [asdict(c) for c in report.compactions],
        "logs_expired": report.logs_expired,
    }


def _spark_settings(args: argparse.Namespace, command: str) -> SparkSettings | None:
    """The Spark settings of the options, or None (said on stderr) when they are wrong."""
    from spark_jobs.session import DEFAULT_MASTER, SparkSettings  # noqa: PLC0415 - see add_arguments

    settings = SparkSettings(
        master=args.master or DEFAULT_MASTER,
        settings=dict(args.conf),
        delta_connector=args.delta_connector or "auto",
    )
    problems = settings.validate()
    if problems:
        print(f"telemetry-sink {command}: {'; '.join(problems)}", file=sys.stderr)
        return None
    return settings


def _stop_on_signals(command: str, what: str) -> threading.Event:
    """An event set on SIGTERM/SIGINT (saying ``what`` happens next on stderr)."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        print(f"telemetry-sink {command}: {what}", file=sys.stderr, flush=True)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)
    return stop


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _open_lake(args: argparse.Namespace, settings: SparkSettings) -> tuple[SparkSession, DeltaLake]:
    """A Spark session of ``settings`` and the Delta tables through it, with the storage options."""
    from spark_jobs.lake import DeltaLake  # noqa: PLC0415 - see add_arguments
    from spark_jobs.session import spark_session, uses_connector  # noqa: PLC0415

    spark = spark_session(settings)
    return spark, DeltaLake(
        spark, storage_options=dict(args.storage_option), connector=uses_connector(settings)
    )


def _unsafe_storage(args: argparse.Namespace, command: str) -> bool:
    """Whether the data root's storage cannot commit safely (said on stderr)."""
    from exporters.delta.object_store import commit_safety_problems  # noqa: PLC0415 - see add_arguments

    unsafe = commit_safety_problems(args.data_root, dict(args.storage_option))
    if unsafe:
        print(f"telemetry-sink {command}: {'; '.join(unsafe)}", file=sys.stderr)
    return bool(unsafe)


def _rollup(args: argparse.Namespace) -> int:
    if args.every is not None and args.every <= 0:
        print("telemetry-sink rollup: --every must be positive", file=sys.stderr)
        return 2
    if args.lookback_s < 0:
        print("telemetry-sink rollup: --lookback-s must not be negative", file=sys.stderr)
        return 2
    if _unsafe_storage(args, "rollup"):
        return 2
    settings = _spark_settings(args, "rollup")
    if settings is None:
        return 2
    stop = _stop_on_signals("rollup", "stopping after this run")
    spark, lake = _open_lake(args, settings)
    try:
        return _rollup_runs(args, lake, stop)
    finally:
        spark.stop()


def _rollup_runs(args: argparse.Namespace, lake: DeltaLake, stop: threading.Event) -> int:
    """Run the rollup once, or every ``--every`` seconds until ``stop``; the exit status."""
    from spark_jobs.jobs.rollup import run_rollup  # noqa: PLC0415 - see add_arguments

    since = args.since
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
            print(f"telemetry-sink rollup: the run failed: {_first_line(exc)}", file=sys.stderr, flush=True)
            if args.every is None:
                return 1
        else:
            print(json.dumps(_summary(report, time.monotonic() - started)), flush=True)
            since = None  # a recompute from a time is done once
        if args.every is None or stop.wait(max(0.0, next_run_at(time.time(), args.every) - time.time())):
            return 0


def _add_dashboard(dashboard: argparse.ArgumentParser) -> None:
    dashboard.description = (
        "Run the dashboard's named Spark SQL queries (spark_jobs/dashboards/queries/*.sql) over "
        "the 1-minute rollups of a window and render one self-contained HTML page: fleet overview, top "
        "client instances and quota entities by Kafka client metric, throttling, client drill-down, config "
        "history. The window is the 24 hours up to now unless --from/--to say otherwise."
    )
    dashboard.add_argument(
        "--from",
        dest="start",
        type=parse_since,
        metavar="TIME",
        help="window start (ISO 8601, UTC unless it says otherwise; default: 24 hours before the end)",
    )
    dashboard.add_argument(
        "--to",
        dest="end",
        type=parse_since,
        metavar="TIME",
        help="window end, excluded (ISO 8601, UTC unless it says otherwise; default: the end of this minute)",
    )
    dashboard.add_argument(
        "--out", metavar="FILE.html", help="write the page here (default without --serve: dashboard.html)"
    )
    dashboard.add_argument(
        "--serve", action="store_true", help="serve the page over HTTP, rendered again periodically"
    )
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="--serve: address to listen on (default: 127.0.0.1)"
    )
    dashboard.add_argument("--port", type=int, default=8050, help="--serve: port (default: 8050)")
    dashboard.add_argument(
        "--refresh",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="--serve: render every SECONDS (default: 60)",
    )
    dashboard.add_argument(
        "--metric", help="the Kafka client metric the rankings open on (a menu offers every one)"
    )
    dashboard.add_argument("--top", type=int, default=10, help="rows of each ranking (default: 10)")
    dashboard.add_argument(
        "--max-clients", type=int, default=1000, help="client instances in the drill-down (default: 1000)"
    )
    dashboard.set_defaults(run=_dashboard)


def _window(args: argparse.Namespace) -> Window:
    """The window of the options now: ``--to`` (default: the end of this minute) back to ``--from``
    (default: 24 hours earlier)."""
    from spark_jobs.dashboards import Window  # noqa: PLC0415 - see add_arguments

    limits = {"top": args.top, "max_clients": args.max_clients}
    if args.end is None:
        window = Window.last(DASHBOARD_SPAN, datetime.now(UTC), **limits)
        return window if args.start is None else replace(window, start=args.start)
    return Window(args.start or args.end - DASHBOARD_SPAN, args.end, **limits)


def _dashboard_problems(args: argparse.Namespace) -> list[str]:
    try:
        problems = _window(args).problems()
    except OverflowError:
        problems = ["--from/--to are too far from now for a window of 24 hours"]
    if args.serve and not 0 <= args.port <= 65535:
        problems.append(f"--port must be between 0 and 65535, got {args.port}")
    if args.serve and not args.refresh > 0:
        problems.append("--refresh must be positive")
    if args.out and not Path(args.out).absolute().parent.is_dir():
        problems.append(f"--out: the folder {Path(args.out).absolute().parent} does not exist")
    return problems


def _dashboard(args: argparse.Namespace) -> int:
    problems = _dashboard_problems(args)
    if problems:
        print(f"telemetry-sink dashboard: {'; '.join(problems)}", file=sys.stderr)
        return 2
    settings = _spark_settings(args, "dashboard")
    if settings is None:
        return 2
    out = Path(args.out) if args.out else (None if args.serve else Path("dashboard.html"))
    stop = _stop_on_signals("dashboard", "stopping") if args.serve else threading.Event()
    spark, lake = _open_lake(args, settings)
    render = _Renderer(args, spark, lake, out, stop)
    try:
        if not args.serve:
            try:
                render()
            except Exception:  # said by render
                return 1
            return 0
        return _serve_dashboard(args, render, spark, stop)
    finally:
        spark.stop()


def _say(message: str) -> None:
    print(f"telemetry-sink dashboard: {message}", file=sys.stderr, flush=True)


class _Renderer:
    """Renders the page of the options' window (now), writes it to ``out`` if any, says how it went."""

    def __init__(
        self,
        args: argparse.Namespace,
        spark: SparkSession,
        lake: DeltaLake,
        out: Path | None,
        stop: threading.Event,
    ) -> None:
        self.args, self.spark, self.lake, self.out, self.stop = args, spark, lake, out, stop

    def __call__(self) -> str:
        from spark_jobs.dashboards import build_page  # noqa: PLC0415 - see add_arguments

        args, out = self.args, self.out
        started = time.monotonic()
        try:
            page, results = build_page(
                self.spark,
                self.lake,
                args.data_root,
                _window(args),
                metric=args.metric,
                refresh_s=args.refresh if args.serve else None,
            )
            if out is not None:
                temporary = out.with_name(f".{out.name}.tmp")
                temporary.write_text(page, encoding="utf-8")
                temporary.replace(out)
        except Exception as exc:  # storage, Spark or the output file: said here, raised for the caller
            log.debug("dashboard render failed", exc_info=True)
            if not self.stop.is_set():  # (a render cancelled by a stop is not a failure)
                _say(f"the render failed: {_first_line(exc)}")
            raise
        rows = sum(len(r.rows) for r in results.values())
        where = f" -> {out}" if out is not None else ""
        _say(
            f"{len(results)} queries, {rows} rows, "
            f"{len(page) / 2**20:.1f} MiB page in {time.monotonic() - started:.1f} s{where}"
        )
        metrics = {r["metric_name"] for r in results["top_clients"].records()}
        if args.metric and metrics and args.metric not in metrics:
            _say(
                f"no data for --metric {args.metric} in the window; "
                "the rankings open on another metric (the menu lists those with data)"
            )
        return page


def _serve_dashboard(
    args: argparse.Namespace, render: _Renderer, spark: SparkSession, stop: threading.Event
) -> int:
    """Serve the page, rendered again every ``--refresh`` seconds, until ``stop``."""
    from spark_jobs.dashboards.serve import DashboardServer  # noqa: PLC0415 - see add_arguments

    try:
        server = DashboardServer(render, host=args.host, port=args.port, refresh_s=args.refresh)
    except OSError as exc:
        print(f"telemetry-sink dashboard: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server.start()
    _say(f"serving http://{args.host}:{server.port}/")
    stop.wait()
    spark.sparkContext.cancelAllJobs()  # a render in progress ends now, not at its last query
    server.stop()
    return 0


def _add_sql_server(server: argparse.ArgumentParser) -> None:
    from spark_jobs.sql_server import (  # noqa: PLC0415 - see add_arguments
        DEFAULT_CONNECT_PORT,
        DEFAULT_HEALTH_PORT,
        DEFAULT_PORT,
        SqlServerSettings,
    )

    defaults = SqlServerSettings()
    server.description = (
        "Serve every table (telemetry.<table>) and the dashboard's named queries "
        "(telemetry.dashboard_<query>) read-only over JDBC/ODBC (Spark's Thrift server, the HiveServer2 "
        "protocol) and, with --connect-port, Spark Connect. New Delta versions become visible within "
        "--refresh seconds. Loopback only unless --host says otherwise, which needs --password-file."
    )
    server.add_argument("--host", default=defaults.host, help="address to listen on (default: 127.0.0.1)")
    server.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"JDBC/ODBC port (default: {DEFAULT_PORT})"
    )
    server.add_argument(
        "--transport",
        choices=("binary", "http"),
        default=defaults.transport,
        help="the Thrift transport: binary (HiveServer2's default) or http (default: binary)",
    )
    server.add_argument(
        "--http-path", default=defaults.http_path, help="the HTTP transport's path (default: cliservice)"
    )
    server.add_argument(
        "--health-port",
        type=int,
        default=DEFAULT_HEALTH_PORT,
        help=f"GET /healthz on --host (default: {DEFAULT_HEALTH_PORT})",
    )
    server.add_argument(
        "--connect-port",
        type=int,
        nargs="?",
        const=DEFAULT_CONNECT_PORT,
        metavar="PORT",
        help=f"also serve Spark Connect (PORT default: {DEFAULT_CONNECT_PORT}), read-only like JDBC; needs "
        "--connect-token-file",
    )
    server.add_argument(
        "--connect-host", default=defaults.connect_host, help="Spark Connect's address (default: 127.0.0.1)"
    )
    server.add_argument(
        "--connect-token-file",
        type=Path,
        metavar="FILE",
        help="Spark Connect's pre-shared token (clients send it as a bearer token); required with "
        "--connect-port",
    )
    server.add_argument(
        "--connect-insecure-loopback",
        action="store_true",
        help="a developer's machine: Spark Connect on a loopback --connect-host without a token (not with "
        "--password-file or --ldap-url)",
    )
    server.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="lines user:pbkdf2_sha256$... (see --hash-password); this or --ldap-url is required "
        "beyond loopback",
    )
    server.add_argument(
        "--ldap-url",
        metavar="URL",
        help="check passwords by an LDAP bind instead (ldap:// or ldaps://HOST[:PORT])",
    )
    server.add_argument(
        "--ldap-base-dn",
        metavar="DN",
        help="with --ldap-url: users bind as uid=USER,DN (e.g. ou=people,dc=example,dc=org)",
    )
    server.add_argument("--tls-cert", type=Path, metavar="PEM", help="TLS certificate chain (PEM)")
    server.add_argument("--tls-key", type=Path, metavar="PEM", help="TLS private key (PEM, unencrypted)")
    server.add_argument(
        "--refresh",
        type=float,
        default=defaults.refresh_s,
        metavar="SECONDS",
        help=f"look for new Delta versions every SECONDS (default: {defaults.refresh_s:g})",
    )
    server.add_argument(
        "--query-timeout",
        type=float,
        default=defaults.query_timeout_s,
        metavar="SECONDS",
        help="cancel a statement this long after it starts, planning included "
        f"(default: {defaults.query_timeout_s:g})",
    )
    server.add_argument(
        "--max-result-rows",
        type=int,
        default=defaults.max_result_rows,
        metavar="ROWS",
        help=f"a query's result holds at most ROWS rows (default: {defaults.max_result_rows})",
    )
    server.add_argument(
        "--hash-password",
        metavar="USER",
        help="print a --password-file line for USER with the password read from stdin, and exit",
    )
    server.set_defaults(run=_sql_server)


def _sql_server_settings(args: argparse.Namespace) -> SqlServerSettings:
    from spark_jobs.sql_server import SqlServerSettings  # noqa: PLC0415 - see add_arguments

    return SqlServerSettings(
        host=args.host,
        port=args.port,
        transport=args.transport,
        http_path=args.http_path,
        health_port=args.health_port,
        connect_port=args.connect_port,
        connect_host=args.connect_host,
        connect_token_file=args.connect_token_file,
        connect_insecure_loopback=args.connect_insecure_loopback,
        password_file=args.password_file,
        ldap_url=args.ldap_url,
        ldap_base_dn=args.ldap_base_dn,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        refresh_s=args.refresh,
        query_timeout_s=args.query_timeout,
        max_result_rows=args.max_result_rows,
    )


def _sql_server(args: argparse.Namespace) -> int:
    from spark_jobs.sql_server import (  # noqa: PLC0415 - see add_arguments
        hash_password,
        isolation,
        ports_in_use,
        settings_conflicts,
        spark_conf,
        spark_environment,
    )

    def say(message: str) -> None:
        print(f"telemetry-sink sql-server: {message}", file=sys.stderr, flush=True)

    if args.hash_password is not None:
        password = sys.stdin.readline().rstrip("\n")
        if not password or ":" in args.hash_password:
            say("--hash-password needs a user name without ':' and a password on stdin")
            return 2
        print(f"{args.hash_password}:{hash_password(password)}")
        return 0
    settings = _sql_server_settings(args)
    problems = settings.problems() + settings_conflicts(dict(args.conf))
    if problems:
        say("; ".join(problems))
        return 2
    taken = ports_in_use(settings)
    if taken:
        say(f"cannot start: {'; '.join(taken)}")
        return 1
    args.conf = [*args.conf, *spark_conf(settings).items()]
    spark_settings = _spark_settings(args, "sql-server")
    if spark_settings is None:
        return 2
    try:  # the clients' statements run out of the server's JVM (an executor JVM on a local master)
        isolated = isolation(spark_settings.master, spark_settings.settings)
    except ValueError as exc:
        say(str(exc))
        return 2
    spark_settings = replace(
        spark_settings, master=isolated.master, settings={**spark_settings.settings, **isolated.settings}
    )
    os.environ.update(spark_environment(settings))
    os.environ.update(isolated.environment)
    try:
        return _serve_sql(args, settings, spark_settings, say)
    finally:
        isolated.remove()


def _serve_sql(
    args: argparse.Namespace,
    settings: SqlServerSettings,
    spark_settings: SparkSettings,
    say: Callable[[str], None],
) -> int:
    """Serve until SIGTERM/SIGINT (0) or until the server cannot serve any more (1: its JVM, Spark or a
    listener is gone, which its watchdog says)."""
    from py4j.protocol import Py4JError  # noqa: PLC0415 - see add_arguments

    from spark_jobs.sql_server import SqlServer  # noqa: PLC0415

    stop = _stop_on_signals("sql-server", "stopping")
    spark, lake = _open_lake(args, spark_settings)
    server = SqlServer(spark, lake, args.data_root, settings, say=say, on_failure=lambda _: stop.set())
    try:
        try:
            server.start()
        except Exception as exc:  # a port in use, a missing jar, a bad keystore: said, exit 1
            log.debug("sql-server start failed", exc_info=True)
            say(f"cannot start: {_first_line(exc)}")
            return 1
        scheme = "http" if settings.transport == "http" else "binary"
        say(
            f"serving {len(server.views)} views over JDBC/ODBC ({scheme}) on {settings.host}:{settings.port}"
            + (
                f", Spark Connect on {settings.connect_host}:{settings.connect_port}"
                if settings.connect_port
                else ""
            )
            + f", health on http://{settings.host}:{server.health_port}/healthz"
        )
        stop.wait()
        return 0 if server.failure is None else 1
    finally:
        server.stop()
        with contextlib.suppress(*(() if server.failure is None else (Py4JError, OSError))):
            spark.stop()
