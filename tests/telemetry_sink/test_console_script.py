"""The ``telemetry-sink`` console script, run as a user would run it."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from exporters import DeltaLandingExporter, shard_uri
from telemetry_sink.cli import main
from tests.support.otlp import push

pytestmark = pytest.mark.integration


def _script() -> str:
    path = shutil.which("telemetry-sink", path=str(Path(sys.executable).parent))
    assert path is not None, "the console script is not installed in this environment"
    return path


def test_version_flag_prints_the_installed_version() -> None:
    result = subprocess.run([_script(), "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"telemetry-sink {version('telemetry-sink')}"


def test_help_flag_describes_the_product() -> None:
    result = subprocess.run([_script(), "--help"], capture_output=True, text=True, check=True)
    assert "KIP-714" in result.stdout
    assert "usage: telemetry-sink" in result.stdout


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: telemetry-sink" in capsys.readouterr().err


def test_unknown_option_is_a_usage_error() -> None:
    result = subprocess.run([_script(), "--bogus"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr


def test_maintain_compacts_every_bronze_table_under_the_data_root(tmp_path: Path) -> None:
    async def land() -> None:
        exporter = DeltaLandingExporter(str(tmp_path / "telemetry_pushes"), max_batch_rows=1)
        await exporter.start()
        for n in range(4):
            await exporter.export(push(n))
        await exporter.shutdown()

    asyncio.run(land())
    result = subprocess.run(
        [_script(), "maintain", "--data-root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert reports[0]["files_removed_by_compaction"] == 4
    assert reports[0]["files_vacuumed"] == 0  # the compacted-away files are kept for 168 hours
    assert reports[1] == {"table_uri": f"{tmp_path}/quota_samples", "skipped": "no such table yet"}


def test_maintain_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["maintain", "--retention-hours", "-1"]) == 2
    assert "the minimum is 168" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["maintain", "--storage-option", "novalue"])


@pytest.mark.parametrize("as_uri", [False, True], ids=["path", "object-store style URI"])
def test_maintain_finds_every_replica_shard(tmp_path: Path, as_uri: bool) -> None:
    async def land(replica: str) -> None:
        exporter = DeltaLandingExporter(
            shard_uri(str(tmp_path), "telemetry_pushes", replica), max_batch_rows=1
        )
        await exporter.start()
        for n in range(3):
            await exporter.export(push(n))
        await exporter.shutdown()

    for replica in ("sink-0", "sink-1"):
        asyncio.run(land(replica))
    result = subprocess.run(
        [
            _script(),
            "maintain",
            "--data-root",
            tmp_path.as_uri() if as_uri else str(tmp_path),  # file://: listed like s3:// or gs://
            "--table",
            "telemetry_pushes",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["table_uri"].rsplit("/", 1)[1] for r in reports] == ["sink-0", "sink-1"]
    assert all(r["files_removed_by_compaction"] == 3 for r in reports)


@pytest.mark.parametrize("as_uri", [False, True], ids=["path", "object-store style URI"])
def test_maintain_also_compacts_the_rollups_tables(tmp_path: Path, as_uri: bool) -> None:
    """The Spark jobs replace partitions at every run: their silver and gold tables need vacuuming
    too. The config log is left alone (the replicas read its history)."""
    for name in ("metric_points", "rollup_client_1m", "config_log"):
        for n in range(2):
            write_deltalake(str(tmp_path / name), pa.table({"n": [n]}), mode="append")
    result = subprocess.run(
        [_script(), "maintain", "--data-root", tmp_path.as_uri() if as_uri else str(tmp_path), "--no-vacuum"],
        capture_output=True,
        text=True,
        check=True,
    )
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    done = {r["table_uri"].rsplit("/", 1)[1]: r.get("files_removed_by_compaction") for r in reports}
    assert done == {
        "telemetry_pushes": None,
        "quota_samples": None,
        "metric_points": 2,
        "rollup_client_1m": 2,
    }
