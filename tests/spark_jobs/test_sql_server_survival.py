"""``telemetry-sink sql-server`` against clients that try to end it (T3-1) or guess its passwords (T3-8),
with real clients (PyHive, Spark's beeline) against the real command; and its audit trail on
``/metrics``.

- a statement that runs out of memory fails alone: the clients' tasks run in an executor JVM of their
  own, and the next client is served;
- a server whose JVM is killed says so on ``/healthz`` (503) and exits non-zero, to be restarted;
- a failed login costs the same for a user that exists and one that does not, and is counted;
- a flood of guesses is shed past a bound, while a right password logs in beside it;
- a user whose statement exhausted the executor's memory waits before its next statement, and other
  users do not (T3-12); a session's heavy statement does not queue another session's behind its tasks.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyhive import hive
from pyspark.sql import SparkSession
from TCLIService.ttypes import TOperationState  # type: ignore[import-untyped]

from spark_jobs.sql_server import MAX_RESULT_SIZE, hash_password, isolation, port_state
from tests.spark_jobs.test_sql_server import PASSWORD, Server, _beeline, _stop, metrics, sql_server

REVIEW_STATEMENT = (
    "SELECT length(concat_ws('', collect_list(r))) "
    "FROM (SELECT repeat(CAST(id AS STRING), 300000000) r FROM range(8))"
)
"""docs/findings.md T3-1: 2.4 GB of strings in one task, which ended a server on local[*]."""
KNOWN = [f"known{i}" for i in range(4)]
"""Users of the password file, each with a password nobody here sends (one failure each: each failure
is the first of its address and user, so the delay it adds is the same)."""
UNKNOWN = [f"ghost{i}" for i in range(4)]
HEAVY, LIGHT = "heavy", "light"
"""Users whose statements exhaust the executor's memory (HEAVY) or not (LIGHT), each with its own
password (``<user>-secret``): the server's wait after an exhaustion is kept per user."""


@dataclass(frozen=True)
class Guarded:
    server: Server
    passwords: Path

    def metrics(self) -> dict[str, float]:
        return metrics(self.server)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    """Binary transport with a password file of the default PBKDF2 cost (600,000 iterations, as
    ``--hash-password`` makes them), over an empty lake; its master ``local[2]`` runs the clients'
    statements in a 1 GiB executor JVM (the smallest the review's statement overflows quickly) of two
    cores (on one, Spark's FAIR scheduler breaks every tie between sessions by pool name)."""
    folder = tmp_path_factory.mktemp("sql-server-survival")
    passwords = folder / "passwords"
    lines = (
        [f"analyst:{hash_password(PASSWORD)}"]
        + [f"{user}:{hash_password(f'{user}-secret')}" for user in KNOWN]
        + [f"{user}:{hash_password(f'{user}-secret', iterations=1_000)}" for user in (HEAVY, LIGHT)]
    )
    passwords.write_text("\n".join(lines) + "\n")
    with sql_server(
        str(folder / "lake"),
        *("--password-file", str(passwords), "--master", "local[2]", "--conf", "spark.executor.memory=1g"),
    ) as running:
        yield Guarded(running, passwords)
        _stop(running)  # and its JVMs, before its pipe is closed


def _connect(server: Server, user: str, password: str) -> hive.Connection:
    return hive.connect(
        host="127.0.0.1",
        port=server.port,
        username=user,
        password=password,
        auth="CUSTOM",
        database="default",
    )


def _query(
    server: Server, statement: str, user: str = "analyst", password: str = PASSWORD
) -> list[tuple[Any, ...]]:
    with _connect(server, user, password) as connection:
        cursor = connection.cursor()
        try:
            cursor.execute(statement)
            return list(cursor.fetchall())
        finally:
            cursor.close()


def _failed_login_s(server: Server, user: str, password: str) -> float:
    started = time.monotonic()
    with pytest.raises(Exception, match="Error validating the login"):  # PyHive says it so
        _connect(server, user, password)
    return time.monotonic() - started


# -- T3-1: a server that survives its clients ----------------------------------------------------------


