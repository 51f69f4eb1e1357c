"""The gold rollup tables a real Spark job wrote, held to the tests' independent reference
(``rollup_reference``) computed from the same silver points: same keys, same values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from spark_jobs.jobs.rollup import CLOSE_AFTER
from spark_jobs.tables import ROLLUP_TABLES
from spark_jobs.transforms.rollup import CLIENT_KEYS, ENTITY_KEYS
from tests.support import rollup_reference

__all__ = ["assert_gold_matches_reference", "assert_same_rows"]

KEYS = {
    "client": ("bucket_start", *CLIENT_KEYS),
    "entity": ("bucket_start", *ENTITY_KEYS),
    "activity": ("bucket_start", "quota_entity", "group", "metric"),
}


def _rows(uri: str) -> list[dict[str, Any]]:
    """The table's rows; none when it does not exist (a 1-hour table before its first closed hour)."""
    try:
        rows: list[dict[str, Any]] = DeltaTable(uri).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return []
    return rows


def _plain(column: str, value: Any) -> Any:
    if column == "attributes" and value is not None:
        return dict(value)  # a map, as delta-rs returns it: a list of pairs
    return value


def _key(row: Mapping[str, Any], keys: Iterable[str]) -> tuple[Any, ...]:
    return tuple(tuple(row[k]) if isinstance(row[k], list) else row[k] for k in keys)


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isnan(expected):  # a Java client's average of no samples is NaN, and stays NaN
            return math.isnan(actual)
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(
            _same(a, e) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(_same(actual[k], expected[k]) for k in expected)
    return bool(actual == expected)


def assert_gold_matches_reference(
    root: Path, lookback_s: int = 3600, *, closed_by: datetime | None = None
) -> int:
    """Every gold table equals the reference computed from the silver points; the rows compared. The
    1-hour tables hold closed hours only (``CLOSE_AFTER`` past their end): each hour closed by
    ``closed_by`` (a time before the rollup ran; default five minutes ago) is there, an hour closed
    since may be, an hour still open is not."""
    points = _rows(str(root / "metric_points"))
    must_by = closed_by or datetime.now(UTC) - timedelta(minutes=5)
    may_by = datetime.now(UTC)
    compared = 0
    for table in ROLLUP_TABLES:
        by, width = table.split("_")[1], table.split("_")[2]
        compute = rollup_reference.client_rows if by == "client" else rollup_reference.entity_rows
        expected = {_key(r, KEYS[by]): r for r in compute(points, width, lookback_s)}  # type: ignore[arg-type]
        actual = {
            _key(r, KEYS[by]): {k: _plain(k, v) for k, v in r.items()} for r in _rows(str(root / table))
        }
        if width == "1h":
            must = {k for k in expected if k[0] + timedelta(hours=1) + CLOSE_AFTER <= must_by}
            may = {k for k in expected if k[0] + timedelta(hours=1) + CLOSE_AFTER <= may_by}
            assert must <= actual.keys() <= may, table
        else:
            assert actual.keys() == expected.keys(), table
        for key, row in actual.items():
            wanted = expected[key]
            wrong = {c: (row[c], v) for c, v in wanted.items() if not _same(row[c], v)}
            assert not wrong, f"{table} {key}: {wrong}"
        compared += len(actual)
    return compared


def assert_same_rows(actual: list[dict[str, Any]], expected: list[dict[str, Any]], table: str) -> None:
    """Two sets of a gold table's rows (as delta-rs or Arrow give them) hold the same keys and, key by
    key, the same values (floats to 1e-9, NaN equal to NaN)."""
    keys = KEYS["activity" if "activity" in table else table.split("_")[1]]
    mine = {_key(r, keys): {k: _plain(k, v) for k, v in r.items()} for r in actual}
    theirs = {_key(r, keys): {k: _plain(k, v) for k, v in r.items()} for r in expected}
    assert mine.keys() == theirs.keys(), table
    for key, row in theirs.items():
        wrong = {c: (mine[key][c], v) for c, v in row.items() if not _same(mine[key][c], v)}
        assert not wrong, f"{table} {key}: {wrong}"
