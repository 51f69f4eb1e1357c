"""Delta access for every Spark job: read a table (at a version, or only what was added since one)
and write one (append, replace whole partitions, or replace the rows of some timestamps) exactly once.

Two storage paths behind one interface, ``LakeStorage``, used by ``DeltaLake``, whose constructor
is the one place that chooses between them (``connector=``):

- **The Delta Spark connector** (``ConnectorStorage``), when the session loaded it
  (``session.uses_connector``): reads are ``spark.read.format("delta")`` (``versionAsOf``), writes
  are ``df.write.format("delta")`` with ``txnAppId``/``txnVersion`` (Delta skips a batch it already
  has) and ``replaceWhere`` over the partitions (or the timestamps) being replaced. Images built with
  ``DELTA_CONNECTOR=true`` put ``delta-spark_4.2_2.13-4.4.0.jar`` and ``delta-storage-4.4.0.jar`` (what
  ``delta-spark``'s ``configure_spark_with_delta_pip`` names for PySpark 4.2) in Spark's jars folder;
  elsewhere pass them in ``spark.jars`` (``make setup`` fetches them: ``artifacts/delta-spark``).
- **The delta-rs bridge** (``BridgeStorage``) otherwise (what runs where the connector's jars cannot
  be had): reads take the snapshot's active files from ``deltalake`` and let Spark's own parquet
  reader scan them (partition values from the ``column=value`` folders, kept as strings); writes let
  Spark write parquet into a hidden staging folder of the table, move the files to their partition
  folders, and commit them as ``add`` actions (with statistics from the parquet footers), together with the
  ``remove`` actions of the partitions being replaced and the ``txn(app_id, version)``, in one
  delta-rs transaction. Replacing the rows of some timestamps (``replace_rows``) removes the files
  whose statistics say they may hold one, and writes their other rows again, in the same commit.
  Nothing is visible before that commit; a failed job leaves only unreferenced
  files (deleted on the way out, else by ``vacuum``). On an object store (``s3://``) Spark's Hadoop
  file system is not used at all (it would need the ``hadoop-aws`` jars): the executors read and write
  the parquet files with pyarrow, reaching the store with the same ``storage_options`` as delta-rs
  (``exporters.delta.object_store``); each task writes its rows straight to their partition folders
  and reports the files, which the driver commits as above.

Both paths answer ``txn_version`` and ``added_files`` through delta-rs, which reads tables written by
either. Exactly once: a job writes batch ``version`` of ``app_id`` only if the table's ``txn`` for
``app_id`` is below it, so a re-run commits nothing twice. One writer per ``app_id`` at a time. A
bridge commit can carry the batches of several app ids at once (a table that follows every bronze
shard takes all their new rows in one commit); a connector write carries one (``per_commit``).

Incremental reads: ``added_files(uri, after, until)`` lists the data files that commits
``after + 1 .. until`` added, leaving out files that only rewrote data already there (``OPTIMIZE``:
compaction by ``telemetry-sink maintain``), whose rows were counted when first added.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import quote, unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.pandas.types import from_arrow_schema

from exporters import commit_time, delta_tables_under, is_delta_table
from exporters.delta.object_store import arrow_filesystem, is_local, store_path
from spark_jobs.errors import SparkJobError

__all__ = [
    "TABLE_CONFIGURATION",
    "BridgeStorage",
    "Clustering",
    "ConnectorStorage",
    "DeltaLake",
    "LakeError",
    "LakeStorage",
    "Partition",
    "PartitionFilter",
    "RowFilter",
    "TimeRange",
    "partition_predicate",
    "row_predicate",
]

log = logging.getLogger(__name__)

Partition = Mapping[str, str]
"""One partition: a value for every partition column."""
PartitionFilter = tuple[str, Sequence[str]]
"""A partition column and the values to read."""
RowFilter = tuple[str, Sequence[datetime]]
"""A timestamp column and the values whose rows a write replaces."""
Clustering = tuple[str, int]
"""A column and a number of rows: a write sorts each task's rows by the column (within their partition)
and writes files of at most that many rows, so that each file holds a narrow range of the column
(which ``within`` reads skip files by)."""
TimeRange = tuple[str, datetime, datetime]
"""A timestamp column, from (inclusive) and until (exclusive): a read of the rows of the files that may
hold rows in that range (by the statistics in the Delta log; data skipping). At least every row in
range, and possibly others."""
_STATS_PRECISION_US: Final = 1_000.0
"""Delta's statistics hold timestamps to the millisecond: a file's true largest value may be up to this
many microseconds past its ``max``."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_REWRITES: Final = frozenset({"OPTIMIZE"})
"""Operations whose added files hold rows already in the table (``dataChange = false``)."""
_HIVE_NULL: Final = "__HIVE_DEFAULT_PARTITION__"
_STATS_STRING_MAX: Final = 32


_Source = TypeVar("_Source")

