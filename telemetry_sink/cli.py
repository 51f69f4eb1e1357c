"""The ``telemetry-sink`` command line: the front end's subcommands (``ingest.cli``: ``serve``,
``maintain``, ``admin``, ``loadgen``) and the Spark side's (``spark_jobs.cli``: ``rollup``,
``dashboard``) under one parser. Each subcommand carries the function that runs it.

Importing this module is cheap: the subcommands' modules (the sink, Spark, pandas) are imported when
the parser is built, not before. The ``telemetry-sink`` script imports it, and so does every process
Python's ``spawn`` starts from the sink (its payload decoders re-import the main script): they stay
small (``ingest.decoding``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version

__all__ = ["build_parser", "main"]


def _version() -> str:
    try:
        return version("telemetry-sink")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    from exporters import storage_option  # noqa: PLC0415 - see the module docstring
    from ingest import cli as ingest_cli  # noqa: PLC0415
    from spark_jobs import cli as spark_cli  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="telemetry-sink",
        description=(
            "A Kafka KIP-714 client-telemetry sink with Kafka-grade quotas: clients ask which "
            "metrics to send and push OTLP payloads, which land durably in Delta Lake tables and are "
            "rolled up with Spark for Spark SQL."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    lake = argparse.ArgumentParser(add_help=False)
    lake.add_argument("--data-root", default="data", help="local path or object-store URI (default: data)")
    lake.add_argument(
        "--storage-option",
        type=storage_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to delta-rs (e.g. AWS_REGION=eu-west-1); repeatable",
    )
    ingest_cli.add_commands(commands, lake)
    spark_cli.add_commands(commands, lake)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; with none, print the help and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    return run(args)
