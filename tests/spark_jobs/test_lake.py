"""The Delta access layer on its delta-rs bridge, with a real local Spark session and real tables."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.lake import (
    TABLE_CONFIGURATION,
    DeltaLake,
    LakeError,
    _write_partitions,
    partition_predicate,
    row_predicate,
)

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("tags", pa.map_(pa.string(), pa.string())),
        pa.field("day", pa.string(), nullable=False),
    ]
)
T = datetime(2026, 11, 22, 3, 4, 5, 123456, tzinfo=UTC)


def _frame(spark: SparkSession, rows: list[tuple[int, str]]) -> DataFrame:
    """Rows ``(id, day)``."""
    data = pa.table(
        {
            "id": [i for i, _ in rows],
            "name": [f"n{i}" for i, _ in rows],
            "at": [T] * len(rows),
            "tags": [[("k", str(i))] for i, _ in rows],
            "day": [d for _, d in rows],
        },
        schema=SCHEMA,
    )
    return spark.createDataFrame(data)


def _ids(uri: str) -> dict[str, list[int]]:
    table = DeltaTable(uri).to_pyarrow_table()
    out: dict[str, list[int]] = {}
    for row in table.to_pylist():
        out.setdefault(row["day"], []).append(row["id"])
    return {day: sorted(ids) for day, ids in out.items()}


def _write(lake: DeltaLake, frame: DataFrame | None, uri: str, version: int, **kwargs: object) -> bool:
    return lake.write(
        frame,
        uri,
        schema=SCHEMA,
        partition_by=["day"],
        txns={"test-job": version},
        **kwargs,  # type: ignore[arg-type]
    )


def test_bridge_write_creates_a_delta_table_that_delta_rs_and_spark_read_back(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    assert _write(lake, _frame(spark, [(1, "2026-11-21"), (2, "2026-11-22"), (3, "2026-11-22")]), uri, 0)
    table = DeltaTable(uri)
    assert table.metadata().partition_columns == ["day"]
    assert table.transaction_version("test-job") == 0
    assert _ids(uri) == {"2026-11-21": [1], "2026-11-22": [2, 3]}
    rows = {r["id"]: r for r in DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert rows[2]["at"] == T  # microseconds kept: TIMESTAMP_MICROS, not INT96
    assert rows[2]["tags"] == [("k", "2")]
    back = lake.read(uri)
    assert back is not None
    assert back.columns == SCHEMA.names
    assert sorted((r["id"], r["day"]) for r in back.collect()) == [
        (1, "2026-11-21"),
        (2, "2026-11-22"),
        (3, "2026-11-22"),
    ]
    assert dict(back.dtypes)["day"] == "string"  # partition values are never inferred as dates
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()  # statistics, as delta-rs parsed them
    assert sum(a["num_records"] for a in actions) == 3
    assert sorted((a["min.id"], a["max.id"]) for a in actions) == [(1, 1), (2, 3)]
    assert {(a["min.at"], a["max.at"]) for a in actions} == {(T, T)}
    leftovers = [name for name in os.listdir(uri) if name.startswith("_staging")]
    assert leftovers == []


def test_a_batch_already_committed_is_not_written_twice(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    frame = _frame(spark, [(1, "2026-11-22")])
    assert _write(lake, frame, uri, 7)
    version = DeltaTable(uri).version()
    assert not _write(lake, frame, uri, 7)  # a re-run
    assert not _write(lake, frame, uri, 6)  # an older batch
    assert DeltaTable(uri).version() == version
    assert _ids(uri) == {"2026-11-22": [1]}


def test_a_batch_of_no_rows_commits_its_txn_alone_and_creates_the_table(
    lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    assert _write(lake, None, uri, 3)
    table = DeltaTable(uri)
    assert (table.file_uris(), table.transaction_version("test-job")) == ([], 3)
    assert table.metadata().partition_columns == ["day"]
    assert not _write(lake, None, uri, 3)
    assert DeltaTable(uri).version() == table.version()


@pytest.mark.parametrize("path", ["bridge", "connector"])
def test_a_table_the_lake_writes_keeps_a_day_of_log_and_an_older_one_gets_it_at_its_next_write(
    spark: SparkSession, lake: DeltaLake, connector_lake: DeltaLake, tmp_path: Path, path: str
) -> None:
    """Each path creates its tables with ``TABLE_CONFIGURATION`` (a day of log, expired by the rollup
    only); a table created without it (by an earlier version) gets the keys it lacks at its next
    write, and keeps a value an operator set."""
    writer = lake if path == "bridge" else connector_lake
    created = str(tmp_path / "created")
    assert _write(writer, _frame(spark, [(1, "d1")]), created, 1)
    assert TABLE_CONFIGURATION.items() <= DeltaTable(created).metadata().configuration.items()

    older = str(tmp_path / "older")
    write_deltalake(older, _frame(spark, [(1, "d1")]).toArrow(), partition_by=["day"])
    DeltaTable(older).alter.set_table_properties({"delta.logRetentionDuration": "interval 7 days"})
    assert _write(writer, _frame(spark, [(2, "d1")]), older, 1)
    configuration = DeltaTable(older).metadata().configuration
    assert configuration["delta.logRetentionDuration"] == "interval 7 days"  # the operator's
    assert configuration["delta.enableExpiredLogCleanup"] == "false"
    assert _ids(older) == {"d1": [1, 2]}


def test_one_bridge_commit_carries_the_batches_of_several_app_ids_and_never_half_of_them_twice(
    spark: SparkSession, lake: DeltaLake, connector_lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    frame = _frame(spark, [(1, "2026-11-22")])
    assert lake.write(frame, uri, txns={"a": 3, "b": 5}, schema=SCHEMA, partition_by=["day"])
    table = DeltaTable(uri)
    assert (table.transaction_version("a"), table.transaction_version("b")) == (3, 5)
    assert not lake.write(frame, uri, txns={"a": 3, "b": 5}, schema=SCHEMA, partition_by=["day"])
    with pytest.raises(LakeError, match="already has the batches of \\['a'\\]"):
        lake.write(frame, uri, txns={"a": 3, "b": 6}, schema=SCHEMA, partition_by=["day"])
    with pytest.raises(LakeError, match="carries one txn, not 2"):
        connector_lake.write(frame, uri, txns={"a": 4, "b": 6}, schema=SCHEMA, partition_by=["day"])
    assert DeltaTable(uri).version() == table.version()
    assert _ids(uri) == {"2026-11-22": [1]}
    assert lake.per_commit(["x", "y"]) == [["x", "y"]]
    assert connector_lake.per_commit(["x", "y"]) == [["x"], ["y"]]


def test_replacing_partitions_swaps_exactly_their_rows_in_one_commit(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    _write(lake, _frame(spark, [(1, "2026-11-20"), (2, "2026-11-21"), (3, "2026-11-22")]), uri, 0)
    before = DeltaTable(uri).version()
    replace = [{"day": "2026-11-21"}, {"day": "2026-11-22"}]
    assert _write(lake, _frame(spark, [(20, "2026-11-21"), (21, "2026-11-21")]), uri, 1, replace=replace)
    assert DeltaTable(uri).version() == before + 1
    # 11-20 untouched, 11-21 replaced, 11-22 replaced by nothing
    assert _ids(uri) == {"2026-11-20": [1], "2026-11-21": [20, 21]}


def _timed_frame(spark: SparkSession, rows: list[tuple[int, str, datetime]]) -> DataFrame:
    """Rows ``(id, day, at)``."""
    data = pa.table(
        {
            "id": [i for i, _, _ in rows],
            "name": [f"n{i}" for i, _, _ in rows],
            "at": [at for _, _, at in rows],
            "tags": [[("k", str(i))] for i, _, _ in rows],
            "day": [d for _, d, _ in rows],
        },
        schema=SCHEMA,
    )
    return spark.createDataFrame(data)


def test_replacing_the_rows_of_some_timestamps_keeps_every_other_row_in_one_commit(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    later, next_day = T + timedelta(hours=1), T + timedelta(days=1)
    rows = [(1, "2026-11-22", T), (2, "2026-11-22", later), (3, "2026-11-23", next_day)]
    _write(lake, _timed_frame(spark, rows), uri, 0)
    before = DeltaTable(uri)
    untouched = {f for f in before.file_uris() if "2026-11-23" in f}
    assert _write(lake, _timed_frame(spark, [(10, "2026-11-22", T)]), uri, 1, replace_rows=("at", [T]))
    assert DeltaTable(uri).version() == before.version() + 1
    assert _ids(uri) == {"2026-11-22": [2, 10], "2026-11-23": [3]}  # row 2 shared a file with row 1
    assert untouched <= set(DeltaTable(uri).file_uris())  # its statistics say it holds no such row
    assert not _write(lake, _timed_frame(spark, [(11, "2026-11-22", T)]), uri, 1, replace_rows=("at", [T]))
    assert _ids(uri) == {"2026-11-22": [2, 10], "2026-11-23": [3]}


def test_row_predicate_names_the_timestamps_in_utc() -> None:
    assert row_predicate(("at", [T])) == "`at` IN (TIMESTAMP '2026-11-22 03:04:05.123456')"
    assert row_predicate(("at", [])) == "false"


def test_a_failed_job_leaves_nothing_visible_and_no_files(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    _write(lake, _frame(spark, [(1, "2026-11-22")]), uri, 0)
    files_before = sorted(str(p) for p in Path(uri).rglob("*.parquet"))
    failing = _frame(spark, [(2, "2026-11-22")]).withColumn(
        "name", F.when(F.col("id") == 2, F.raise_error(F.lit("boom"))).otherwise(F.col("name"))
    )
    with pytest.raises(Exception, match="boom"):
        _write(lake, failing, uri, 1)
    assert DeltaTable(uri).transaction_version("test-job") == 0
    assert _ids(uri) == {"2026-11-22": [1]}
    assert sorted(str(p) for p in Path(uri).rglob("*.parquet")) == files_before


def test_a_write_that_does_not_match_the_table_is_refused_before_anything_is_written(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    _write(lake, _frame(spark, [(1, "2026-11-22")]), uri, 0)
    files_before = sorted(str(p) for p in Path(uri).rglob("*.parquet"))
    with pytest.raises(LakeError, match="is partitioned by"):
        lake.write(
            _frame(spark, [(2, "2026-11-22")]),
            uri,
            schema=SCHEMA,
            partition_by=["day", "name"],  # not the table's
            txns={"test-job": 1},
        )
    assert sorted(str(p) for p in Path(uri).rglob("*.parquet")) == files_before
    assert _ids(uri) == {"2026-11-22": [1]}


def test_reading_at_a_version_and_only_what_was_added_since(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    for version, rows in enumerate([[(1, "2026-11-21")], [(2, "2026-11-22")], [(3, "2026-11-22")]]):
        _write(lake, _frame(spark, rows), uri, version)
    v = DeltaTable(uri).version()
    old = lake.read(uri, v - 1)
    assert old is not None
    assert sorted(r["id"] for r in old.collect()) == [1, 2]
    added = lake.read_added(uri, v - 2, v)
    assert added is not None
    assert sorted(r["id"] for r in added.collect()) == [2, 3]
    assert lake.added_files(uri, v, v) == []


def test_compaction_adds_no_new_rows_to_an_incremental_read(tmp_path: Path, lake: DeltaLake) -> None:
    """``OPTIMIZE`` rewrites rows already in the table: they were counted when first added."""
    uri = str(tmp_path / "bronze")
    batch = pa.table({"id": pa.array([0], pa.int64()), "day": ["2026-11-22"]})
    for i in range(3):
        write_deltalake(
            uri, batch.set_column(0, "id", pa.array([i], pa.int64())), partition_by=["day"], mode="append"
        )
    DeltaTable(uri).optimize.compact()
    write_deltalake(
        uri, batch.set_column(0, "id", pa.array([9], pa.int64())), partition_by=["day"], mode="append"
    )
    latest = DeltaTable(uri).version()  # 0..2 appends, 3 optimize, 4 append
    assert latest == 4
    added = lake.read_added(uri, 1, latest)  # version 2 (id 2) and version 4 (id 9), not the compacted file
    assert added is not None
    assert sorted(r["id"] for r in added.collect()) == [2, 9]
    everything = lake.read_added(uri, -1, latest)
    assert everything is not None
    assert sorted(r["id"] for r in everything.collect()) == [0, 1, 2, 9]


def test_a_missing_table_reads_as_none(lake: DeltaLake, tmp_path: Path) -> None:
    assert lake.read(str(tmp_path / "nothing")) is None
    assert lake.version(str(tmp_path / "nothing")) is None
    assert lake.txn_version(str(tmp_path / "nothing"), "x") == -1


def test_partition_predicate_matches_exactly_the_partitions() -> None:
    assert partition_predicate([{"day": "2026-11-22", "h": "03"}, {"day": "it's"}]) == (
        "(`day` = '2026-11-22' AND `h` = '03') OR (`day` = 'it\\'s')"
    )
    assert partition_predicate([]) == "false"


def test_a_commit_that_fails_removes_the_files_it_moved(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage fault at commit time (injected: it cannot be caused on a local disk) leaves the
    table as it was and no stray files."""
    uri = str(tmp_path / "t")
    _write(lake, _frame(spark, [(1, "2026-11-22")]), uri, 0)
    files_before = sorted(str(p) for p in Path(uri).rglob("*.parquet"))

    def broken_commit(*args: object, **kwargs: object) -> None:
        raise OSError("the object store went away")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", broken_commit)
    with pytest.raises(OSError, match="went away"):
        _write(lake, _frame(spark, [(2, "2026-11-22")]), uri, 1)
    monkeypatch.undo()
    assert sorted(str(p) for p in Path(uri).rglob("*.parquet")) == files_before
    assert _ids(uri) == {"2026-11-22": [1]}
    assert DeltaTable(uri).transaction_version("test-job") == 0


