"""Where each sink replica lands: one bronze table per replica (a shard), unioned by readers.

Measured (``benchmarks/landing/writers.py``, see ``benchmarks/README.md``): writers appending to one
shared Delta table race for every log version, so a second replica added 0-25% and four lost a
third of the throughput, although nothing was ever lost or duplicated. With a table per replica the
replicas scale. So replica ``R`` lands in ``<data root>/<table>/<R>``, a complete Delta table; the
Spark jobs read the union of every shard under ``<data root>/<table>``. A replica id should be stable
across restarts (a StatefulSet pod name, or the host name), so restarts resume their shard and its
commit sequence instead of starting new ones.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import Final

import pyarrow.fs as pafs

from exporters.delta.object_store import arrow_filesystem

__all__ = [
    "DELTA_LOG",
    "default_replica_id",
    "delta_tables_under",
    "is_delta_table",
    "list_shards",
    "shard_uri",
]

_SAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def default_replica_id() -> str:
    """The host name (a pod's name on Kubernetes), made safe for a path segment."""
    return _SAFE.sub("_", socket.gethostname()) or "replica"


def shard_uri(data_root: str, table: str, replica_id: str) -> str:
    """``<data root>/<table>/<replica id>`` (the root may be a path or an object-store URI)."""
    if not replica_id or _SAFE.search(replica_id):
        raise ValueError(f"replica id {replica_id!r} must be letters, digits, '.', '_' or '-'")
    return f"{data_root.rstrip('/')}/{table}/{replica_id}"


DELTA_LOG: Final = "_delta_log"
"""The folder that makes a folder a Delta table: its transaction log."""


def is_delta_table(fs: pafs.FileSystem, path: str) -> bool:
    """Whether ``path`` (on ``fs``, a pyarrow file system) holds a Delta table's log."""
    return bool(fs.get_file_info(f"{path}/{DELTA_LOG}").type == pafs.FileType.Directory)


def delta_tables_under(uri: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """The Delta tables directly under ``uri`` (a local path or an object-store URI, listed with
    pyarrow's file systems: S3 with the delta-rs ``storage_options``, see ``object_store``), sorted."""
    fs, root = arrow_filesystem(uri, storage_options)
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return []
    return sorted(
        f"{uri.rstrip('/')}/{child.base_name}"
        for child in fs.get_file_info(pafs.FileSelector(root))
        if child.type == pafs.FileType.Directory and is_delta_table(fs, child.path)
    )


def list_shards(data_root: str, table: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """The shard tables of ``table`` under the data root (a path or an object-store URI), sorted."""
    return delta_tables_under(f"{data_root.rstrip('/')}/{table}", storage_options)
