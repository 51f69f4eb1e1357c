"""The rows of a Delta table as a multiset, to compare two runs' tables whatever their files: each row
a canonical JSON text (maps as sorted pairs, NaN as text, which never equals itself)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

__all__ = ["table_rows"]


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a map, as pairs
            return sorted((k, _canonical(v)) for k, v in value)
        return [_canonical(v) for v in value]
    return value


def table_rows(root: Path, table: str) -> Counter[str]:
    """``table``'s rows under ``root`` as canonical JSON texts (none when it does not exist)."""
    path = root / table
    if not (path / "_delta_log").is_dir():
        return Counter()
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter(
        json.dumps({k: _canonical(v) for k, v in row.items()}, sort_keys=True, default=str) for row in rows
    )
