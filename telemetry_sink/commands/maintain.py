"""``telemetry-sink maintain``: compact, vacuum and checkpoint the Delta tables under the data root
(``exporters.delta.maintenance``), safe while the sink and the rollups write.

delta-rs is imported when the command runs, not when it is declared.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence

__all__ = ["add_arguments"]


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """Declare ``telemetry-sink maintain`` on ``parser``, with its ``run`` function as a default
    (``telemetry_sink.cli`` has already added ``--config``, and the lake options ``--data-root`` and
    ``--storage-option``)."""
    _declare_maintain(parser)


def _declare_maintain(parser: argparse.ArgumentParser) -> None:
    from exporters.delta.maintenance import (  # noqa: PLC0415 - see the module docstring
        DEFAULT_RETENTION_HOURS,
        MIN_RETENTION_HOURS,
    )

    parser.description = (
        "Compact small files, vacuum unreferenced ones older than the retention, and write a "
        "checkpoint, for each bronze table under the data root (on a local root, every replica's shard "
        "<root>/<table>/<replica>, and also the rollups' silver and gold tables; on an object store, "
        "name shards and other tables with --table-uri). Safe while the sink and rollups write: vacuum "
        f"never deletes files younger than {MIN_RETENTION_HOURS} hours."
    )
    parser.add_argument(
        "--table",
        action="append",
        metavar="NAME",
        help="only this table under the data root, e.g. telemetry_pushes (repeatable; default: all)",
    )
    parser.add_argument(
        "--retention-hours",
        type=int,
        default=DEFAULT_RETENTION_HOURS,
        help="vacuum files unreferenced for at least this long; a commit in flight has unreferenced "
        f"files, so less than {MIN_RETENTION_HOURS} is refused (default: {DEFAULT_RETENTION_HOURS})",
    )
    parser.add_argument(
        "--table-uri", action="append", default=[], metavar="URI", help="also this table (repeatable)"
    )
    parser.add_argument("--no-compact", action="store_true", help="skip compaction")
    parser.add_argument("--no-vacuum", action="store_true", help="skip vacuum")
    parser.add_argument("--no-checkpoint", action="store_true", help="skip the checkpoint")
    parser.set_defaults(run=_maintain)


def _maintain(args: argparse.Namespace) -> int:
    from deltalake.exceptions import TableNotFoundError  # noqa: PLC0415 - see the module docstring

    from exporters import maintain  # noqa: PLC0415
    from exporters.delta.maintenance import RetentionTooShortError, check_retention  # noqa: PLC0415
    from exporters.delta.object_store import commit_safety_problems  # noqa: PLC0415

    try:
        check_retention(args.retention_hours)
    except RetentionTooShortError as exc:
        print(f"telemetry-sink maintain: --retention-hours: {exc}", file=sys.stderr)
        return 2
    options = dict(args.storage_option)
    unsafe = commit_safety_problems(args.data_root, options)
    if unsafe:
        print(f"telemetry-sink maintain: {'; '.join(unsafe)}", file=sys.stderr)
        return 2
    status = 0
    for uri in _tables_to_maintain(args.data_root.rstrip("/"), args.table or [], args.table_uri, options):
        try:
            report = maintain(
                uri,
                storage_options=options,
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


def _derived_tables(root: str, storage_options: Mapping[str, str]) -> list[str]:
    """The other Delta tables directly under the data root: the Spark jobs' silver and gold tables
    (not the config log, whose history the replicas read)."""
    from exporters import delta_tables_under  # noqa: PLC0415 - see the module docstring
    from exporters.delta.schema import BRONZE_TABLES, CONFIG_LOG_TABLE  # noqa: PLC0415

    return [
        name
        for name in (uri.rsplit("/", 1)[1] for uri in delta_tables_under(root, storage_options))
        if name not in (*BRONZE_TABLES, CONFIG_LOG_TABLE)
    ]


def _tables_to_maintain(
    root: str, names: Sequence[str], extra: Sequence[str], storage_options: Mapping[str, str]
) -> list[str]:
    """Each named table under the data root (a path or an object-store URI), or each of its replica
    shards; by default the bronze tables and every other table there (silver and gold)."""
    from exporters import list_shards  # noqa: PLC0415 - see the module docstring
    from exporters.delta.schema import BRONZE_TABLES  # noqa: PLC0415

    if not names:
        names = [*BRONZE_TABLES, *_derived_tables(root, storage_options)]
    uris = []
    for name in names:
        uri = f"{root.rstrip('/')}/{name}"
        uris += list_shards(root, name, storage_options) or [uri]
    return uris + list(extra)
