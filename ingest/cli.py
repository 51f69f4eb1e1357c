"""The ``telemetry-sink`` command line.

Subcommands so far: ``serve`` (run the sink) and ``maintain`` (compact, checkpoint and vacuum the
bronze Delta tables). ``rollup``, ``dashboard``, ``admin`` and ``loadgen`` arrive with the issues that
build them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from deltalake.exceptions import TableNotFoundError

from exporters import list_shards, maintain
from exporters.delta.maintenance import DEFAULT_RETENTION_HOURS
from ingest.config import SinkConfig, SinkConfigError
from ingest.server import serve

__all__ = ["BRONZE_TABLES", "build_parser", "main"]

BRONZE_TABLES = ("telemetry_pushes", "quota_samples")


def _version() -> str:
    try:
        return version("telemetry-sink")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"


def _storage_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="telemetry-sink",
        description=(
            "A Kafka KIP-714 client-telemetry sink with Kafka-grade quotas: clients ask which "
            "metrics to send and push OTLP payloads, which land durably in Delta Lake tables."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve_cmd = commands.add_parser(
        "serve",
        help="run the sink: gRPC (4317) and HTTP (4318) on one event loop, landing in Delta",
        description="Run the sink until SIGTERM or SIGINT. Without --config it uses the embedded "
        "default (data root ./data, ports 4317 and 4318, a subscription to every Kafka client metric); "
        "TELEMETRY_SINK_* environment variables override any setting (see ingest/config.py).",
    )
    serve_cmd.add_argument("--config", metavar="FILE", help="the YAML configuration file")

    maintain_cmd = commands.add_parser(
        "maintain",
        help="compact, vacuum and checkpoint the bronze Delta tables (safe while the sink writes)",
        description="Compact small files, vacuum unreferenced ones older than the retention, and "
        "write a checkpoint, for each bronze table under the data root (on a local root, every "
        "replica's shard <root>/<table>/<replica>; on an object store, name shards with --table-uri).",
    )
    maintain_cmd.add_argument(
        "--data-root", default="data", help="local path or object-store URI (default: data)"
    )
    maintain_cmd.add_argument(
        "--table", action="append", choices=BRONZE_TABLES, help="only this table (repeatable; default: all)"
    )
    maintain_cmd.add_argument(
        "--retention-hours",
        type=int,
        default=DEFAULT_RETENTION_HOURS,
        help=f"vacuum files unreferenced for at least this long (default: {DEFAULT_RETENTION_HOURS})",
    )
    maintain_cmd.add_argument(
        "--table-uri", action="append", default=[], metavar="URI", help="also this table (repeatable)"
    )
    maintain_cmd.add_argument("--no-compact", action="store_true", help="skip compaction")
    maintain_cmd.add_argument("--no-vacuum", action="store_true", help="skip vacuum")
    maintain_cmd.add_argument("--no-checkpoint", action="store_true", help="skip the checkpoint")
    maintain_cmd.add_argument(
        "--storage-option",
        type=_storage_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to delta-rs (e.g. AWS_REGION=eu-west-1); repeatable",
    )
    return parser


def _maintain(args: argparse.Namespace) -> int:
    if args.retention_hours < 0:
        print("telemetry-sink maintain: --retention-hours must not be negative", file=sys.stderr)
        return 2
    status = 0
    for uri in _tables_to_maintain(args.data_root.rstrip("/"), args.table or BRONZE_TABLES, args.table_uri):
        try:
            report = maintain(
                uri,
                storage_options=dict(args.storage_option),
                compact=not args.no_compact,
                checkpoint=not args.no_checkpoint,
                vacuum=not args.no_vacuum,
                retention_hours=args.retention_hours,
            )
        except TableNotFoundError:
            print(json.dumps({"table_uri": uri, "skipped": "no such table yet"}))
            continue
        except Exception as exc:
            print(f"telemetry-sink maintain: {uri}: {exc}", file=sys.stderr)
            status = 1
            continue
        print(json.dumps(report.as_dict()))
    return status


def _tables_to_maintain(root: str, names: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Each named bronze table under the root, or (on a local root) each of its replica shards."""
    uris = []
    for name in names:
        uri = f"{root}/{name}"
        local = "://" not in root
        if local and not os.path.isdir(os.path.join(uri, "_delta_log")):
            uris += list_shards(root, name) or [uri]
        else:
            uris.append(uri)
    return uris + list(extra)


def _serve(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = SinkConfig.load(args.config)
    except SinkConfigError as exc:
        print(f"telemetry-sink serve: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(config))


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand; with none, print the help and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "maintain":
        return _maintain(args)
    if args.command == "serve":
        return _serve(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
