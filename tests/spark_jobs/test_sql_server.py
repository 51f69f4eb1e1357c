"""``telemetry-sink sql-server`` as users reach it: the real command in its own process, over data landed
by the real exporter and rolled up by the real job, queried by clients nobody here wrote: Spark's own
beeline (Hive JDBC), PyHive (the DB-API/SQLAlchemy Hive driver BI tools use) and PySpark's Spark
Connect client."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pyspark
import pytest
from pyhive import hive
from pyspark.sql import SparkSession

from exporters import QuotaSample, TelemetryPush
from ingest.admin.config_log import ConfigLog, QuotaChange
from quotas import ClientQuotaEntity
from spark_jobs.dashboards.queries import QUERY_NAMES, SHARED_PREFIX, Window, run_queries, shared_views
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.sql_server import SqlServer, SqlServerSettings, hash_password
from spark_jobs.views import register_views
from tests.support.certificates import self_signed
from tests.support.fleet import context, kafka_pushes, land, land_quota_samples
from tests.support.process import free_port, line_matching

COMMAND = (sys.executable, "-m", "telemetry_sink", "sql-server")
SPARK = ("--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=2")
BEELINE = str(Path(pyspark.__file__).parent / "bin" / "beeline")
PASSWORD = "correct-horse-battery-staple"  # beeline's script splits -p at spaces
MAX_ROWS = 2000  # fleet_per_minute has a row per minute of the 24 hours: 1,440
BOB = (("client-id", ""), ("user", "bob"))


@dataclass
class Server:
    process: subprocess.Popen[str]
    port: int
    health_port: int
    connect_port: int | None
    said: list[str]
    drain: threading.Thread

    def health(self) -> dict[str, Any]:
        answer = httpx.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=10)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


def server_command(root: str, port: int, health_port: int, *options: str) -> list[str]:
    """``telemetry-sink sql-server`` on ``root`` with the tests' Spark settings and these ports."""
    return [
        *COMMAND,
        "--data-root",
        root,
        *SPARK,
        "--port",
        str(port),
        "--health-port",
        str(health_port),
        *options,
    ]


@contextmanager
def sql_server(root: str, *options: str, connect: bool = False) -> Iterator[Server]:
    port, health_port = free_port(), free_port()
    connect_port = free_port() if connect else None
    extra = ["--connect-port", str(connect_port)] if connect_port else []
    if connect_port and "--connect-token-file" not in options:
        extra.append("--connect-insecure-loopback")  # a developer's loopback server: no token
    process = subprocess.Popen(
        server_command(root, port, health_port, *extra, *options), stderr=subprocess.PIPE, text=True
    )
    said: list[str] = []
    drain: threading.Thread | None = None
    try:
        assert process.stderr is not None
        line_matching(process.stderr, r"telemetry-sink sql-server: serving \d+ views", said)
        # read on, or the server blocks once the pipe is full (it logs each refused statement)
        drain = threading.Thread(target=lambda: said.extend(process.stderr or ()), daemon=True)
        drain.start()
        yield Server(process, port, health_port, connect_port, said, drain)
    finally:
        if process.poll() is None:  # SIGTERM: the server stops its JVMs (the executor's too)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()
        # the JVM writes to the pipe until it exits: its end, then the pipe's (a closed pipe would fail
        # the read under the drain thread)
        if drain is not None:
            drain.join(timeout=60)
        if process.stderr is not None:
            process.stderr.close()


def _stop(server: Server) -> str:
    """SIGTERM, and what the server said until it exited (exit status asserted 0)."""
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=120)
    server.drain.join(timeout=60)
    said = "".join(server.said)
    assert server.process.returncode == 0, said[-3000:]
    return said


# -- the data: landed minutes ago, rolled up --------------------------------------------------------


@dataclass(frozen=True)
class Recent:
    root: str
    start_ms: int
    window: Window