_SNAPSHOTS: Final = 64
"""How many table snapshots (a table at a version) a ``DeltaLake`` keeps loaded."""

TABLE_CONFIGURATION: Final = {
    # a rollup run commits to each table it keeps about once a minute, ~1,440 log entries a day, and
    # each load of a table lists them all (delta-rs, on a local data root): the log keeps a day of them
    # (Delta's default is 30), expired by the rollup behind what the tables that follow the table have
    # read of it (``jobs.upkeep.expire_logs``), never by a commit's own cleanup
    "delta.logRetentionDuration": "interval 1 days",
    "delta.enableExpiredLogCleanup": "false",
}
"""What ``DeltaLake.write`` sets on the tables it writes (silver, the quarantine, the gold tables):
when it creates one, and on a table that lacks a key (one an earlier version created), at its next
write. A key a table has already (an operator's own retention) is left as it is."""


class LakeError(SparkJobError):
    """A table cannot be read or written as asked."""


@dataclass(frozen=True)
class _Batch:
    """What one ``write`` commits: its rows' schema and partitioning, its ``txn``s (app id, batch
    version), what it replaces."""

    schema: pa.Schema
    partition_by: tuple[str, ...]
    txns: tuple[tuple[str, int], ...]
    replace: Sequence[Partition] | None
    replace_rows: RowFilter | None = None
    max_file_rows: int | None = None


@dataclass(frozen=True)
class _WrittenFile:
    relative: str
    size: int
    partition: dict[str, str | None]
    stats: str


