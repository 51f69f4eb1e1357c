"""The gold rollup tables a real Spark job wrote, held to the tests' independent reference
(``rollup_reference``) computed from the same silver points: same keys, same values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from spark_jobs.tables import ROLLUP_TABLES
from spark_jobs.transforms.rollup import CLIENT_KEYS, ENTITY_KEYS
from tests.support import rollup_reference

__all__ = ["assert_gold_matches_reference"]

KEYS = {"client": ("bucket_start", *CLIENT_KEYS), "entity": ("bucket_start", *ENTITY_KEYS)}


def _rows(uri: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(uri).to_pyarrow_table().to_pylist()
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


def assert_gold_matches_reference(root: Path, lookback_s: int = 3600) -> int:
    """Every gold table equals the reference computed from the silver points; the rows compared."""
    points = _rows(str(root / "metric_points"))
    compared = 0
    for table in ROLLUP_TABLES:
        by, width = table.split("_")[1], table.split("_")[2]
        compute = rollup_reference.client_rows if by == "client" else rollup_reference.entity_rows
        expected = {_key(r, KEYS[by]): r for r in compute(points, width, lookback_s)}  # type: ignore[arg-type]
        actual = {
            _key(r, KEYS[by]): {k: _plain(k, v) for k, v in r.items()} for r in _rows(str(root / table))
        }
        assert actual.keys() == expected.keys(), table
        for key, row in expected.items():
            wrong = {c: (actual[key][c], v) for c, v in row.items() if not _same(actual[key][c], v)}
            assert not wrong, f"{table} {key}: {wrong}"
        compared += len(expected)
    return compared