def _now_minute_ms() -> int:
    return int(time.time() // 60 * 60_000)


@pytest.fixture(scope="module")
def recent(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Recent:
    """Six clients pushing for four minutes, ending about ten minutes ago (inside the shared views'
    24 hours), with quota samples and a config change; rolled up."""
    root = str(tmp_path_factory.mktemp("sql-server"))
    start_ms = _now_minute_ms() - 15 * 60_000
    land(kafka_pushes(clients=6, pushes=8, start_ms=start_ms), root)
    land_quota_samples(
        [(start_ms + i * 30_000, [QuotaSample("Produce", "throttle-time", BOB, 50.0 * i)]) for i in range(8)],
        root,
    )
    ConfigLog(f"{root}/config_log", replica_id="r1").append(
        [QuotaChange(ClientQuotaEntity(user="bob"), "producer_byte_rate", 1024.0)], "User:ops", start_ms
    )
    run_rollup(DeltaLake(spark), root)
    start = datetime.fromtimestamp(start_ms / 1000, UTC) - timedelta(minutes=5)
    return Recent(root, start_ms, Window(start, start + timedelta(hours=1), top=3))


@pytest.fixture(scope="module")
def server(recent: Recent) -> Iterator[Server]:
    """No authentication (loopback), Spark Connect on, a refresh every second, results capped."""
    with sql_server(
        recent.root, "--refresh", "1", "--max-result-rows", str(MAX_ROWS), connect=True
    ) as running:
        yield running


def _in_process(spark: SparkSession, root: str, window: Window) -> dict[str, list[list[object]]]:
    views = register_views(DeltaLake(spark), root)
    return {name: result.rows for name, result in run_queries(spark, views, window).items()}


def _plain(value: object) -> object:
    """A value as ``run_queries`` gives it (times as ISO 8601 UTC, NaN as None)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _same(got: list[list[object]], expected: list[list[object]]) -> None:
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        assert [pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for v in want] == row


Answers = dict[str, list[list[object]]]
T = TypeVar("T")


def _last_day_while(spark: SparkSession, root: str, ask: Callable[[], T]) -> tuple[T, list[Answers]]:
    """What ``ask`` gets from the server's last-24-hours views, and the in-process answers for each
    minute it ran in: a view's window ends with the minute in which the server reads its clock, so a
    minute that turns during ``ask`` makes two answers right."""
    before = datetime.now(UTC)
    got = ask()
    after = datetime.now(UTC)
    minute = before.replace(second=0, microsecond=0)
    answers = []
    while minute <= after:
        answers.append(_in_process(spark, root, Window.last(timedelta(days=1), minute)))
        minute += timedelta(minutes=1)
    return got, answers


def _same_as_one(got: list[list[object]], answers: list[list[list[object]]]) -> None:
    for expected in answers[:-1]:
        try:
            _same(got, expected)
        except AssertionError:
            continue
        return
    _same(got, answers[-1])


def _pyhive(server: Server) -> hive.Connection:
    return hive.connect(host="127.0.0.1", port=server.port, username="analyst", database="default")


def _fetch(connection: hive.Connection, statement: str) -> list[list[object]]:
    cursor = connection.cursor()
    try:
        cursor.execute(statement)
        return [[_plain(v) for v in row] for row in cursor.fetchall()]
    finally:
        cursor.close()


def _beeline(url: str, statements: str, *credentials: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BEELINE, "-u", url, *credentials, "--silent=true", "--outputformat=csv2", "-e", statements],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _within_two_refreshes(server: Server) -> None:
    """Wait for two refreshes to be done from now (so one started after now): --refresh 1 takes
    about 2 s."""
    refreshes = server.health()["refreshes"]
    deadline = time.monotonic() + 60
    while server.health()["refreshes"] < refreshes + 2:
        assert time.monotonic() < deadline, "the server stopped refreshing"
        time.sleep(0.2)


# -- the named queries, through each client ---------------------------------------------------------


@pytest.mark.spark
def test_a_hive_dbapi_driver_gets_exactly_the_in_process_numbers_from_every_named_query_view(
    spark: SparkSession, recent: Recent, server: Server
) -> None:
    def ask() -> Answers:
        with _pyhive(server) as connection:
            return {
                name: _fetch(connection, f"SELECT * FROM telemetry.{SHARED_PREFIX}{name}")
                for name in QUERY_NAMES
            }

    got, answers = _last_day_while(spark, recent.root, ask)
    for name in QUERY_NAMES:
        _same_as_one(got[name], [expected[name] for expected in answers])
    assert got["fleet_totals"][0][:3] == [6, 2, 48]  # six clients of alice and bob, 48 pushes


@pytest.mark.spark
def test_a_session_runs_the_sql_files_with_its_own_window_and_gets_the_in_process_numbers(
    spark: SparkSession, recent: Recent, server: Server
) -> None:
    from spark_jobs.dashboards.queries import _statements, query_text  # noqa: PLC0415 - the files' own splitter

    expected = _in_process(spark, recent.root, recent.window)
    window = recent.window
    with _pyhive(server) as connection:
        for statement in [*_statements(query_text("variables")), *_statements(query_text("window"))]:
            connection.cursor().execute(statement)
        for variable, value in {
            "dashboard_from": f"TIMESTAMP '{window.start:%Y-%m-%d %H:%M:%S}'",
            "dashboard_to": f"TIMESTAMP '{window.end:%Y-%m-%d %H:%M:%S}'",
            "dashboard_top": str(window.top),
        }.items():
            connection.cursor().execute(f"SET VAR {variable} = {value}")
        for name in QUERY_NAMES:
            _same(_fetch(connection, query_text(name)), expected[name])


@pytest.mark.spark
def test_beeline_over_jdbc_gets_the_in_process_numbers_and_lists_the_views(
    spark: SparkSession, recent: Recent, server: Server
) -> None:
    statements = "".join(
        f"SELECT '{name}' AS query, COUNT(*) AS answer_rows FROM telemetry.{SHARED_PREFIX}{name};"
        for name in QUERY_NAMES
    )
    done, answers = _last_day_while(
        spark,
        recent.root,
        lambda: _beeline(
            f"jdbc:hive2://127.0.0.1:{server.port}/default",
            statements + "SELECT pushes, payload_bytes FROM telemetry.dashboard_fleet_totals;"
            "SHOW TABLES IN telemetry;",
        ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split()
    counts = dict(line.split(",") for line in lines if line.split(",")[0] in QUERY_NAMES)
    assert set(counts) == set(QUERY_NAMES)
    for name, rows in counts.items():
        assert int(rows) in {len(expected[name]) for expected in answers}, name
    pushes, payload_bytes = answers[0]["fleet_totals"][0][2:4]
    assert f"{pushes},{payload_bytes}" in lines
    listed = {line.split(",")[1] for line in lines if line.startswith("telemetry,")}
    assert {"rollup_client_1m", "metric_points", "telemetry_pushes", "config_log"} <= listed
    assert {f"{SHARED_PREFIX}{name}" for name in QUERY_NAMES} <= listed


CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
out = {
    "fleet_totals": [list(r) for r in spark.table("telemetry.dashboard_fleet_totals").collect()],
    "points": spark.table("telemetry.metric_points").count(),
    "top_clients": spark.sql("SELECT COUNT(*) FROM telemetry.dashboard_top_clients").collect()[0][0],
}
refused = {}
attempts = {
    "write": lambda: spark.range(3).write.parquet(sys.argv[2]),
    "read a file": lambda: spark.read.text("/etc/hostname").collect(),
    "drop": lambda: spark.sql("DROP VIEW telemetry.metric_points").collect(),
    "python code": lambda: spark.range(3).select(udf(lambda x: x)("id")).collect(),
    "drop a view": lambda: spark.catalog.dropGlobalTempView("config_log"),
}
for what, attempt in attempts.items():
    try:
        attempt()
        refused[what] = None
    except Exception as exc:
        refused[what] = str(exc).splitlines()[0]
out["refused"] = refused
print(json.dumps(out))
"""


@pytest.mark.spark
def test_a_spark_connect_client_reads_the_views_and_can_neither_write_nor_run_code(
    spark: SparkSession, recent: Recent, server: Server, tmp_path: Path
) -> None:
    done, answers = _last_day_while(
        spark,
        recent.root,
        lambda: subprocess.run(
            [
                sys.executable,
                "-c",
                CONNECT_CLIENT,
                f"sc://127.0.0.1:{server.connect_port}",
                str(tmp_path / "w"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    _same_as_one(out["fleet_totals"], [expected["fleet_totals"] for expected in answers])
    assert out["top_clients"] in {len(expected["top_clients"]) for expected in answers}
    assert out["points"] == spark.table("telemetry.metric_points").count()
    for what, error in out["refused"].items():
        assert "telemetry-sink sql-server is read-only" in (error or ""), what
    assert not (tmp_path / "w").exists()
    _within_two_refreshes(server)
    with _pyhive(server) as connection:
        assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.config_log") == [[1]]


# -- read-only, capped ------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize(
    ("statement", "refused"),
    [
        ("DROP VIEW telemetry.rollup_client_1m", "DROP TEMP VIEW"),
        ("CREATE TABLE stolen AS SELECT * FROM telemetry.metric_points", "CREATE"),
        ("INSERT OVERWRITE DIRECTORY '/tmp/x' USING parquet SELECT * FROM telemetry.metric_points", "INSERT"),
        ("CREATE OR REPLACE GLOBAL TEMPORARY VIEW metric_points AS SELECT 1", "TEMPORARY"),
        ("SET spark.sql.thriftServer.queryTimeout=100000", "changing a setting"),
        ("ADD JAR /tmp/evil.jar", "ADD JARS"),
        ("CACHE TABLE telemetry.metric_points", "CACHE TABLE"),
        ("SELECT * FROM parquet.`{root}/metric_points`", "reading anything but the telemetry views"),
        ("SELECT java_method('java.lang.System', 'exit', 1)", "running code on the server"),
        ("SELECT TRANSFORM(client_id) USING 'cat /etc/passwd' FROM telemetry.metric_points", "running code"),
        (
            "SELECT * FROM telemetry.metric_points WHERE client_id IN (SELECT value FROM text.`/etc/passwd`)",
            "reading",
        ),
    ],
)
def test_a_client_cannot_change_the_tables_or_reach_beyond_the_views(
    recent: Recent, server: Server, statement: str, refused: str
) -> None:
    with _pyhive(server) as connection:
        before = _fetch(connection, "SELECT COUNT(*) FROM telemetry.metric_points")
        with pytest.raises(hive.OperationalError) as error:
            _fetch(connection, statement.format(root=recent.root))
        assert "telemetry-sink sql-server is read-only" in str(error.value)
        assert refused in str(error.value)
        assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.metric_points") == before


@pytest.mark.spark
def test_beeline_drop_and_insert_are_refused(server: Server) -> None:
    done = _beeline(
        f"jdbc:hive2://127.0.0.1:{server.port}/default",
        "DROP VIEW telemetry.metric_points;",
    )
    assert done.returncode != 0
    assert "telemetry-sink sql-server is read-only: DROP TEMP VIEW" in done.stderr
    done = _beeline(
        f"jdbc:hive2://127.0.0.1:{server.port}/default",
        "INSERT INTO telemetry.metric_points SELECT * FROM telemetry.metric_points;",
    )
    assert done.returncode != 0
    assert re.search(r"Error: .*(read-only|not allowed|UNSUPPORTED_INSERT)", done.stderr)


@pytest.mark.spark
def test_a_session_may_make_its_own_temporary_views_and_variables(server: Server) -> None:
    with _pyhive(server) as connection:
        connection.cursor().execute("DECLARE VARIABLE least_points INT DEFAULT 2")
        connection.cursor().execute(
            "CREATE TEMPORARY VIEW busy AS SELECT client_instance_id, SUM(points) AS points "
            "FROM telemetry.rollup_client_1m GROUP BY client_instance_id"
        )
        [[busy]] = _fetch(connection, "SELECT COUNT(*) FROM busy WHERE points >= least_points")
    assert busy == 6
    with _pyhive(server) as other, pytest.raises(hive.OperationalError, match="TABLE_OR_VIEW_NOT_FOUND"):
        _fetch(other, "SELECT * FROM busy")  # another session's view


@pytest.mark.spark
def test_a_result_holds_at_most_max_result_rows(server: Server) -> None:
    with _pyhive(server) as connection:
        assert len(_fetch(connection, "SELECT * FROM range(5000)")) == MAX_ROWS
        assert _fetch(connection, "SELECT COUNT(*) FROM range(5000)") == [[5000]]
        assert len(_fetch(connection, "SELECT * FROM range(5000) LIMIT 10")) == 10


# -- freshness --------------------------------------------------------------------------------------


@pytest.mark.spark
def test_a_rollup_that_commits_while_the_server_runs_is_visible_within_the_refresh_interval(
    spark: SparkSession, recent: Recent, tmp_path: Path
) -> None:
    """On a copy of the module's tables, with a server of its own: the other tests count six clients."""
    root = str(tmp_path / "copy")
    shutil.copytree(recent.root, root)
    with sql_server(root, "--refresh", "1") as server, _pyhive(server) as connection:
        [[clients_before]] = _fetch(
            connection, "SELECT client_instances FROM telemetry.dashboard_fleet_totals"
        )
        [[pushes_before]] = _fetch(connection, "SELECT COUNT(*) FROM telemetry.telemetry_pushes")
        late = [
            TelemetryPush(context(40, push.context.received_ms, user="carol"), push.payload)
            for push in kafka_pushes(clients=1, pushes=4, start_ms=recent.start_ms + 60_000)
        ]
        land(late, root, replica="r3")
        run_rollup(DeltaLake(spark), root)
        _within_two_refreshes(server)
        [[clients_after]] = _fetch(
            connection, "SELECT client_instances FROM telemetry.dashboard_fleet_totals"
        )
        [[pushes_after]] = _fetch(connection, "SELECT COUNT(*) FROM telemetry.telemetry_pushes")
        health = server.health()
    assert (clients_before, clients_after) == (6, 7)
    assert isinstance(pushes_before, int)
    assert pushes_after == pushes_before + len(late)  # a new replica's shard of the bronze table
    assert health["last_error"] is None


@pytest.mark.spark
def test_a_refresh_makes_only_committed_data_visible_and_a_failed_one_keeps_the_views(
    spark: SparkSession, tmp_path: Path
) -> None:
    root = str(tmp_path)
    land(kafka_pushes(clients=2, pushes=2, start_ms=_now_minute_ms() - 5 * 60_000), root)
    run_rollup(DeltaLake(spark), root)
    server = SqlServer(spark, DeltaLake(spark), root, SqlServerSettings())
    assert "telemetry.metric_points" in server.refresh()
    points = spark.table("telemetry.metric_points").count()
    # a writer that died before its commit leaves a data file the Delta log does not name
    orphan = next(Path(root, "metric_points").rglob("*.parquet"))
    shutil.copy(orphan, orphan.with_name("part-uncommitted.parquet"))
    assert server.refresh() == []  # no table has a new version: nothing is made again
    assert spark.table("telemetry.metric_points").count() == points
    # a table whose log cannot be read: the refresh fails, says why, and the views stay
    log = Path(root, "rollup_client_1m", "_delta_log")
    next_commit = 1 + max(int(f.stem) for f in log.glob("*.json"))
    (log / f"{next_commit:020d}.json").write_text("not a Delta commit\n")
    assert server.refresh() == []
    assert server.last_error is not None
    assert spark.table("telemetry.rollup_client_1m").count() > 0
    assert server.health()[1]["last_error"] == server.last_error


# -- authentication, TLS, HTTP transport, timeout, stop -----------------------------------------------


@pytest.fixture(scope="module")
def secured(recent: Recent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """Binary transport with a password file and TLS (a self-signed certificate in a trust store)."""
    folder = tmp_path_factory.mktemp("sql-server-tls")
    cert, key = self_signed(folder)
    trust = folder / "trust.p12"
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "sink", "-file", str(cert), "-keystore",
         str(trust), "-storetype", "PKCS12", "-storepass", "changeit"],
        check=True, capture_output=True,
    )  # fmt: skip
    passwords = folder / "passwords"
    passwords.write_text(f"analyst:{hash_password(PASSWORD, iterations=1000)}\n")
    with sql_server(
        recent.root, "--password-file", str(passwords), "--tls-cert", str(cert), "--tls-key", str(key)
    ) as running:
        yield running, trust


@pytest.mark.spark
@pytest.mark.parametrize(("password", "accepted"), [(PASSWORD, True), ("wrong", False), ("", False)])
def test_over_tls_the_right_password_reads_and_a_wrong_one_is_refused(
    secured: tuple[Server, Path], password: str, accepted: bool
) -> None:
    server, trust = secured
    url = f"jdbc:hive2://127.0.0.1:{server.port}/default;ssl=true;sslTrustStore={trust};trustStorePassword=changeit"
    done = _beeline(
        url, "SELECT COUNT(*) AS n FROM telemetry.rollup_client_1m;", "-n", "analyst", "-p", password
    )
    if accepted:
        assert done.returncode == 0, done.stderr[-3000:]
        assert int(done.stdout.split()[-1]) > 0
    else:
        assert done.returncode != 0
        assert "Error validating the login" in done.stderr


@pytest.mark.spark
def test_a_client_without_tls_cannot_talk_to_a_tls_server(secured: tuple[Server, Path]) -> None:
    server, _ = secured
    done = _beeline(
        f"jdbc:hive2://127.0.0.1:{server.port}/default", "SELECT 1;", "-n", "analyst", "-p", PASSWORD
    )
    assert done.returncode != 0
    assert "Could not open client transport" in done.stderr


@pytest.fixture(scope="module")
def over_http(recent: Recent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The HTTP transport with a password file and a 20-second query timeout: a dashboard view's first
    query runs in a cold executor JVM (its code compiled there too), which took 10-21 s on a busy
    2-core machine."""
    passwords = tmp_path_factory.mktemp("sql-server-http") / "passwords"
    passwords.write_text(f"analyst:{hash_password(PASSWORD, iterations=1000)}\n")
    with sql_server(
        recent.root, "--transport", "http", "--password-file", str(passwords), "--query-timeout", "20"
    ) as running:
        yield running


def _pyhive_http(server: Server, password: str, **configuration: str) -> hive.Connection:
    return hive.connect(
        host="127.0.0.1",
        port=server.port,
        scheme="http",
        username="analyst",
        password=password,
        auth="BASIC",
        database="default",
        configuration=configuration,
    )


@pytest.mark.spark
def test_over_http_basic_authentication_reads_and_refuses_a_wrong_password(over_http: Server) -> None:
    with _pyhive_http(over_http, PASSWORD) as connection:
        [[clients]] = _fetch(connection, "SELECT client_instances FROM telemetry.dashboard_fleet_totals")
    assert clients == 6
    with pytest.raises(Exception):  # noqa: B017, PT011 - PyHive reads the 401 page as a Thrift message
        _pyhive_http(over_http, "wrong")
    done = _beeline(
        f"jdbc:hive2://127.0.0.1:{over_http.port}/default;transportMode=http;httpPath=cliservice",
        "SELECT 1;",
        "-n",
        "analyst",
        "-p",
        "wrong",
    )
    assert done.returncode != 0
    assert "HTTP Response code: 401" in done.stderr


def metrics(server: Server) -> dict[str, float]:
    """The server's ``/metrics``, by name (Prometheus' text format checked on the way)."""
    answer = httpx.get(f"http://127.0.0.1:{server.health_port}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        name: float(value)
        for name, value in re.findall(r"^(telemetry_sink_sqlserver_\w+) (\S+)$", answer.text, re.MULTILINE)
    }


@pytest.mark.spark
def test_a_statement_past_the_query_timeout_is_cancelled_even_if_the_client_raises_its_timeout(
    over_http: Server,
) -> None:
    endless = "SELECT SUM(a.id * b.id) FROM range(400000) a CROSS JOIN range(400000) b"
    with _pyhive_http(over_http, PASSWORD) as connection, pytest.raises(hive.OperationalError) as error:
        _fetch(connection, endless)
    # the Thrift server's own timeout, or the server's (both count from the statement's start)
    assert re.search(r"TIMEDOUT|the query ran past its timeout of 20\.0 s", str(error.value))
    # either way it exhausted a limit, which makes the user's next statement wait (T3-12)
    deadline = time.monotonic() + 30
    while metrics(over_http).get("telemetry_sink_sqlserver_exhausting_statements_total", 0) < 1:
        assert time.monotonic() < deadline, "the timed-out statement was not counted as exhausting"
        time.sleep(0.1)
    # a client cannot raise it: a session that sets it (JDBC's `;?key=value`) does not open (T3-3, T3-9)
    raised = {"set:hiveconf:spark.sql.thriftServer.queryTimeout": "100000"}
    with pytest.raises(Exception) as refused:  # noqa: PT011 - PyHive raises its Thrift answer as it is
        _pyhive_http(over_http, PASSWORD, **raised)
    assert "read-only: the session setting spark.sql.thriftServer.queryTimeout" in str(refused.value)
    with _pyhive_http(over_http, PASSWORD) as connection:
        assert _fetch(connection, "SELECT COUNT(*) FROM range(10)") == [[10]]  # and the server serves on


SLAPD_CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {folder}/slapd.pid
database mdb
suffix "dc=example,dc=org"
rootdn "cn=admin,dc=example,dc=org"
rootpw admin-secret
directory {folder}/db
"""
DIRECTORY = """\
dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
o: example
dc: example

dn: ou=people,dc=example,dc=org
objectClass: organizationalUnit
ou: people

dn: uid=analyst,ou=people,dc=example,dc=org
objectClass: inetOrgPerson
uid: analyst
cn: analyst
sn: analyst
userPassword: {password}
"""


@pytest.fixture(scope="module")
def ldap_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's OpenLDAP server (slapd) on loopback, holding one user, analyst, with ``PASSWORD``."""
    folder = tmp_path_factory.mktemp("ldap")
    (folder / "db").mkdir()
    (folder / "slapd.conf").write_text(SLAPD_CONF.format(folder=folder))
    (folder / "people.ldif").write_text(DIRECTORY.format(password=PASSWORD))
    url = f"ldap://127.0.0.1:{free_port()}"
    with subprocess.Popen(
        ["slapd", "-f", str(folder / "slapd.conf"), "-h", f"{url}/", "-d", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as slapd:
        try:
            admin = ["-x", "-H", url, "-D", "cn=admin,dc=example,dc=org", "-w", "admin-secret"]
            deadline = time.monotonic() + 30
            while subprocess.run(["ldapwhoami", *admin], capture_output=True, check=False).returncode:
                assert time.monotonic() < deadline, "slapd did not start"
                time.sleep(0.1)
            subprocess.run(
                ["ldapadd", *admin, "-f", str(folder / "people.ldif")], check=True, capture_output=True
            )
            yield url
        finally:
            slapd.terminate()
            slapd.wait()


@pytest.mark.spark
def test_with_ldap_a_bind_decides_who_reads_and_sigterm_then_stops_the_server_with_exit_0(
    recent: Recent, ldap_url: str
) -> None:
    """A server of its own, which the test stops: the module's servers serve the other tests, in
    whatever order they run (a server JVM costs the suite most of a minute, so one does both)."""
    with sql_server(
        recent.root, "--ldap-url", ldap_url, "--ldap-base-dn", "ou=people,dc=example,dc=org"
    ) as server:
        url = f"jdbc:hive2://127.0.0.1:{server.port}/default"
        statement = "SELECT COUNT(*) AS n FROM telemetry.rollup_client_1m;"
        accepted = _beeline(url, statement, "-n", "analyst", "-p", PASSWORD)
        assert accepted.returncode == 0, accepted.stderr[-3000:]
        assert int(accepted.stdout.split()[-1]) > 0
        for user, password in (("analyst", "wrong"), ("nobody", PASSWORD)):
            refused = _beeline(url, statement, "-n", user, "-p", password)
            assert refused.returncode != 0
            assert "Error validating the login" in refused.stderr
        assert server.health()["status"] == "ok"
        rest = _stop(server)
    assert "telemetry-sink sql-server: stopping" in rest
    assert "Traceback" not in rest


# -- options refused before Spark starts -------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--host", "0.0.0.0"],
            "listening on 0.0.0.0 (beyond loopback) needs --password-file or --ldap-url: anyone who "
            "reaches the port could read every table",
        ),
        (["--conf", "spark.ui.enabled=true"], "spark.ui.enabled=true is refused"),
        (["--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
        (["--port", "0"], "--port must be between 1 and 65535, got 0"),
        (["--connect-port", "15002", "--connect-host", "0.0.0.0"], "needs --connect-token-file"),
        (["--max-result-rows", "0"], "--max-result-rows must be between 1"),
        (["--ldap-url", "ldap://127.0.0.1"], "--ldap-url and --ldap-base-dn go together"),
        (["--ldap-url", "127.0.0.1", "--ldap-base-dn", "dc=x"], "--ldap-url must be ldap://HOST"),
    ],
)
def test_unsafe_or_wrong_options_are_refused_with_a_clear_message_before_spark_starts(
    options: list[str], message: str
) -> None:
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("telemetry-sink sql-server: ")
    assert message in done.stderr


@pytest.mark.spark
def test_a_port_in_use_is_one_line_and_exit_1(recent: Recent) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = subprocess.run(
            [*COMMAND, "--data-root", recent.root, *SPARK, "--port", str(taken.getsockname()[1])],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        port = taken.getsockname()[1]
    assert done.returncode == 1
    [said] = [line for line in done.stderr.splitlines() if "sql-server: cannot start" in line]
    assert said.endswith(f"sql-server: cannot start: --port {port} on 127.0.0.1: Address already in use")
    assert "Traceback" not in done.stderr
    assert "SparkContext" not in done.stderr  # said before Spark starts


def test_hash_password_prints_a_pbkdf2_line_the_password_verifies() -> None:
    done = subprocess.run(
        [*COMMAND, "--hash-password", "analyst"],
        input="s3cret\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    user, _, encoded = done.stdout.strip().partition(":")
    scheme, iterations, salt, digest = encoded.split("$")
    assert (user, scheme, int(iterations)) == ("analyst", "pbkdf2_sha256", 600_000)
    assert base64.b64decode(digest) == hashlib.pbkdf2_hmac("sha256", b"s3cret", salt.encode(), 600_000)


def test_every_named_query_is_a_shared_view_over_the_telemetry_tables_with_no_session_variable() -> None:
    views = shared_views("telemetry")
    assert {f"telemetry.{SHARED_PREFIX}{name}" for name in QUERY_NAMES} <= set(views)
    for name, (statement, tables) in views.items():
        assert statement.startswith(f"CREATE OR REPLACE GLOBAL TEMPORARY VIEW {name.split('.')[1]}")
        assert tables
        assert all(t.startswith("telemetry.") for t in tables)
        assert not re.search(r"(?<!\.)\bdashboard_(from|to|top|max_clients)\b", statement), name


def test_settings_allow_loopback_without_a_password_and_require_one_beyond() -> None:
    assert SqlServerSettings().problems() == []
    assert SqlServerSettings(host="::1").problems() == []
    assert SqlServerSettings(host="10.0.0.5").problems()[0].startswith("listening on 10.0.0.5")
