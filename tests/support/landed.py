"""What a running sink has landed, as the end-to-end tests read it: the rows of its Delta table that
name one client, and a poll for them with a deadline (real servers run on wall time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

__all__ = ["landed_rows", "until", "until_landed"]

T = TypeVar("T")


def landed_rows(table_uri: str, column: str, value: object) -> list[dict[str, Any]]:
    """The table's rows whose ``column`` is ``value``, in landing order; none before its first commit."""
    try:
        rows = DeltaTable(table_uri).to_pyarrow_table().to_pylist()
    except TableNotFoundError:  # nothing committed yet
        return []
    return sorted(
        (row for row in rows if row[column] == value), key=lambda row: (row["received_at"], row["batch_seq"])
    )


def until(what: str, predicate: Callable[[], T], deadline_s: float) -> T:
    """Poll ``predicate`` until it answers something true, failing the test after ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while not (answer := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s} s"
        time.sleep(0.2)
    return answer


def until_landed(
    table_uri: str, column: str, value: object, count: int, deadline_s: float
) -> list[dict[str, Any]]:
    """``landed_rows`` once there are at least ``count`` of them, failing the test after ``deadline_s``."""
    rows: list[dict[str, Any]] = []

    def enough() -> bool:
        rows[:] = landed_rows(table_uri, column, value)
        return len(rows) >= count

    until(f"{count} rows with {column} {value!r}", enough, deadline_s)
    return rows