@pytest.mark.spark
def test_the_reviews_out_of_memory_statement_fails_alone_and_the_next_client_is_served(
    guarded: Guarded,
) -> None:
    server = guarded.server
    with pytest.raises(hive.OperationalError) as error:
        _query(server, REVIEW_STATEMENT)
    assert "OutOfMemoryError" in str(error.value)
    # the server JVM and its listeners are where they were: the next clients are served
    assert server.process.poll() is None
    assert _query(server, "SELECT COUNT(*) FROM range(1000)") == [(1000,)]
    url = f"jdbc:hive2://127.0.0.1:{server.port}/default"
    done = _beeline(url, "SELECT 6 * 7 AS answer;", "-n", "analyst", "-p", PASSWORD)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "42"
    health = server.health()
    assert health["status"] == "ok"
    assert health["failure"] is None
    assert guarded.metrics()["telemetry_sink_sqlserver_up"] == 1


@pytest.mark.spark
def test_the_executor_jvm_is_the_servers_child_on_loopback_and_its_secret_on_no_command_line(
    guarded: Guarded,
) -> None:
    server = guarded.server
    jvm = _java_child(server.process.pid)
    executor = _java_child(jvm)
    commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in (jvm, executor)}
    assert b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in commands[executor]
    assert commands[executor][commands[executor].index(b"--hostname") + 1] == b"127.0.0.1"
    environment = dict(
        line.split(b"=", 1) for line in Path(f"/proc/{jvm}/environ").read_bytes().split(b"\0") if b"=" in line
    )
    secret = environment[b"_SPARK_AUTH_SECRET"]
    assert len(secret) >= 40
    assert all(secret not in b" ".join(command) for command in commands.values())
    assert _query(server, "SET spark.authenticate.secret") == [
        ("spark.authenticate.secret", "*********(redacted)")
    ]