def partition_predicate(partitions: Sequence[Partition]) -> str:
    """A SQL predicate matching exactly these partitions (the connector's ``replaceWhere``)."""

    def literal(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    terms = [
        "(" + " AND ".join(f"`{column}` = {literal(value)}" for column, value in sorted(p.items())) + ")"
        for p in partitions
    ]
    return " OR ".join(terms) if terms else "false"


def row_predicate(rows: RowFilter) -> str:
    """A SQL predicate matching the rows of these timestamps (UTC, as the sessions' time zone)."""
    column, values = rows
    if not values:
        return "false"
    stamps = ", ".join(f"TIMESTAMP '{v.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}'" for v in values)
    return f"`{column}` IN ({stamps})"


class DeltaLake:
    """Delta tables for one Spark session (see the module docstring): what both storage paths share
    (versions, ``txn``, files and the exactly-once check, through delta-rs), and ``read`` and the
    commit of a batch through the session's ``LakeStorage``."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        storage_options: Mapping[str, str] | None = None,
        connector: bool = False,
    ) -> None:
        self.spark = spark
        self.storage_options = dict(storage_options or {})
        # the one place the storage path is chosen
        self.storage: LakeStorage = ConnectorStorage(self) if connector else BridgeStorage(self)
        self._snapshots: OrderedDict[tuple[str, int], DeltaTable] = OrderedDict()
        self._snapshots_lock = threading.Lock()

    # -- delta-rs: versions, transactions, files ---------------------------------------------------

    def table(self, uri: str, version: int | None = None) -> DeltaTable | None:
        """The table (at ``version``), or None if there is none at ``uri``. A version is a snapshot
        that never changes: the last ``_SNAPSHOTS`` asked for are kept, since a run asks for the same
        ones several times (each load replays the log)."""
        key = None if version is None else (uri, version)
        if key is not None:
            with self._snapshots_lock:
                if key in self._snapshots:
                    self._snapshots.move_to_end(key)
                    return self._snapshots[key]
        try:
            table = DeltaTable(uri, version=version, storage_options=self.storage_options or None)
        except TableNotFoundError:
            return None
        if key is not None:
            with self._snapshots_lock:
                self._snapshots[key] = table
                while len(self._snapshots) > _SNAPSHOTS:
                    self._snapshots.popitem(last=False)
        return table

    def version(self, uri: str) -> int | None:
        """The table's latest version, or None if there is none."""
        table = self.table(uri)
        return None if table is None else table.version()

    def txn_version(self, uri: str, app_id: str) -> int:
        """The last batch ``app_id`` committed to the table, or -1."""
        table = self.table(uri)
        if table is None:
            return -1
        version = table.transaction_version(app_id)
        return -1 if version is None else version

    def commit_time(self, uri: str, version: int) -> datetime | None:
        """When ``version`` of the table was committed: its log entry's modification time in the
        store (one metadata request, whatever the table's age), or None once the log no longer holds
        it (expired)."""
        return commit_time(uri, version, self.storage_options)

    def shards(self, uri: str) -> list[str]:
        """The Delta tables directly under ``uri`` (a sharded bronze table: one per sink replica),
        sorted; ``[uri]`` if ``uri`` is itself a table; none if it does not exist."""
        fs, root = arrow_filesystem(uri, self.storage_options)
        if is_delta_table(fs, root):
            return [uri]
        return delta_tables_under(uri, self.storage_options)

    def added_files(self, uri: str, after: int, until: int) -> list[str]:
        """URIs of the data files that commits ``after + 1 .. until`` added and that are still in the
        table at ``until``... or were replaced since only by a rewrite (see the module docstring)."""
        if until <= after:
            return []
        table = self.table(uri, until)
        if table is None:
            raise LakeError(f"no Delta table at {uri}")
        history = table.history(limit=until - after)
        rewrites = sorted(
            int(h["version"])
            for h in history
            if after < int(h["version"]) <= until and h.get("operation") in _REWRITES
        )
        # between two rewrites the files that appeared are new data; a rewrite's own files are not
        added: set[str] = set()
        start = after
        for boundary in [*rewrites, until + 1]:
            end = boundary - 1
            if end > start:
                before = set(self._files(uri, start)) if start >= 0 else set()
                added.update(path for path in self._files(uri, end) if path not in before)
            start = boundary
        return sorted(added)

    def added_actions(self, uri: str, after: int, until: int) -> list[dict[str, Any]] | None:
        """The add actions, with their statistics (flattened: ``num_records``, ``min.<column>``, ...),
        of the files that commits ``after + 1 .. until`` added (``added_files``); None when one of
        them is no longer in the table at ``until`` (compacted since)."""
        files = {f.rsplit("/", 1)[-1] for f in self.added_files(uri, after, until)}
        table = self.table(uri, until)
        if not files or table is None:
            return []
        actions = _add_actions(table)
        names = [unquote(path).rsplit("/", 1)[-1] for path in actions.column("path").to_pylist()]
        kept = actions.filter(pa.array([name in files for name in names])).to_pylist()
        return kept if len(kept) == len(files) else None

    def added_rows(self, uri: str, after: int, until: int) -> int | None:
        """How many rows the files that commits ``after + 1 .. until`` added hold, by their
        statistics in the Delta log; None when the log cannot tell."""
        actions = self.added_actions(uri, after, until)
        if actions is None or any(a.get("num_records") is None for a in actions):
            return None
        return sum(int(a["num_records"]) for a in actions)

    def _files(self, uri: str, version: int) -> list[str]:
        table = self.table(uri, version)
        return [] if table is None else table.file_uris()

    @staticmethod
    def arrow_schema(table: DeltaTable) -> pa.Schema:
        return pa.schema(table.schema().to_arrow())

    # -- reading -----------------------------------------------------------------------------------

    def read(
        self,
        uri: str,
        version: int | None = None,
        *,
        partitions: PartitionFilter | None = None,
        within: TimeRange | None = None,
    ) -> DataFrame | None:
        """The table (at ``version``; only the ``partitions`` whose column takes one of the values,
        and only the files that may hold rows ``within`` a time range, when given), or None if there
        is none."""
        return self.storage.read(uri, version, partitions, within)

    def all_null(self, uri: str, column: str, within: TimeRange) -> bool:
        """Whether the Delta log's statistics say that ``column`` is null in every row of the table's
        files that may hold rows ``within`` a time range (False where a file has no null count):
        a question about the rows answered without reading them."""
        table = self.table(uri)
        if table is None:
            return True
        return all(
            action.get(f"null_count.{column}") is not None
            and action.get(f"null_count.{column}") == action.get("num_records")
            for action in _actions_within(table, within)
        )

    def span(self, uri: str, column: str, version: int | None = None) -> tuple[datetime, datetime] | None:
        """The smallest and largest value of timestamp ``column`` in the table (at ``version``), by the
        Delta log's statistics (to the millisecond, like them), or by reading the column where a file
        has none; None when the table is missing or empty."""
        table = self.table(uri, version)
        if table is None:
            return None
        bounds = _bounds(_add_actions(table), column)
        if bounds is not None and not (np.isnan(bounds[0]).any() or np.isnan(bounds[1]).any()):
            if not len(bounds[0]):
                return None
            low, high = (
                _EPOCH + timedelta(microseconds=float(b)) for b in (bounds[0].min(), bounds[1].max())
            )
            return low, high
        values = table.to_pyarrow_table(columns=[column]).column(column)
        low, high = pc.min(values).as_py(), pc.max(values).as_py()
        return None if low is None else (low.astimezone(UTC), high.astimezone(UTC))

    def holds(self, uri: str, within: TimeRange, version: int | None = None) -> bool:
        """Whether the Delta log's statistics say the table (at ``version``) may hold a row ``within``
        a time range (a file without statistics may)."""
        table = self.table(uri, version)
        return table is not None and _add_actions(table, within=within).num_rows > 0

    def read_added(self, uri: str, after: int, until: int) -> DataFrame | None:
        """The rows that commits ``after + 1 .. until`` added (``added_files``); None if no table."""
        table = self.table(uri, until) if until >= 0 else None
        if table is None:
            return None
        return self.read_files(uri, self.added_files(uri, after, until), self.arrow_schema(table))

    def read_files(self, uri: str, files: Sequence[str], schema: pa.Schema) -> DataFrame:
        """These data files of the table at ``uri``, in the table's ``schema`` (partition columns
        from the folders, as strings): Spark's parquet reader on a local disk, pyarrow in the
        executors on an object store. Both paths read added files this way."""
        spark_schema = from_arrow_schema(schema, prefer_timestamp_ntz=False)
        if not files:
            return self.spark.createDataFrame([], spark_schema)
        if not is_local(uri):
            return self._read_with_arrow(uri, files, schema)
        frame = (
            self.spark.read.option("basePath", _spark_path(uri))
            .schema(spark_schema)
            .parquet(*(_spark_path(f) for f in files))
        )
        return frame.select(*(f"`{name}`" for name in schema.names))

    def _read_with_arrow(self, uri: str, files: Sequence[str], schema: pa.Schema) -> DataFrame:
        """The files read by pyarrow in the executors (a task per group of files)."""
        options = self.storage_options

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            fs, root = arrow_filesystem(uri, options)
            for batch in batches:
                for path in batch.column(0).to_pylist():
                    yield from _read_data_file(fs, root, store_path(path), schema)

        paths = self.spark.createDataFrame([(f,) for f in files], "path string")
        tasks = min(len(files), self.spark.sparkContext.defaultParallelism)
        return paths.repartition(tasks).mapInArrow(
            read, from_arrow_schema(schema, prefer_timestamp_ntz=False)
        )

    # -- writing -----------------------------------------------------------------------------------

    def write(
        self,
        frame: DataFrame | None,
        uri: str,
        *,
        schema: pa.Schema,
        partition_by: Sequence[str],
        txns: Mapping[str, int],
        replace: Sequence[Partition] | None = None,
        replace_rows: RowFilter | None = None,
        clustered: Clustering | None = None,
    ) -> bool:
        """Commit ``frame`` as one batch of each app id of ``txns`` (app id -> batch version; more
        than one where the storage commits several, ``per_commit``): appended, or replacing every
        row of the ``replace`` partitions (which need not all have new rows), or every row whose
        ``replace_rows`` column holds one of its timestamps (``frame`` holds only such rows); written
        ``clustered`` by a column, when given. ``frame`` None: no rows (a batch that only moves the
        ``txn``, or only removes rows), committed without a Spark job on the bridge. False, writing
        nothing, if the table already has the batch of every app id; ``LakeError`` if it has some of
        them only (the rows of those would be there twice). The table is created with ``schema`` if
        it does not exist."""
        if not txns or (len(txns) > 1 and not self.storage.several_txns):
            raise LakeError(f"{uri}: a commit of this storage carries one txn, not {len(txns)}")
        existing = self.table(uri)
        if existing is not None:
            self._check_layout(existing, uri, schema, partition_by)
            had = {
                app for app, version in txns.items() if (existing.transaction_version(app) or -1) >= version
            }
            if had == set(txns):
                log.info("%s already has batch %s: nothing to write", uri, dict(txns))
                return False
            if had:
                raise LakeError(
                    f"{uri} already has the batches of {sorted(had)} but not the others of {dict(txns)}"
                )
            _configure(existing, uri)
        max_file_rows = None
        if frame is not None:
            frame = frame.select(*(f"`{name}`" for name in schema.names))
            if clustered is not None:
                column, max_file_rows = clustered
                # the write sorts by partition anyway
                frame = frame.sortWithinPartitions(*partition_by, column)
        batch = _Batch(schema, tuple(partition_by), tuple(txns.items()), replace, replace_rows, max_file_rows)
        self.storage.commit(frame, uri, batch, existing)
        if existing is None:  # the connector's writer creates a table without the configuration
            created = self.table(uri)
            if created is not None:
                _configure(created, uri)
        return True

    def per_commit(self, sources: Sequence[_Source]) -> list[list[_Source]]:
        """``sources`` that a table follows (each with a ``txn`` of its own) grouped as the commits
        that can carry their batches: one commit for all of them where the storage commits several
        ``txn``s at once (the bridge), one each where it does not (the connector)."""
        if self.storage.several_txns:
            return [list(sources)] if sources else []
        return [[source] for source in sources]

    def _check_layout(
        self, table: DeltaTable, uri: str, schema: pa.Schema, partition_by: Sequence[str]
    ) -> None:
        """Refuse a write that does not match the table (a commit would corrupt its metadata)."""
        columns = table.metadata().partition_columns
        if list(columns) != list(partition_by):
            raise LakeError(f"{uri} is partitioned by {columns}, not {list(partition_by)}")
        have = {f.name: f.type for f in self.arrow_schema(table)}
        want = {f.name: f.type for f in schema}
        if have.keys() != want.keys() or any(not have[n].equals(want[n]) for n in want):
            raise LakeError(f"{uri} has the schema {self.arrow_schema(table)}, not {schema}")


class LakeStorage(Protocol):
    """A storage path of ``DeltaLake``: how it reads a table's rows and commits a batch."""

    several_txns: bool
    """Whether one commit can carry the ``txn`` of several app ids."""

    def read(
        self, uri: str, version: int | None, partitions: PartitionFilter | None, within: TimeRange | None
    ) -> DataFrame | None:
        """``DeltaLake.read``."""

    def commit(self, frame: DataFrame | None, uri: str, batch: _Batch, existing: DeltaTable | None) -> None:
        """Write ``frame`` (in the batch's schema; None: no rows) and commit it as ``batch`` in one
        Delta transaction; ``existing`` is the table before (None if there was none)."""


class ConnectorStorage:
    """The Delta Spark connector's path: Spark reads and writes the tables itself."""

    several_txns = False  # a write's txnAppId and txnVersion: one

    def __init__(self, lake: DeltaLake) -> None:
        self.lake = lake

    def read(
        self, uri: str, version: int | None, partitions: PartitionFilter | None, within: TimeRange | None
    ) -> DataFrame | None:
        if self.lake.table(uri) is None:
            return None
        reader = self.lake.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        frame = reader.load(uri)
        if partitions is not None:
            column, values = partitions
            frame = frame.where(F.col(column).isin(list(values)))
        if within is not None:  # the connector skips files by their statistics itself
            column, low, high = within
            frame = frame.where((F.col(column) >= F.lit(low)) & (F.col(column) < F.lit(high)))
        return frame

    def commit(self, frame: DataFrame | None, uri: str, batch: _Batch, existing: DeltaTable | None) -> None:
        if frame is None:
            schema = from_arrow_schema(batch.schema, prefer_timestamp_ntz=False)
            frame = self.lake.spark.createDataFrame([], schema)
        writer = (
            frame.write.format("delta")
            .partitionBy(*batch.partition_by)
            .option("txnAppId", batch.txns[0][0])
            .option("txnVersion", batch.txns[0][1])
        )
        if batch.max_file_rows is not None:
            writer = writer.option("maxRecordsPerFile", batch.max_file_rows)
        if batch.replace is not None and existing is not None:
            writer = writer.mode("overwrite").option("replaceWhere", partition_predicate(batch.replace))
        elif batch.replace_rows is not None and existing is not None:
            writer = writer.mode("overwrite").option("replaceWhere", row_predicate(batch.replace_rows))
        else:
            writer = writer.mode("append")
        writer.save(uri)


class BridgeStorage:
    """The delta-rs bridge's path: Spark (on a local disk) or pyarrow in the executors (on an object
    store) reads and writes the parquet files; delta-rs commits them (see the module docstring)."""

    several_txns = True

    def __init__(self, lake: DeltaLake) -> None:
        self.lake = lake
        self.storage_options = lake.storage_options

    def read(
        self, uri: str, version: int | None, partitions: PartitionFilter | None, within: TimeRange | None
    ) -> DataFrame | None:
        table = self.lake.table(uri, version)
        if table is None:
            return None
        if partitions is None:
            files = table.file_uris()
        else:
            column, values = partitions
            files = table.file_uris(file_pruning_predicate=[(column, "in", list(values))]) if values else []
        if within is not None and files:
            names = _files_within(table, within)  # file names are unique in a table (a UUID each)
            files = [f for f in files if f.rsplit("/", 1)[-1] in names]
        return self.lake.read_files(uri, files, self.lake.arrow_schema(table))

    def commit(self, frame: DataFrame | None, uri: str, batch: _Batch, existing: DeltaTable | None) -> None:
        fs, root = arrow_filesystem(uri, self.storage_options)
        if frame is None:
            self._commit_files(fs, root, uri, batch, [])
            return
        if not is_local(uri):
            written = self._write_with_arrow(frame, uri, batch)
            self._commit_files(fs, root, uri, batch, written)
            return
        staging = f"_staging-{uuid.uuid4().hex}"
        moved: list[str] = []
        try:
            writer = frame.write.mode("errorifexists").partitionBy(*batch.partition_by)
            if batch.max_file_rows is not None:
                writer = writer.option("maxRecordsPerFile", batch.max_file_rows)
            writer.parquet(_spark_path(f"{uri.rstrip('/')}/{staging}"))
            files = self._stage(fs, root, staging, batch.partition_by, moved)
        except Exception:
            for path in moved:
                _delete_quietly(fs, path)
            raise
        finally:
            _delete_quietly(fs, f"{root}/{staging}", directory=True)
        self._commit_files(fs, root, uri, batch, files)

    def _commit_files(
        self, fs: pafs.FileSystem, root: str, uri: str, batch: _Batch, files: Sequence[_WrittenFile]
    ) -> None:
        """Commit ``files`` (and the removals of the partitions replaced) with the batch's ``txn``;
        delete them if the commit fails."""
        files = list(files)
        try:
            # the newest snapshot, read after the files were written: the removals are computed against it
            table = self.lake.table(uri) or self._create(uri, batch.schema, batch.partition_by)
            now_ms = int(time.time() * 1000)
            removals = []
            if batch.replace:
                removals = self._removals(table, batch.replace, now_ms)
            elif batch.replace_rows:
                removals = self._row_removals(
                    fs, root, table, batch.replace_rows, now_ms=now_ms, written=files
                )
            actions: list[AddAction | RemoveAction] = [
                AddAction(f.relative, f.size, f.partition, now_ms, True, f.stats) for f in files
            ]
            actions.extend(removals)
            table.create_write_transaction(
                actions,
                mode="append",
                schema=batch.schema,
                partition_by=list(batch.partition_by) or None,
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(app, version, now_ms) for app, version in batch.txns],
                    max_commit_retries=10,
                ),
            )
        except Exception:
            for written in files:  # never referenced by the log: nobody can see them
                _delete_quietly(fs, f"{root}/{written.relative}")
            raise

    def _write_with_arrow(self, frame: DataFrame, uri: str, batch: _Batch) -> list[_WrittenFile]:
        """Each task writes its rows with pyarrow, a parquet file per partition, straight into the
        partition folders of the table at ``uri``; the files written (not committed yet)."""
        options = self.storage_options
        partition_by = batch.partition_by
        max_rows = batch.max_file_rows

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            received = list(batches)
            if not received:
                return
            fs, root = arrow_filesystem(uri, options)
            files = _write_partitions(fs, root, pa.Table.from_batches(received), partition_by, max_rows)
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "relative": f.relative,
                        "size": f.size,
                        "partition": json.dumps(f.partition),
                        "stats": f.stats,
                    }
                    for f in files
                ],
                schema=_WRITTEN_FILES,
            )

        rows = frame.mapInArrow(write, "relative string, size long, partition string, stats string").collect()
        return [_WrittenFile(r.relative, r.size, json.loads(r.partition), r.stats) for r in rows]

    def _stage(
        self,
        fs: pafs.FileSystem,
        root: str,
        staging: str,
        partition_by: Sequence[str],
        moved: list[str],
    ) -> list[_WrittenFile]:
        """Move Spark's part files from the staging folder to their partition folders."""
        written = []
        selector = pafs.FileSelector(f"{root}/{staging}", recursive=True)
        for info in fs.get_file_info(selector):
            name = info.base_name
            if (
                info.type != pafs.FileType.File
                or not name.endswith(".parquet")
                or name.startswith(("_", "."))
            ):
                continue
            folders = info.path[len(root) + len(staging) + 2 :].split("/")[:-1]
            partition = _partition_values(folders, partition_by)
            relative = "/".join([*folders, f"part-{uuid.uuid4().hex}.parquet"])
            fs.create_dir("/".join([root, *folders]), recursive=True)
            fs.move(info.path, f"{root}/{relative}")
            moved.append(f"{root}/{relative}")
            with fs.open_input_file(f"{root}/{relative}") as handle:
                stats = _stats(pq.read_metadata(handle))
            written.append(_WrittenFile(relative, info.size or 0, partition, stats))
        return written

    def _create(self, uri: str, schema: pa.Schema, partition_by: Sequence[str]) -> DeltaTable:
        return DeltaTable.create(
            uri,
            schema,
            mode="ignore",
            partition_by=list(partition_by) or None,
            configuration=TABLE_CONFIGURATION,
            storage_options=self.storage_options or None,
        )

    def _row_removals(
        self,
        fs: pafs.FileSystem,
        root: str,
        table: DeltaTable,
        rows: RowFilter,
        *,
        now_ms: int,
        written: list[_WrittenFile],
    ) -> list[RemoveAction]:
        """The removals of every file that may hold a row of ``rows`` (its statistics' range covers
        one of the timestamps, or it has none); the other rows of those files are written again
        (appended to ``written``)."""
        column, values = rows
        wanted = [v.astimezone(UTC) for v in values]
        columns = table.metadata().partition_columns
        schema = self.lake.arrow_schema(table)
        removals = []
        for action in _add_actions(table, covering=(column, wanted)).to_pylist():
            partition = {c: action.get(f"partition.{c}") for c in columns}
            removals.append(RemoveAction(action["path"], True, now_ms, action["size_bytes"], partition))
            path = f"{root}/{unquote(action['path'])}"
            held = pa.Table.from_batches(list(_read_data_file(fs, root, path, schema)), schema=schema)
            replaced = pc.is_in(held.column(column), value_set=pa.array(wanted, schema.field(column).type))
            kept = held.filter(pc.invert(pc.fill_null(replaced, False)))
            if kept.num_rows:
                written.extend(_write_partitions(fs, root, kept, columns))
        return removals

    @staticmethod
    def _removals(table: DeltaTable, replace: Sequence[Partition], now_ms: int) -> list[RemoveAction]:
        wanted = {tuple(sorted(p.items())) for p in replace}
        columns = table.metadata().partition_columns
        wanted_columns = ["path", "size_bytes", *(f"partition.{column}" for column in columns)]
        removals = []
        for action in _add_actions(table).select(wanted_columns).to_pylist():
            partition = {column: action.get(f"partition.{column}") for column in columns}
            if tuple(sorted(partition.items())) in wanted:
                removals.append(RemoveAction(action["path"], True, now_ms, action["size_bytes"], partition))
        return removals


