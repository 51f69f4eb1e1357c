"""The Spark jobs on S3 through the repo's Delta access layer (``DeltaLake``'s delta-rs bridge, whose
executors read and write the parquet files with pyarrow): bronze landed by the real exporter, decoded
and rolled up, checked against the pure-Python reference, and exactly once on a re-run."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.tables import ROLLUP_TABLES
from spark_jobs.transforms.rollup import CLIENT_KEYS, ENTITY_KEYS
from tests.support import rollup_reference
from tests.support.fleet import kafka_pushes, land, sdk_pushes
from tests.support.s3 import S3

pytestmark = [pytest.mark.spark, pytest.mark.integration]

KEYS = {"client": ("bucket_start", *CLIENT_KEYS), "entity": ("bucket_start", *ENTITY_KEYS)}


def _rows(uri: str, s3: S3) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (
        DeltaTable(uri, storage_options=s3.storage_options).to_pyarrow_table().to_pylist()
    )
    return rows


def _comparable(value: Any) -> Any:
    """A value with its floats to 12 significant digits (Spark and the reference add in other orders)."""
    if isinstance(value, float):
        return value if not math.isfinite(value) else float(f"{value:.12g}")
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def _with_maps(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with its map column as a dict (delta-rs returns a map as a list of pairs)."""
    if row.get("attributes") is None:
        return dict(row)
    return {**row, "attributes": dict(row["attributes"])}


def _key(row: Mapping[str, Any], keys: Iterable[str]) -> tuple[Any, ...]:
    return tuple(tuple(row[k]) if isinstance(row[k], list) else row[k] for k in keys)


def _versions(s3_root: str, s3: S3) -> dict[str, int]:
    return {
        t: DeltaTable(f"{s3_root}/{t}", storage_options=s3.storage_options).version()
        for t in ("metric_points", *ROLLUP_TABLES)
    }


def test_decode_and_rollup_on_s3_match_the_reference_and_a_rerun_commits_nothing(
    spark: SparkSession, s3: S3, s3_root: str
) -> None:
    land(kafka_pushes() + sdk_pushes(), s3_root, storage_options=s3.storage_options)
    lake = DeltaLake(spark, storage_options=s3.storage_options)
    closed = datetime.now(UTC) + timedelta(hours=2)  # the SDK's pushes are of this hour: close it too
    report = run_rollup(lake, s3_root, now=closed)
    points = _rows(f"{s3_root}/metric_points", s3)
    assert report.decode.points == len(points) > 100
    assert {r["metric_kind"] for r in points} == {
        "sum",
        "gauge",
        "histogram",
        "exponential_histogram",
        "summary",
    }
    for table in ROLLUP_TABLES:
        by, width = table.split("_")[1], table.split("_")[2]
        compute = rollup_reference.client_rows if by == "client" else rollup_reference.entity_rows
        expected = {_key(r, KEYS[by]): _comparable(r) for r in compute(points, width)}  # type: ignore[arg-type]
        actual = {_key(r, KEYS[by]): _comparable(_with_maps(r)) for r in _rows(f"{s3_root}/{table}", s3)}
        assert actual.keys() == expected.keys(), table
        for key, row in expected.items():
            assert {c: actual[key][c] for c in row} == row, f"{table} {key}"
    versions = _versions(s3_root, s3)
    again = run_rollup(lake, s3_root, now=closed)
    assert again.decode.points == 0
    assert _versions(s3_root, s3) == versions