@pytest.mark.spark
def test_a_server_whose_jvm_is_killed_answers_503_and_exits_non_zero(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A server of its own (HTTP transport, a password file), which also shows that the HTTP transport's
    failed logins are audited with the client's address."""
    folder = tmp_path_factory.mktemp("sql-server-killed")
    passwords = folder / "passwords"
    passwords.write_text(f"analyst:{hash_password(PASSWORD, iterations=1000)}\n")
    with sql_server(str(folder / "lake"), "--transport", "http", "--password-file", str(passwords)) as server:
        url = f"jdbc:hive2://127.0.0.1:{server.port}/default;transportMode=http;httpPath=cliservice"
        refused = _beeline(url, "SELECT 1;", "-n", "intruder", "-p", "guess")
        assert "HTTP Response code: 401" in refused.stderr
        assert metrics(server)["telemetry_sink_sqlserver_failed_logins_total"] >= 1  # beeline tries again
        assert server.health()["status"] == "ok"
        jvm = _java_child(server.process.pid)
        os.kill(jvm, 9)
        answers = []
        deadline = time.monotonic() + 60
        while server.process.poll() is None and time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{server.health_port}/healthz", timeout=10)
                answers.append((answer.status_code, answer.json()))
            except httpx.TransportError:  # stopped listening: the process is ending
                pass
            time.sleep(0.1)
        assert server.process.wait(timeout=60) != 0
        server.drain.join(timeout=60)
    said = "".join(server.said)
    assert 'login failed: user="intruder" address="127.0.0.1" reason=password file: no such user' in said
    statuses = [(status, body["status"]) for status, body in answers]
    assert (503, "failed") in statuses, answers
    assert all(status == 503 for status, _ in statuses[statuses.index((503, "failed")) :]), answers
    assert re.search(r"cannot serve any more: the Spark JVM (exited|does not answer)", said), said[-3000:]


def _java_child(pid: int) -> int:
    """The Spark JVM the command started (its child)."""
    children = subprocess.run(
        ["pgrep", "-P", str(pid), "java"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(children) == 1, children
    return int(children[0])


# -- T3-8: logins -------------------------------------------------------------------------------------


@pytest.mark.spark
def test_a_failed_login_costs_the_same_for_a_known_and_an_unknown_user_and_is_counted(
    guarded: Guarded,
) -> None:
    server = guarded.server
    _failed_login_s(server, "warm-up", "x")  # the JIT's first PBKDF2 runs are slower
    before = guarded.metrics()["telemetry_sink_sqlserver_failed_logins_total"]
    known, unknown = [], []
    for known_user, unknown_user in zip(KNOWN, UNKNOWN, strict=True):
        known.append(_failed_login_s(server, known_user, "a guess"))
        unknown.append(_failed_login_s(server, unknown_user, "a guess"))
    known_s, unknown_s = statistics.median(known), statistics.median(unknown)
    # before T3-8, 184 ms against 19 ms; each is now one PBKDF2 run of the file's cost and one delay
    assert unknown_s >= 0.5 * known_s, (known, unknown)
    assert known_s >= 0.5 * unknown_s, (known, unknown)
    assert guarded.metrics()["telemetry_sink_sqlserver_failed_logins_total"] == before + 8
    said = "".join(server.said)
    assert 'login failed: user="known0" address="127.0.0.1" reason=password file: wrong password' in said
    assert 'login failed: user="ghost0" address="127.0.0.1" reason=password file: no such user' in said


@pytest.mark.spark
def test_a_flood_of_guesses_is_shed_and_a_right_password_logs_in_beside_it(guarded: Guarded) -> None:
    server = guarded.server
    before = guarded.metrics()
    stop = threading.Event()
    outcomes: list[str] = []

    def guess() -> None:
        while not stop.is_set():
            try:
                _connect(server, "mallory", "hunter2").close()
                outcomes.append("in")
            except Exception:  # refused, whichever way PyHive says it
                outcomes.append("refused")
            time.sleep(0.2)

    # twice the most logins of one user the gate admits at once on a 4-core machine (2 checked, 4 waiting)
    guessers = [threading.Thread(target=guess, name=f"guesser-{i}") for i in range(12)]
    for thread in guessers:
        thread.start()
    try:
        time.sleep(2)  # the flood is on
        # beeline: a client of its own process (this one's threads share one interpreter lock)
        url = f"jdbc:hive2://127.0.0.1:{server.port}/default"
        started = time.monotonic()
        done = _beeline(url, "SELECT 'served' AS answer;", "-n", "analyst", "-p", PASSWORD)
        beside_s = time.monotonic() - started
    finally:
        stop.set()
        for thread in guessers:
            thread.join(timeout=120)
    after = guarded.metrics()
    shed = (
        after["telemetry_sink_sqlserver_shed_logins_total"]
        - before["telemetry_sink_sqlserver_shed_logins_total"]
    )
    failed = (
        after["telemetry_sink_sqlserver_failed_logins_total"]
        - before["telemetry_sink_sqlserver_failed_logins_total"]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "served"
    assert "in" not in outcomes
    assert shed > 0, (shed, failed, len(outcomes))
    assert shed + failed == len(outcomes), (beside_s, shed, failed)
    assert 'login shed: user="mallory" address="127.0.0.1"' in "".join(server.said)


# -- the bounds and the watchdog's probe, without a server --------------------------------------------


@pytest.mark.parametrize(
    ("master", "conf", "expected"),
    [
        ("local", {}, "local-cluster[1,1,2048]"),
        ("local[1]", {"spark.executor.memory": "1g"}, "local-cluster[1,1,1024]"),
        ("local[3]", {"spark.executor.memory": "1536m"}, "local-cluster[1,3,1536]"),
        ("local[2,4]", {"spark.executor.memory": "512"}, "local-cluster[1,2,512]"),
        ("local[*]", {}, f"local-cluster[1,{os.cpu_count()},2048]"),
        ("local-cluster[2,1,900]", {}, "local-cluster[2,1,900]"),
        ("k8s://https://kubernetes.default.svc", {}, "k8s://https://kubernetes.default.svc"),
        ("spark://master:7077", {}, "spark://master:7077"),
    ],
)
def test_a_local_master_runs_the_clients_statements_in_an_executor_jvm(
    master: str, conf: dict[str, str], expected: str
) -> None:
    chosen = isolation(master, conf)
    try:
        assert chosen.master == expected
        assert chosen.settings["spark.executor.killOnFatalError.depth"] == "0"
        assert chosen.settings["spark.driver.maxResultSize"] == MAX_RESULT_SIZE
        if expected.startswith("local-cluster"):
            assert chosen.settings["spark.task.maxFailures"] == "1"
            assert chosen.settings["spark.ui.killEnabled"] == "false"
            assert chosen.environment["SPARK_LOCAL_IP"] == "127.0.0.1"
            assert chosen.home is not None
            assert chosen.environment["SPARK_HOME"] == str(chosen.home)
            assert chosen.environment["_SPARK_AUTH_SECRET"] not in str(chosen.settings)
        else:
            assert chosen.environment == {}
            assert chosen.home is None
    finally:
        chosen.remove()


def test_the_rpc_secret_is_in_the_environment_and_the_worker_writes_in_a_private_spark_home() -> None:
    chosen = isolation("local[2]", {})
    assert chosen.home is not None
    try:
        secret = chosen.environment["_SPARK_AUTH_SECRET"]
        assert len(secret) >= 40
        assert chosen.settings["spark.authenticate"] == "true"
        assert secret not in chosen.settings["spark.authenticate.secret"]  # Spark only needs one set
        assert chosen.home.stat().st_mode & 0o777 == 0o700
        assert (chosen.home / "work").is_dir()
        assert not (chosen.home / "work").is_symlink()
        assert (chosen.home / "jars").is_symlink()
        assert (chosen.home / "bin" / "spark-submit").is_file()
    finally:
        chosen.remove()
    assert not chosen.home.exists()


def test_the_callers_settings_win_and_a_wrong_memory_size_is_refused() -> None:
    chosen = isolation("local[1]", {"spark.task.maxFailures": "4", "spark.driver.maxResultSize": "1g"})
    chosen.remove()
    assert "spark.task.maxFailures" not in chosen.settings
    assert "spark.driver.maxResultSize" not in chosen.settings
    with pytest.raises(ValueError, match="not a memory size"):
        isolation("local[1]", {"spark.executor.memory": "lots"})


@pytest.mark.integration
def test_the_probe_tells_a_closed_port_from_an_open_one() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert port_state("127.0.0.1", port) == "open"
        assert port_state("0.0.0.0", port) == "open"  # a wildcard host is probed on loopback
    assert port_state("127.0.0.1", port) == "refused"


@pytest.mark.spark
def test_after_a_statement_exhausts_the_executors_memory_its_user_waits_and_others_do_not_T3_12(
    guarded: Guarded,
) -> None:
    server = guarded.server
    exhausting = "telemetry_sink_sqlserver_exhausting_statements_total"
    delayed = "telemetry_sink_sqlserver_delayed_statements_total"
    before = guarded.metrics().get(exhausting, 0)
    with _connect(server, HEAVY, f"{HEAVY}-secret") as connection:
        cursor = connection.cursor()
        for _ in range(2):
            with pytest.raises(hive.OperationalError, match="OutOfMemoryError"):
                cursor.execute(REVIEW_STATEMENT)
        # a job's end reaches the server's listener a moment after the client's answer
        deadline = time.monotonic() + 30
        while guarded.metrics()[exhausting] < before + 2:
            assert time.monotonic() < deadline, "the exhaustions were not counted"
            time.sleep(0.05)
        waited = guarded.metrics()[delayed]
        started = time.monotonic()
        cursor.execute("SELECT 1")  # waits until 2 s after the second exhaustion
        assert cursor.fetchall() == [(1,)]
        took_s = time.monotonic() - started
    assert guarded.metrics()[delayed] == waited + 1
    assert _query(server, "SELECT 1", LIGHT, f"{LIGHT}-secret") == [(1,)]
    assert guarded.metrics()[delayed] == waited + 1  # another user's statement did not wait
    said = "".join(server.said)
    assert 'statement exhausted a limit: user="heavy" limit=executor memory' in said
    waits = re.findall(r'statement delayed: user="heavy" address="[^"]*" wait_ms=(\d+)', said)
    # the last wait is SELECT 1's (the second exhaustion's statement may have waited too)
    assert 0 < int(waits[-1]) <= 2_000
    assert took_s >= int(waits[-1]) / 1000  # the client's answer came after the wait


@pytest.mark.spark
def test_a_sessions_statement_runs_beside_another_sessions_long_job_not_after_it(guarded: Guarded) -> None:
    """200 tasks of a long count in one session, on the executor's two cores; another session's
    statement still finishes while they run (FIFO scheduling would queue its tasks behind all 200)."""
    server = guarded.server
    with _connect(server, LIGHT, f"{LIGHT}-secret") as long_connection:
        long_statement = long_connection.cursor()
        long_statement.execute("SELECT count(*) FROM range(0, 40000000000, 1, 200)", async_=True)
        try:
            deadline = time.monotonic() + 60
            while _state(long_statement) != "RUNNING_STATE":
                assert time.monotonic() < deadline, _state(long_statement)
                time.sleep(0.05)
            assert _query(server, "SELECT count(*) FROM range(1000)", LIGHT, f"{LIGHT}-secret") == [(1000,)]
            assert _state(long_statement) == "RUNNING_STATE"
        finally:
            long_statement.cancel()
            long_statement.close()


def _state(cursor: hive.Cursor) -> str:
    return str(TOperationState._VALUES_TO_NAMES[cursor.poll().operationState])


# -- the login gate's rules and the password file's check, in a JVM ----------------------------------


@contextmanager
def _forgotten(spark: SparkSession, name: str) -> Iterator[Any]:
    """The JVM class ``telemetry.sink.<name>``, whose bookkeeping is forgotten before and after."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    bookkeeping = getattr(jvm.telemetry.sink, name)
    bookkeeping.forget()
    try:
        yield bookkeeping
    finally:
        bookkeeping.forget()


@pytest.mark.spark
@pytest.mark.parametrize(
    ("rule", "failures", "delay_ms"),
    [
        *(
            ("LoginGate.failureDelayMs", failures, delay_ms)  # a failed login's answer
            for failures, delay_ms in [(0, 0), (1, 100), (2, 200), (3, 400), (5, 1600), (6, 3200), (40, 3200)]
        ),
        *(
            ("StatementBackoff.delayMs", failures, delay_ms)  # T3-12: after exhausting the limits
            for failures, delay_ms in [(0, 0), (1, 1_000), (2, 2_000), (3, 4_000), (7, 60_000), (16, 60_000)]
        ),
    ],
)
def test_a_delay_doubles_with_each_failure_up_to_its_most(
    spark: SparkSession, rule: str, failures: int, delay_ms: int
) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    owner, method = rule.split(".")
    assert getattr(getattr(jvm.telemetry.sink, owner), method)(failures) == delay_ms


@pytest.mark.spark
def test_failures_in_a_row_are_forgotten_after_a_while_and_the_bookkeeping_is_bounded(
    spark: SparkSession,
) -> None:
    with _forgotten(spark, "LoginGate") as gate:
        assert [gate.failed("10.0.0.1 bob", t) for t in (0, 1000, 2000)] == [1, 2, 3]
        assert gate.failed("10.0.0.1 bob", 2000 + 15 * 60_000 + 1) == 1  # forgotten
        assert gate.failed("10.0.0.2 bob", 0) == 1  # another address: its own count
        for i in range(10_050):
            gate.failed(f"10.1.{i // 256}.{i % 256} eve", 0)
        assert gate.remembered() == 10_000


@pytest.mark.spark
def test_the_password_file_checks_an_unknown_user_as_long_as_a_known_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    passwords = tmp_path / "passwords"
    passwords.write_text(
        f"analyst:{hash_password(PASSWORD, iterations=100_000)}\nbroken:pbkdf2_sha256$x\n# a comment\n"
    )
    system = jvm.java.lang.System
    before = system.getProperty("telemetry.sink.sqlserver.password.file")
    system.setProperty("telemetry.sink.sqlserver.password.file", str(passwords))
    try:
        check = jvm.telemetry.sink.PasswordFileAuthenticator.check
        assert check("analyst", PASSWORD) is None
        assert check("analyst", "wrong") == "wrong password"
        assert check("analyst", "") == "wrong password"
        assert check("nobody", PASSWORD) == "no such user"
        assert check("broken", "x") == "the user's line in the password file does not parse"

        # the CPU time of the JVM thread that runs the check (py4j pins this Python thread to one), not
        # the wall clock: on a busy machine (the other half of the suite runs beside this one) a check
        # waits for a core for as long as it likes, but its work stays the same
        threads = jvm.java.lang.management.ManagementFactory.getThreadMXBean()

        def cpu_of(user: str) -> int:
            started = threads.getCurrentThreadCpuTime()
            check(user, "a guess")
            return int(threads.getCurrentThreadCpuTime() - started)

        cpu_of("analyst")  # the JIT
        cpu_of("nobody")
        # interleaved, and each side's least: preemption and cache misses only add to it
        pairs = [(cpu_of("analyst"), cpu_of("nobody")) for _ in range(7)]
        known, unknown = min(k for k, _ in pairs), min(u for _, u in pairs)
        assert known > 0, pairs
        assert 0.6 < unknown / known < 1.7, (known, unknown)
    finally:
        if before is None:
            system.clearProperty("telemetry.sink.sqlserver.password.file")
        else:
            system.setProperty("telemetry.sink.sqlserver.password.file", before)


# -- the wait after exhausting the server's limits, and the sessions' pools, in a JVM ----------------


@pytest.mark.spark
def test_exhaustions_are_forgotten_with_time_not_with_a_success_and_waits_are_bounded_T3_12(
    spark: SparkSession,
) -> None:
    with _forgotten(spark, "StatementBackoff") as backoff:
        backoff.exhausted("eve", 0)
        assert backoff.enter("bob", 500) == 0  # another user: no wait
        assert backoff.enter("eve", 500) == 500  # until 1 s after the exhaustion
        backoff.leave("eve")
        assert backoff.enter("eve", 1_000) == 0  # paid
        backoff.exhausted("eve", 1_000)
        waits = [backoff.enter("eve", 1_000) for _ in range(5)]
        assert waits == [2_000, 2_000, 2_000, 2_000, -1]  # at most 4 wait at once; the 5th refused
        for _ in range(4):
            backoff.leave("eve")
        # nothing but time forgets: the two exhaustions count until 10 minutes after each
        assert backoff.enter("eve", 1_000 + 10 * 60_000 - 1) == 0
        backoff.exhausted("eve", 10 * 60_000)
        assert backoff.enter("eve", 10 * 60_000) == 2_000  # the second in the window: the first left it
        backoff.leave("eve")
        backoff.exhausted("eve", 25 * 60_000)
        assert backoff.enter("eve", 25 * 60_000) == 1_000  # the others are out of the window
        backoff.leave("eve")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("message", "limit"),
    [
        (
            "Job aborted due to stage failure: ... java.lang.OutOfMemoryError: Java heap space",
            "executor memory",
        ),
        (
            "Total size of serialized results of 3 tasks (1100.0 MiB) is bigger than "
            "spark.driver.maxResultSize (1024.0 MiB)",
            "result size",
        ),
        ("telemetry-sink sql-server: the query ran past its timeout of 3.0 s", "timeout"),
        ("[DIVIDE_BY_ZERO] Division by zero.", None),
        ("Job 7 cancelled part of cancelled job group 1234", None),
        (None, None),
    ],
)
def test_only_memory_result_size_and_timeout_failures_count_as_exhaustions_T3_12(
    spark: SparkSession, message: str | None, limit: str | None
) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    assert jvm.telemetry.sink.StatementBackoff.exhaustion(message) == limit


@pytest.mark.spark
def test_each_open_session_has_a_pool_of_its_own_and_a_closed_sessions_is_reused(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pools = jvm.telemetry.sink.SessionPools
    first, second = pools.open("session-a"), pools.open("session-b")
    try:
        assert first != second
        assert pools.open("session-a") == first  # the same session: the same pool
        pools.closed("session-a")
        assert pools.open("session-c") == first  # the lowest free number again
    finally:
        for session in ("session-a", "session-b", "session-c"):
            pools.closed(session)