_WRITTEN_FILES: Final = pa.schema(
    [("relative", pa.string()), ("size", pa.int64()), ("partition", pa.string()), ("stats", pa.string())]
)


def _configure(table: DeltaTable, uri: str) -> None:
    """Set the keys of ``TABLE_CONFIGURATION`` that ``table`` lacks (one metadata commit, once a
    table); a failure (a commit conflict, say) is logged, and tried again at the next write."""
    have = table.metadata().configuration
    missing = {key: value for key, value in TABLE_CONFIGURATION.items() if key not in have}
    if not missing:
        return
    try:
        table.alter.set_table_properties(missing)
        log.info("%s: table properties set: %s", uri, missing)
    except Exception as exc:  # storage faults and commit conflicts surface as many types
        log.warning("%s: table properties %s not set: %s", uri, missing, exc)


def _add_actions(
    table: DeltaTable,
    *,
    within: TimeRange | None = None,
    covering: tuple[str, Sequence[datetime]] | None = None,
) -> pa.Table:
    """The table's add actions, flattened (``path``, ``size_bytes``, ``num_records``,
    ``partition.<column>``, ``min.<column>``, ``max.<column>``, ``null_count.<column>``), kept in
    Arrow: only those whose statistics may hold a row ``within`` a time range, or whose range of
    ``covering``'s column covers one of its times (a file without statistics for the column is
    always kept). The filter is vectorised, so that the callers turn into Python only the actions
    they keep: a question about a few files of a table of many costs milliseconds, not a dict per
    file."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if within is not None:
        column, low, high = within
        bounds = _bounds(actions, column)
        if bounds is None:
            return actions
        smallest, largest = bounds
        may = (smallest < _micro(high)) & (largest + _STATS_PRECISION_US >= _micro(low))
    elif covering is not None:
        column, wanted = covering
        bounds = _bounds(actions, column)
        if bounds is None:
            return actions
        smallest, largest = bounds
        times = np.array(sorted(_micro(t) for t in wanted), dtype=np.float64)
        if not len(times):
            return actions.slice(0, 0)
        first = np.minimum(np.searchsorted(times, smallest, side="left"), len(times) - 1)
        may = times[first] >= smallest
        may &= times[first] <= largest  # the first time at or after the smallest is within the range
    else:
        return actions
    unknown = np.isnan(smallest) | np.isnan(largest)
    return actions.filter(pa.array(unknown | may))


def _bounds(actions: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The smallest and largest ``column`` value of each action's file, in microseconds (NaN where a
    file has none); None when the log keeps no statistics for the column."""
    names = (f"min.{column}", f"max.{column}")
    if any(name not in actions.column_names for name in names):
        return None
    smallest, largest = (_micros(actions.column(name)) for name in names)
    return smallest, largest


