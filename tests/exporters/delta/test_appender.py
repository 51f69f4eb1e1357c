"""The appender's table handle: reopened after a bounded number of commits (delta-rs grows a handle
that is updated in place without bound), with nothing lost or written twice across reopenings; the
bronze tables' log settings, on new tables and on those an earlier version created."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from exporters.delta.appender import TABLE_CONFIGURATION, DeltaAppender

SCHEMA = pa.schema([pa.field("n", pa.int64(), nullable=False)])


def test_the_table_is_reopened_every_n_commits_and_keeps_every_batch(tmp_path: Path) -> None:
    appender = DeltaAppender(str(tmp_path / "t"), SCHEMA, "test-app", reopen_every=3)
    handles = []
    for version in range(7):
        appender.append(pa.table({"n": [version]}, schema=SCHEMA), version)
        handles.append(appender.load())
    assert handles[0] is handles[1]  # the first handle serves 3 commits, then a fresh one
    assert handles[2] is not handles[1]
    assert handles[2] is handles[3] is handles[4]
    assert handles[5] is not handles[4]
    assert appender.committed_version() == 6
    rows = sorted(r["n"] for r in DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist())
    assert rows == list(range(7))


def _age_log(table: Path, hours: float) -> None:
    """Make every log entry ``hours`` old (the fake clock: log expiry reads the store's modification
    times)."""
    then = time.time() - hours * 3600
    for entry in (table / "_delta_log").iterdir():
        os.utime(entry, (then, then))


def test_a_table_the_appender_creates_has_the_bronze_log_settings(tmp_path: Path) -> None:
    appender = DeltaAppender(str(tmp_path / "t"), SCHEMA, "test-app")
    appender.append(pa.table({"n": [1]}, schema=SCHEMA), 0)
    configuration = DeltaTable(str(tmp_path / "t")).metadata().configuration
    assert {key: configuration.get(key) for key in TABLE_CONFIGURATION} == TABLE_CONFIGURATION


def test_a_table_created_without_them_gets_them_when_the_appender_first_opens_it(tmp_path: Path) -> None:
    """A shard an earlier version of the sink created: one metadata commit, then the appends."""
    DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    appender = DeltaAppender(str(tmp_path / "t"), SCHEMA, "test-app", reopen_every=2)
    for version in range(4):
        appender.append(pa.table({"n": [version]}, schema=SCHEMA), version)
    table = DeltaTable(str(tmp_path / "t"))
    configuration = table.metadata().configuration
    assert {key: configuration.get(key) for key in TABLE_CONFIGURATION} == TABLE_CONFIGURATION
    operations = [entry["operation"] for entry in reversed(table.history())]
    assert operations.count("SET TBLPROPERTIES") == 1  # not again at the reopening
    assert sorted(r["n"] for r in table.to_pyarrow_table().to_pylist()) == [0, 1, 2, 3]


@pytest.mark.parametrize(("cleanup", "kept"), [("false", True), ("true", False)])
def test_the_sinks_commits_never_expire_the_log_its_reader_may_not_have_read(
    tmp_path: Path, cleanup: str, kept: bool
) -> None:
    """Checkpoints every 3 commits, the log a day old: the sink's own commits delete no entry (with
    Delta's default, ``true``, the same commits delete the old entries)."""
    table = tmp_path / "t"
    appender = DeltaAppender(
        str(table),
        SCHEMA,
        "test-app",
        table_configuration={"delta.checkpointInterval": "3", "delta.enableExpiredLogCleanup": cleanup},
    )
    for version in range(4):
        appender.append(pa.table({"n": [version]}, schema=SCHEMA), version)
    _age_log(table, 24)
    for version in range(4, 10):
        appender.append(pa.table({"n": [version]}, schema=SCHEMA), version)
    assert (table / "_delta_log" / f"{0:020d}.json").exists() is kept
