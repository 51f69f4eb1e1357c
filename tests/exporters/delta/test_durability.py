"""Crashes, several writer processes, and storage faults, with real processes and file systems."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from exporters import DeltaLandingExporter, ExportResult
from tests.support.otlp import push
from tests.support.paths import REPO

pytestmark = pytest.mark.integration


def _writer(table: Path, writer_id: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.exporters.delta.writer_process", str(table), writer_id, str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


def _push_ids(table: Path) -> list[str]:
    ids: list[str] = (
        DeltaTable(str(table)).to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
    )
    return ids


def test_sigkill_mid_load_loses_no_acknowledged_push_and_shows_no_partial_data(tmp_path: Path) -> None:
    table = tmp_path / "telemetry_pushes"
    writer = _writer(table, "w", 100_000)
    assert writer.stdout is not None
    acked = []
    for line in writer.stdout:
        acked.append(line.split()[1])
        if len(acked) >= 400:
            break
    writer.send_signal(signal.SIGKILL)
    rest, _ = writer.communicate()
    acked += [line.split()[1] for line in rest.splitlines() if line.startswith("ACK ")]
    assert writer.returncode == -signal.SIGKILL
    landed = _push_ids(table)  # the table reads cleanly: only committed files are referenced
    assert len(landed) == len(set(landed))  # exactly once
    assert set(acked) <= set(landed)  # every acknowledged push is there
    assert len(landed) < 100_000
    parquet_on_disk = {p.name for p in table.rglob("*.parquet")}
    referenced = {Path(uri).name for uri in DeltaTable(str(table)).file_uris()}
    assert referenced <= parquet_on_disk  # (unreferenced files of an interrupted commit are invisible)


def test_several_writer_processes_on_one_table_lose_nothing(tmp_path: Path) -> None:
    table = tmp_path / "telemetry_pushes"
    writers = [_writer(table, f"w{k}", 300) for k in range(3)]
    outputs = [w.communicate(timeout=300)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0]
    acked = [line.split()[1] for out in outputs for line in out.splitlines() if line.startswith("ACK ")]
    assert len(acked) == 900
    landed = _push_ids(table)
    assert sorted(landed) == sorted(acked)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real, small file system: 4 MiB of tmpfs, mounted for the test."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(path: Path) -> None:
    """Write until the file system is full (ENOSPC)."""
    with path.open("wb") as f:
        while True:
            f.write(b"\0" * 65536)


async def test_a_full_disk_gives_retriable_errors_then_recovers(tmpfs: Path) -> None:
    exporter = DeltaLandingExporter(str(tmpfs / "t"), max_batch_rows=1, commit_attempts=2, retry_backoff_ms=1)
    await exporter.start()
    assert await exporter.export(push(1)) is ExportResult.SUCCESS
    filler = tmpfs / "filler"
    with pytest.raises(OSError, match="No space left"):
        _fill(filler)
    assert await exporter.export(push(2, payload=b"y" * 200_000)) is ExportResult.RETRYABLE
    assert not exporter.health().healthy
    filler.unlink()
    assert await exporter.export(push(3)) is ExportResult.SUCCESS
    assert exporter.health().healthy
    await exporter.shutdown()
    landed = sorted(DeltaTable(exporter.table_uri).to_pyarrow_table().column("client_id").to_pylist())
    assert landed == ["producer-1", "producer-3"]


async def test_a_read_only_file_system_gives_retriable_errors_then_recovers(tmpfs: Path) -> None:
    exporter = DeltaLandingExporter(str(tmpfs / "t"), max_batch_rows=1, commit_attempts=2, retry_backoff_ms=1)
    await exporter.start()
    assert await exporter.export(push(1)) is ExportResult.SUCCESS
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        assert await exporter.export(push(2)) is ExportResult.RETRYABLE
        assert "last commit failed" in exporter.health().detail
        assert len(_push_ids(tmpfs / "t")) == 1  # still readable, unchanged
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert await exporter.export(push(3)) is ExportResult.SUCCESS
    assert exporter.health().healthy
    await exporter.shutdown()
    assert len(_push_ids(tmpfs / "t")) == 2
