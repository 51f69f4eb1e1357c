"""One bronze table per replica, found again by listing."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters import DeltaLandingExporter, ExportResult
from exporters.delta.shards import default_replica_id, list_shards, shard_uri
from tests.support.otlp import push


def test_shard_uri_joins_root_table_and_replica() -> None:
    assert (
        shard_uri("s3://bucket/lake/", "telemetry_pushes", "sink-0")
        == "s3://bucket/lake/telemetry_pushes/sink-0"
    )
    assert shard_uri("data", "quota_samples", "host.example-1") == "data/quota_samples/host.example-1"


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "sp ace"])
def test_shard_uri_refuses_ids_that_are_not_one_path_segment(bad: str) -> None:
    with pytest.raises(ValueError, match="replica id"):
        shard_uri("data", "t", bad)


def test_default_replica_id_is_a_safe_path_segment() -> None:
    replica = default_replica_id()
    assert shard_uri("data", "t", replica).endswith(replica)


@pytest.mark.integration
async def test_every_replica_shard_is_listed(tmp_path: Path) -> None:
    for replica in ("sink-1", "sink-0"):
        exporter = DeltaLandingExporter(
            shard_uri(str(tmp_path), "telemetry_pushes", replica), writer_id=replica
        )
        await exporter.start()
        assert await exporter.export(push()) is ExportResult.SUCCESS
        await exporter.shutdown()
    (tmp_path / "telemetry_pushes" / "not-a-table").mkdir()
    assert list_shards(str(tmp_path), "telemetry_pushes") == [
        str(tmp_path / "telemetry_pushes" / "sink-0"),
        str(tmp_path / "telemetry_pushes" / "sink-1"),
    ]
    assert list_shards(str(tmp_path), "quota_samples") == []
    # an object-store style URI is listed through pyarrow's file systems, and keeps its form
    assert list_shards(tmp_path.as_uri(), "telemetry_pushes") == [
        f"{tmp_path.as_uri()}/telemetry_pushes/sink-0",
        f"{tmp_path.as_uri()}/telemetry_pushes/sink-1",
    ]