def test_a_read_within_a_time_range_skips_the_files_whose_statistics_rule_it_out(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    """Three commits, an hour apart, each a file of its own; the statistics are to the millisecond, so a
    file whose largest value is a few microseconds past its ``max`` is still read."""
    uri = str(tmp_path / "t")
    for k in range(3):
        data = pa.table(
            {
                "id": [k],
                "name": [None],
                "at": [T + timedelta(hours=k, microseconds=900)],
                "tags": [None],
                "day": ["2026-11-22"],
            },
            schema=SCHEMA,
        )
        assert _write(lake, spark.createDataFrame(data), uri, k)

    def ids(low: datetime, high: datetime) -> list[int]:
        frame = lake.read(uri, partitions=("day", ["2026-11-22"]), within=("at", low, high))
        assert frame is not None
        return sorted(r.id for r in frame.collect())

    assert ids(T, T + timedelta(minutes=1)) == [0]
    assert ids(T + timedelta(hours=1), T + timedelta(hours=2)) == [1]
    # from just past the first file's last row: the millisecond statistics cannot rule it out
    assert ids(T + timedelta(microseconds=950), T + timedelta(hours=1)) == [0]
    assert ids(T + timedelta(milliseconds=2), T + timedelta(hours=1)) == []
    assert ids(T - timedelta(days=1), T + timedelta(days=1)) == [0, 1, 2]


def test_the_statistics_tell_whether_a_column_is_null_in_every_row_within_a_time_range(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    """Two files an hour apart: names null in the first, set in the second. Asked of a range, the
    answer covers the files that may hold rows in it, without reading them."""
    uri = str(tmp_path / "t")
    assert lake.all_null(uri, "name", ("at", T, T + timedelta(hours=1)))  # no table: no rows
    for k, name in enumerate([None, "set"]):
        data = pa.table(
            {
                "id": [k],
                "name": [name],
                "at": [T + timedelta(hours=k)],
                "tags": [None],
                "day": ["2026-11-22"],
            },
            schema=SCHEMA,
        )
        assert _write(lake, spark.createDataFrame(data), uri, k)
    assert lake.all_null(uri, "name", ("at", T, T + timedelta(minutes=1)))
    assert not lake.all_null(uri, "name", ("at", T + timedelta(hours=1), T + timedelta(hours=2)))
    assert not lake.all_null(uri, "name", ("at", T, T + timedelta(hours=2)))
    assert not lake.all_null(uri, "id", ("at", T, T + timedelta(minutes=1)))


def test_a_clustered_write_sorts_each_partition_by_the_column_into_files_of_at_most_n_rows(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    ids = [7, 3, 9, 1, 5, 2, 8, 0, 6, 4]
    data = pa.table(
        {
            "id": ids,
            "name": [None] * 10,
            "at": [T + timedelta(minutes=i) for i in ids],
            "tags": [None] * 10,
            "day": ["2026-11-22"] * 10,
        },
        schema=SCHEMA,
    )
    assert _write(lake, spark.createDataFrame(data).coalesce(1), uri, 0, clustered=("at", 3))
    files = DeltaTable(uri).file_uris()
    held = sorted(pq.read_table(f).column("id").to_pylist() for f in files)
    assert held == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # sorted by time, three rows a file
    assert _ids(uri) == {"2026-11-22": list(range(10))}


def test_the_object_store_path_caps_its_files_at_the_clustered_rows_too(tmp_path: Path) -> None:
    """What each task runs on an object store (``_write_partitions``), on a local file system: a
    partition's rows, in the order given, in files of at most ``max_rows``."""
    data = pa.table(
        {
            "id": list(range(7)),
            "name": [None] * 7,
            "at": [T] * 7,
            "tags": [None] * 7,
            "day": ["2026-11-22"] * 5 + ["2026-11-23"] * 2,
        },
        schema=SCHEMA,
    )
    written = _write_partitions(pafs.LocalFileSystem(), str(tmp_path), data, ["day"], 2)
    held = sorted(
        (f.partition["day"], pq.read_table(tmp_path / f.relative).column("id").to_pylist()) for f in written
    )
    assert held == [
        ("2026-11-22", [0, 1]),
        ("2026-11-22", [2, 3]),
        ("2026-11-22", [4]),
        ("2026-11-23", [5, 6]),
    ]
