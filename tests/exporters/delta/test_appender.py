"""The appender's table handle: reopened after a bounded number of commits (delta-rs grows a handle
that is updated in place without bound), with nothing lost or written twice across reopenings."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from exporters.delta.appender import DeltaAppender

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
