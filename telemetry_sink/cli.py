"""The ``telemetry-sink`` command line: every subcommand under one parser, each declared by its module
in ``telemetry_sink.commands`` (``serve``, ``maintain``, ``admin``, ``loadgen``; ``rollup``,
``dashboard`` and ``sql-server`` in ``commands.spark``), each carrying the function that runs it.

Importing this module is cheap, and so are ``--version`` and ``--help``: a subcommand's module (the
sink, Spark, plotly, delta-rs) is imported only when that subcommand is on the command line. The
``telemetry-sink`` script imports this module, and so does every process Python's ``spawn`` starts
from the sink (its payload decoders re-import the main script): they stay small (``ingest.push.decoding``).

Every subcommand takes ``--config FILE``, the sink's one YAML file (``ingest.config``): ``serve`` runs
it, the commands that use the Delta tables (``maintain``, ``rollup``, ``dashboard``, ``sql-server``)
read its ``data_root`` and ``storage_options`` (with the ``TELEMETRY_SINK_*`` overrides), the Spark
commands its ``spark`` section too, ``admin`` and ``loadgen`` the sink's ports and TLS. Their own
flags override the file. This package is the one that sees both sides (the sink and the Spark jobs),
so it is the one that reads the file for the Spark side (``pyproject.toml``'s import contracts)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

__all__ = ["build_parser", "main"]


@dataclass(frozen=True, slots=True)
class _Command:
    """A subcommand: the module of ``telemetry_sink.commands`` whose ``add_arguments(name, parser)``
    declares it, its one-line help, whether it works on the Delta tables (``--data-root``,
    ``--storage-option``), and whether it starts Spark (``--master``, ``--conf``, ``--delta-connector``)."""

    module: str
    help: str
    lake: bool = False
    spark: bool = False


_COMMANDS: Final = {
    "serve": _Command(
        "serve", "run the sink: its gRPC, HTTP and Kafka listeners on one event loop, landing in Delta"
    ),
    "maintain": _Command(
        "maintain",
        "compact, vacuum and checkpoint the Delta tables (safe while the sink writes)",
        lake=True,
    ),
    "admin": _Command(
        "admin",
        "subscriptions, client quotas, client instances and the config log, via the admin API",
    ),
    "loadgen": _Command(
        "loadgen", "run a simulated fleet of KIP-714 clients against a sink and print a summary"
    ),
    "rollup": _Command(
        "spark",
        "decode the landed pushes and roll them up by client and by quota entity (Spark)",
        lake=True,
        spark=True,
    ),
    "dashboard": _Command(
        "spark",
        "render the Spark SQL dashboard of the rollups as one offline HTML page, or serve it",
        lake=True,
        spark=True,
    ),
    "sql-server": _Command(
        "spark",
        "serve the tables read-only over JDBC/ODBC (Spark's Thrift server) and Spark Connect",
        lake=True,
        spark=True,
    ),
}


def _version() -> str:
    try:
        return version("telemetry-sink")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"


class _LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subparsers declared by name and help only; a subcommand's arguments (and so its module's
    imports) are added when the command line names it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list)  # argparse passes the command and its arguments
        name = values[0]
        command = _COMMANDS.get(name)
        subparser = self._name_parser_map.get(name)
        if command is not None and subparser is not None and not subparser.get_default("run"):
            _declare(name, command, subparser)
        super().__call__(parser, namespace, values, option_string)


def _declare(name: str, command: _Command, parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="the sink's YAML configuration, the same file for every command (default: the embedded "
        "default); TELEMETRY_SINK_* environment variables override it, this command's flags override both",
    )
    if command.lake:
        from exporters import storage_option  # noqa: PLC0415 - see the module docstring

        parser.add_argument(
            "--data-root",
            metavar="ROOT",
            help="local path or object-store URI of the Delta tables (default: the config's data_root)",
        )
        parser.add_argument(
            "--storage-option",
            type=storage_option,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="passed to delta-rs (e.g. AWS_REGION=eu-west-1), over the config's storage_options; "
            "repeatable",
        )
    importlib.import_module(f"telemetry_sink.commands.{command.module}").add_arguments(name, parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="telemetry-sink",
        description=(
            "A Kafka KIP-714 client-telemetry sink with Kafka-grade quotas: clients ask which "
            "metrics to send and push OTLP payloads, which land durably in Delta Lake tables and are "
            "rolled up with Spark for Spark SQL."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.register("action", "parsers", _LazyCommands)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in _COMMANDS.items():
        commands.add_parser(name, help=command.help)
    return parser


def _read_lake_settings(args: argparse.Namespace) -> str | None:
    """Fill ``args.data_root`` and ``args.storage_option`` (and for the Spark commands ``args.master``,
    ``args.conf`` and ``args.delta_connector``) from ``--config`` (and the environment) under the
    flags; the error, or None."""
    from ingest.config import SinkConfig, SinkConfigError  # noqa: PLC0415 - see the module docstring

    try:
        config = SinkConfig.load(args.config)
    except SinkConfigError as exc:
        return str(exc)
    if args.data_root is None:
        args.data_root = config.data_root
    args.storage_option = [*config.storage_options.items(), *args.storage_option]
    if _COMMANDS[args.command].spark:
        args.master = args.master or config.spark.master
        args.conf = [*config.spark.conf.items(), *args.conf]
        args.delta_connector = args.delta_connector or config.spark.delta_connector
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; with none, print the help and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    if _COMMANDS[args.command].lake:
        problem = _read_lake_settings(args)
        if problem is not None:
            print(f"telemetry-sink {args.command}: {problem}", file=sys.stderr)
            return 2
    return run(args)
