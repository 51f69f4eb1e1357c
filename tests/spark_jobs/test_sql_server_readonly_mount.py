"""``telemetry-sink sql-server`` over a read-only view of the lake, as the Helm chart runs it (T3-3's
defence in depth: the chart mounts the data volume read-only into the SQL server's pod).

The tests run as root, whom file modes do not stop, so the data root is made read-only by the mount:
the server runs in a mount namespace of its own (``unshare --mount``) where a read-only bind mount
(``mount --bind -o ro``) shows it the lake. There it must serve every view and keep refreshing, which
shows it needs nothing writable under the data root; and a write that gets past its SQL guard must not
reach the lake. The write tried is T3-3's: a Derby database (a folder) made through a catalog set in the
JDBC session's settings. While the guard let that through, it made its folder in a writable scratch
folder and failed over the lake ("not found": Derby could not create it); once the guard refuses such
sessions, the test still checks that the lake is left as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from pyhive import hive
from pyspark.sql import SparkSession

from exporters import QuotaSample
from ingest.admin.config_log import ConfigLog, QuotaChange
from quotas import ClientQuotaEntity
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from tests.spark_jobs.test_sql_server import BOB, Server, _fetch, _stop, server_command
from tests.support.fleet import kafka_pushes, land, land_quota_samples
from tests.support.process import free_port, line_matching

MOUNT = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
"""Run as ``sh -c MOUNT sh SOURCE VIEW COMMAND...`` inside the new mount namespace."""
DERBY_CATALOG = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _can_unshare(), reason="needs root and unshare --mount (a mount namespace of its own)"
)


@pytest.fixture(scope="module")
def landed(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root with every kind of table: 48 pushes of six clients, quota samples, one config
    change, rolled up."""
    root = tmp_path_factory.mktemp("read-only-lake")
    start_ms = int(time.time() // 60 * 60_000) - 15 * 60_000
    land(kafka_pushes(clients=6, pushes=8, start_ms=start_ms), str(root))
    land_quota_samples(
        [(start_ms + i * 30_000, [QuotaSample("Produce", "throttle-time", BOB, 50.0 * i)]) for i in range(8)],
        str(root),
    )
    ConfigLog(f"{root}/config_log", replica_id="r1").append(
        [QuotaChange(ClientQuotaEntity(user="bob"), "producer_byte_rate", 1024.0)], "User:ops", start_ms
    )
    run_rollup(DeltaLake(spark), str(root))
    return root


@contextmanager
def read_only_sql_server(source: str, view: Path, cwd: Path, *options: str) -> Iterator[Server]:
    """The real command, started in a mount namespace where ``view`` is ``source`` mounted read-only,
    with ``--data-root view``."""
    port, health_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            *("unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT, "sh", source, str(view)),
            *server_command(str(view), port, health_port, *options),
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,  # Spark's own files (a warehouse folder) go here, not into the repository
    )
    said: list[str] = []
    try:
        assert process.stderr is not None
        line_matching(process.stderr, r"telemetry-sink sql-server: serving \d+ views", said)
        drain = threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True)
        drain.start()
        yield Server(process, port, health_port, None, said, drain)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root``: (size, modification time in ns)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder, name)
            stat = path.lstat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def _derby_session(server: Server, database: Path) -> hive.Connection:
    """A JDBC session whose settings (JDBC's ``;?key=value``) name a catalog that makes an embedded
    Derby database, a folder, at ``database`` (T3-3)."""
    return hive.connect(
        host="127.0.0.1",
        port=server.port,
        username="analyst",
        database="default",
        configuration={
            "set:hiveconf:spark.sql.catalog.c": DERBY_CATALOG,
            "set:hiveconf:spark.sql.catalog.c.url": f"jdbc:derby:{database}",
            "set:hiveconf:spark.sql.catalog.c.create": "true",
        },
    )


def _try(server: Server, database: Path) -> str | None:
    """T3-3's statement through a session aimed at ``database``: the error it got, or None."""
    try:
        with _derby_session(server, database) as connection:
            _fetch(connection, "SHOW NAMESPACES IN c")
    except Exception as exc:  # refused by the guard, or failed below it: either is the point
        return str(exc)
    return None


@pytest.mark.spark
def test_T3_3_over_a_read_only_mount_the_server_serves_every_view_and_nothing_it_runs_writes_to_the_lake(
    landed: Path, tmp_path: Path
) -> None:
    lake = landed
    view, scratch, cwd = tmp_path / "lake", tmp_path / "scratch", tmp_path / "cwd"
    for folder in (view, scratch, cwd):
        folder.mkdir()
    before = _tree(lake)
    with read_only_sql_server(str(lake), view, cwd, "--refresh", "1") as server:
        # the server's data root is the read-only mount (its namespace's view, from /proc)
        mounts = Path(f"/proc/{server.process.pid}/mountinfo").read_text().splitlines()
        [mount] = [line.split() for line in mounts if line.split()[4] == str(view)]
        assert "ro" in mount[5].split(","), mount
        # root in that namespace cannot write there: the mount stops it, not file modes
        touched = subprocess.run(
            ["nsenter", "--target", str(server.process.pid), "--mount", "touch", f"{view}/config_log/x"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert touched.returncode != 0
        assert "Read-only file system" in touched.stderr

        # it serves: every table is a view, and the views read
        health = server.health()
        assert health["status"] == "ok"
        with hive.connect(host="127.0.0.1", port=server.port, username="analyst") as connection:
            listed = {row[1] for row in _fetch(connection, "SHOW TABLES IN telemetry")}
            assert {"telemetry_pushes", "quota_samples", "config_log", "metric_points"} <= listed, listed
            assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.telemetry_pushes") == [[48]]
            assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.config_log") == [[1]]
        # and keeps refreshing: nothing under the data root needs to be writable
        refreshes = health["refreshes"]
        deadline = time.monotonic() + 60
        while (health := server.health())["refreshes"] < refreshes + 2:
            assert time.monotonic() < deadline, "the server stopped refreshing"
            time.sleep(0.2)
        assert health["last_error"] is None

        # a write that gets past the guard: the same statement writes where the file system lets it
        # (while T3-3 is open), and cannot write to the lake
        control = _try(server, scratch / "derby")
        into_lake = _try(server, view / "telemetry_pushes" / "derby")
        if control is None and (scratch / "derby").is_dir():  # the guard missed it: Derby made a folder
            # and over the lake Derby, below the guard, could not make one (it says "not found")
            assert into_lake is not None
            assert f"Database '{view}/telemetry_pushes/derby' not found" in into_lake, into_lake[-2000:]
        _stop(server)
    assert _tree(lake) == before  # not a file or folder made, changed or removed
    assert not (lake / "telemetry_pushes" / "derby").exists()
    with pytest.raises(httpx.TransportError):  # stopped, and the mount namespace with it
        httpx.get(f"http://127.0.0.1:{server.health_port}/healthz", timeout=2)