def _micros(column: pa.ChunkedArray) -> np.ndarray:
    """A timestamp column of statistics as microseconds since the epoch (NaN where null: exact, as
    every microsecond timestamp before the year 2255 is below 2^53)."""
    as_us = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())
    return np.asarray(as_us.to_numpy(zero_copy_only=False), dtype=np.float64)


def _micro(when: datetime) -> float:
    """``when`` as microseconds since the epoch (UTC unless it says otherwise)."""
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    delta = when - _EPOCH
    return float((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)


def _actions_within(table: DeltaTable, within: TimeRange) -> list[dict[str, Any]]:
    """The add actions (flattened, with their statistics) of the table's files whose statistics may
    hold a row ``within`` the range (or that have no statistics)."""
    actions: list[dict[str, Any]] = _add_actions(table, within=within).to_pylist()
    return actions


def _files_within(table: DeltaTable, within: TimeRange) -> set[str]:
    """The names of the table's files whose statistics may hold a row ``within`` the range (or that
    have no statistics)."""
    paths = _add_actions(table, within=within).column("path").to_pylist()
    return {unquote(path).rsplit("/", 1)[-1] for path in paths}


def _partition_folder(column: str, value: str | None) -> str:
    """``column=value`` as Spark names a partition folder (``_partition_values`` reads it back)."""
    return f"{quote(column, safe='')}={_HIVE_NULL if value is None else quote(value, safe='')}"


def _write_partitions(
    fs: pafs.FileSystem, root: str, rows: pa.Table, partition_by: Sequence[str], max_rows: int | None = None
) -> list[_WrittenFile]:
    """``rows`` as parquet files under ``root``, one per partition (or per ``max_rows`` of it, in
    order), the partition columns in the folder names only, as Delta keeps them."""
    data = rows.drop_columns(list(partition_by))
    values = [rows.column(c).to_pylist() for c in partition_by]
    groups: dict[tuple[str | None, ...], list[int]] = {}
    for index in range(rows.num_rows):
        key = tuple(None if column[index] is None else str(column[index]) for column in values)
        groups.setdefault(key, []).append(index)
    written = []
    step = max_rows or max(rows.num_rows, 1)
    chunks = [
        (key, indexes[i : i + step]) for key, indexes in groups.items() for i in range(0, len(indexes), step)
    ]
    for key, indexes in chunks:
        partition = dict(zip(partition_by, key, strict=True))
        folders = [_partition_folder(c, v) for c, v in partition.items()]
        relative = "/".join([*folders, f"part-{uuid.uuid4().hex}.parquet"])
        fs.create_dir("/".join([root, *folders]), recursive=True)
        pq.write_table(data.take(indexes), f"{root}/{relative}", filesystem=fs)
        size = fs.get_file_info(f"{root}/{relative}").size or 0
        with fs.open_input_file(f"{root}/{relative}") as handle:
            stats = _stats(pq.read_metadata(handle))
        written.append(_WrittenFile(relative, size, partition, stats))
    return written


def _read_data_file(fs: pafs.FileSystem, root: str, path: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """One data file of the table at ``root`` in the table's ``schema``: its columns, and the
    partition columns from its folders (null for a column it lacks)."""
    folders = path[len(root) + 1 :].split("/")[:-1]
    partition = {
        unquote(column): None if value == _HIVE_NULL else unquote(value)
        for column, sep, value in (folder.partition("=") for folder in folders)
        if sep
    }
    data = pq.read_table(path, filesystem=fs)
    columns = []
    for field in schema:
        if field.name in partition:
            value = partition[field.name]
            column = pa.array([value] * data.num_rows, pa.string()).cast(field.type)
        elif field.name in data.column_names:
            column = data.column(field.name).cast(field.type)
        else:
            column = pa.nulls(data.num_rows, field.type)
        columns.append(column)
    yield from pa.Table.from_arrays(columns, schema=schema).to_batches()


def _spark_path(uri: str) -> str:
    """A path Spark's Hadoop file system reads (``s3://`` is ``s3a://`` to Hadoop)."""
    if uri.startswith("s3://"):
        return "s3a://" + uri.removeprefix("s3://")
    return uri if "://" in uri else os.path.abspath(uri)


def _partition_values(folders: Sequence[str], partition_by: Sequence[str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for folder in folders:
        column, sep, value = folder.partition("=")
        if not sep:
            raise LakeError(f"unexpected folder {folder!r} in Spark's output")
        values[unquote(column)] = None if value == _HIVE_NULL else unquote(value)
    if sorted(values) != sorted(partition_by):
        raise LakeError(f"Spark wrote partitions {sorted(values)}, expected {sorted(partition_by)}")
    return values


def _stat_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return None
    return value


def _stats(metadata: pq.FileMetaData) -> str:
    """Delta statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``) of the
    top-level primitive columns, from a parquet footer."""
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    schema = metadata.schema.to_arrow_schema()
    for index in range(metadata.num_columns):
        path = metadata.schema.column(index).path
        if "." in path or pa.types.is_boolean(schema.field(path).type):
            continue
        groups = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)]
        if not groups or any(s is None for s in groups):
            continue
        if all(s.has_null_count for s in groups):  # parquet-mr leaves it out beside long values
            nulls[path] = sum(s.null_count for s in groups)
        if any(s.num_values and not s.has_min_max for s in groups):
            continue  # some values without bounds: no bounds at all
        lows = [v for s in groups if s.has_min_max and (v := _stat_value(s.min)) is not None]
        highs = [v for s in groups if s.has_min_max and (v := _stat_value(s.max)) is not None]
        if not lows or not highs or len(lows) != len(highs):
            continue
        low, high = min(lows), max(highs)
        if isinstance(low, str) and max(len(low), len(str(high))) > _STATS_STRING_MAX:
            continue  # Delta truncates long strings; leaving them out is always correct
        minimum[path], maximum[path] = low, high
    return json.dumps(
        {"numRecords": metadata.num_rows, "minValues": minimum, "maxValues": maximum, "nullCount": nulls}
    )


def _delete_quietly(fs: pafs.FileSystem, path: str, *, directory: bool = False) -> None:
    try:
        if directory:
            fs.delete_dir(path)
        else:
            fs.delete_file(path)
    except (OSError, FileNotFoundError):
        pass
