"""Benchmark of ``telemetry-sink sql-server``: the dashboard's named queries through JDBC/ODBC (the
Thrift server, queried with PyHive) against the same queries in-process, same data and same session
settings, in one run; then 8 clients at once.

1. **Data** (timed apart): ``benchmarks/dashboard/fleet.py`` writes a day of a fleet's rollups into
   the gold tables of a temporary data root (or ``--data DIR``, reused when it exists).
2. **Server:** ``telemetry-sink sql-server`` started on the data root, on ``--master`` (the
   command's own process, as users run it).
3. **In-process (the ceiling):** a Spark session of the same settings in this process: the views
   registered, the session variables set to the day, the window's views created, each query of
   ``spark_jobs/dashboards/queries/`` run and its rows fetched (``toArrow``).
4. **JDBC:** one PyHive connection runs the same statements (``variables.sql``, ``SET VAR``,
   ``window.sql``, each query) and fetches every row.

After a warm-up of each, 3 and 4 alternate ``--repeat`` times; the best of each counts. The ratio is
in-process seconds / JDBC seconds (1.0: JDBC costs nothing on top; the goal is at least 0.8).

5. **Concurrency:** ``--clients`` (8) PyHive connections at once, each running every query over the
   day; printed: errors (must be 0), the wall time, and each client's time.
6. **Hostile mix** (docs/findings.md T3-1, T3-3, T3-8, T3-9, T3-10): ``--hostile-rounds`` rounds, each a
   quiet run of one BI client (every statement of 4., over the day) and then the same run while
   ``--attackers`` threads send the review's statements and logins without pause: a setting or a
   catalog in the session's JDBC settings, ``from_xml`` with a schema URL, ``reflect``, ``ADD JAR``,
   ``SET``, a file read by path, the heap-filling ``collect_list``, a nested view, and failed logins
   for a user that exists (the BI client's) and for one that does not. The attackers' statements and
   sessions log in as a user of their own (``mallory``): the server keeps its limits per user, as Kafka
   keeps quotas per principal (docs/sql-server.md). Printed: every hostile statement's answer (each
   must be refused before it runs: the goal is 0 that ran), the failed logins, and the BI client's
   times quiet and beside the attack (the goal: the hostile runs within the spread of the quiet ones).
   The server has a password file for this part (the BI client logs in once per run).

Run: ``.venv/bin/python benchmarks/sql_server/bench.py [--clients-in-fleet N --hours H --repeat K
--data DIR --master local[2] --hostile-rounds R --attackers A]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from functools import partial

import pyspark
from pyhive import hive

from benchmarks.dashboard.fleet import DAY_START, FleetSpec, write_fleet
from spark_jobs.dashboards import Window
from spark_jobs.dashboards.queries import QUERY_NAMES, _statements, query_text
from spark_jobs.lake import DeltaLake
from spark_jobs.session import SparkSettings, spark_session
from spark_jobs.sql_server import hash_password
from spark_jobs.views import register_views
from tests.support.process import free_port

SETTINGS = {"spark.sql.shuffle.partitions": "8"}
USER, PASSWORD = "analyst", "bench-password"
ATTACKER, ATTACKER_PASSWORD = "mallory", "attacker-password"
"""The attackers' own login: the server keeps its limits per user, as Kafka keeps quotas per principal."""
REFUSED = "read-only"
"""In every refusal's message: ``telemetry-sink sql-server is read-only: ... is refused``."""
NESTED_VIEWS = [
    "CREATE OR REPLACE TEMPORARY VIEW v0 AS SELECT id FROM range(2)",
    *(
        f"CREATE OR REPLACE TEMPORARY VIEW v{i} AS SELECT * FROM v{i - 1} UNION ALL SELECT * FROM v{i - 1}"
        for i in range(1, 21)
    ),
]
HOSTILE_STATEMENTS = {
    "from_xml schema URL (T3-10)": "SELECT from_xml('<a>1</a>', 'a INT', "
    "map('rowValidationXSDPath', 'http://127.0.0.1:9/schema.xsd'))",
    "collect_list of large strings (T3-1)": "SELECT length(concat_ws('', collect_list(r))) FROM "
    "(SELECT repeat(CAST(id AS STRING), 300000000) r FROM range(8))",
    "reflect": "SELECT reflect('java.lang.System', 'exit', 1)",
    "ADD JAR": "ADD JAR /tmp/x.jar",
    "SET": "SET spark.sql.shuffle.partitions=1",
    "file by path": "SELECT * FROM text.`/etc/hostname`",
}
HOSTILE_SESSIONS = {
    "catalog in JDBC settings (T3-3)": {
        "spark.sql.catalog.c": "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
        "spark.sql.catalog.c.url": "jdbc:derby:memory:bench;create=true",
    },
    "query timeout in JDBC settings (T3-9)": {"spark.sql.thriftServer.queryTimeout": "86400"},
}


def session_statements(window: Window) -> list[str]:
    """What a session runs before the queries: the variables, set to ``window``, and the window's views."""
    return [
        *_statements(query_text("variables")),
        f"SET VAR dashboard_from = TIMESTAMP '{window.start:%Y-%m-%d %H:%M:%S}'",
        f"SET VAR dashboard_to = TIMESTAMP '{window.end:%Y-%m-%d %H:%M:%S}'",
        *_statements(query_text("window")),
    ]


def in_process(lake: DeltaLake, root: str, window: Window) -> tuple[dict[str, float], int]:
    session = lake.spark
    started = time.perf_counter()
    register_views(lake, root)
    for statement in session_statements(window):
        session.sql(statement)
    seconds, rows = {}, 0
    for name in QUERY_NAMES:
        rows += session.sql(query_text(name)).toArrow().num_rows
        seconds[name] = time.perf_counter() - started
        started = time.perf_counter()
    return seconds, rows


def connect(port: int, password: str | None = None, user: str = USER, **settings: str) -> hive.Connection:
    """A PyHive connection (``password``: a password-file server's login); ``settings`` as a JDBC URL's
    ``?key=value`` part."""
    configuration = {f"set:hiveconf:{key}": value for key, value in settings.items()}
    if password is None:
        return hive.connect(host="127.0.0.1", port=port, username=user, database="default")
    return hive.connect(
        host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM",
        database="default", configuration=configuration or None,
    )  # fmt: skip


def over_jdbc(port: int, window: Window, password: str | None = None) -> tuple[dict[str, float], int]:
    started = time.perf_counter()
    with connect(port, password) as connection:
        cursor = connection.cursor()
        for statement in session_statements(window):
            cursor.execute(statement)
        seconds, rows = {}, 0
        for name in QUERY_NAMES:
            cursor.execute(query_text(name))
            rows += len(cursor.fetchall())
            seconds[name] = time.perf_counter() - started
            started = time.perf_counter()
    return seconds, rows


def concurrently(port: int, window: Window, clients: int) -> tuple[float, list[float], list[str]]:
    errors: list[str] = []
    times: list[float] = [0.0] * clients

    def client(k: int) -> None:
        started = time.perf_counter()
        try:
            over_jdbc(port, window)
        except Exception as exc:  # counted and printed: the benchmark's point is that there are none
            errors.append(f"client {k}: {str(exc)[:300]}")
        times[k] = time.perf_counter() - started

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, times, errors


class Attack:
    """``attackers`` threads sending the hostile mix until ``stop``: what each answer was, by name, and
    how long each failed login took (known user, unknown user)."""

    def __init__(self, port: int, attackers: int) -> None:
        self.port = port
        self.answers: dict[str, dict[str, int]] = {}
        self.login_s: dict[str, list[float]] = {"a known user": [], "an unknown user": []}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,)) for k in range(attackers)]

    def __enter__(self) -> Attack:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _count(self, name: str, error: Exception | None) -> None:
        if error is None:
            answer = "RAN"
        else:
            answer = "refused" if REFUSED in str(error) else f"error: {str(error).strip()[:100]}"
        with self._lock:
            by_answer = self.answers.setdefault(name, {})
            by_answer[answer] = by_answer.get(answer, 0) + 1

    def _attempt(self, name: str, attempt: Callable[[], object]) -> None:
        try:
            attempt()
        except Exception as exc:  # the refusal is the expected answer
            self._count(name, exc)
        else:
            self._count(name, None)

    def _run(self, k: int) -> None:
        while not self._stop.is_set():
            for who, user in (("a known user", USER), ("an unknown user", f"nobody-{k}")):  # T3-8
                started = time.perf_counter()
                try:
                    connect(self.port, "wrong-password", user=user).close()
                except Exception:  # a failed login: its time is what counts
                    with self._lock:
                        self.login_s[who].append(time.perf_counter() - started)
                else:
                    self._count(f"login as {who} with a wrong password", None)
            for name, settings in HOSTILE_SESSIONS.items():
                self._attempt(name, partial(_in_session, self.port, settings, "SHOW NAMESPACES IN c"))
            with connect(self.port, ATTACKER_PASSWORD, user=ATTACKER) as connection:
                for name, statement in HOSTILE_STATEMENTS.items():
                    self._attempt(name, partial(_fetch, connection, [statement]))
                self._attempt("nested views, 20 levels (T3-9)", partial(_fetch, connection, NESTED_VIEWS))


def _fetch(connection: hive.Connection, statements: list[str]) -> None:
    cursor = connection.cursor()
    for statement in statements:
        cursor.execute(statement)
    if cursor.description:
        cursor.fetchall()


def _in_session(port: int, settings: dict[str, str], statement: str) -> None:
    with connect(port, ATTACKER_PASSWORD, user=ATTACKER, **settings) as connection:
        connection.cursor().execute(statement)


@dataclass
class Hostile:
    """The BI client's times, quiet and beside the attack, and the attack's answers."""

    quiet_s: list[float]
    attacked_s: list[float]
    answers: dict[str, dict[str, int]]
    login_s: dict[str, list[float]]

    @property
    def ran(self) -> int:
        return sum(by_answer.get("RAN", 0) for by_answer in self.answers.values())


def hostile(port: int, window: Window, rounds: int, attackers: int) -> Hostile:
    """Quiet and attacked runs of one BI client, interleaved."""
    result = Hostile([], [], {}, {"a known user": [], "an unknown user": []})
    for k in range(rounds):
        result.quiet_s.append(sum(over_jdbc(port, window, PASSWORD)[0].values()))
        with Attack(port, attackers) as attack:
            result.attacked_s.append(sum(over_jdbc(port, window, PASSWORD)[0].values()))
        for name, by_answer in attack.answers.items():
            mine = result.answers.setdefault(name, {})
            for answer, count in by_answer.items():
                mine[answer] = mine.get(answer, 0) + count
        for who, times in attack.login_s.items():
            result.login_s[who].extend(times)
        print(
            f"hostile round {k + 1}: BI client quiet {result.quiet_s[-1]:.1f} s, "
            f"beside the attack {result.attacked_s[-1]:.1f} s",
            flush=True,
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients-in-fleet", type=int, default=2_000)
    parser.add_argument("--entities", type=int, default=100)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8, help="concurrent SQL clients")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data", help="data root to use (written when it does not exist, kept after)")
    parser.add_argument("--hostile-rounds", type=int, default=3, help="0: no hostile mix")
    parser.add_argument("--attackers", type=int, default=2, help="threads sending the hostile mix")
    args = parser.parse_args()
    spec = FleetSpec(clients=args.clients_in_fleet, entities=args.entities, hours=args.hours)
    scratch = Path(tempfile.mkdtemp(prefix="sql-server-bench-"))
    root = args.data or str(scratch / "data")
    server = None
    try:
        started = time.perf_counter()
        if not Path(root, "rollup_client_1m").exists():
            write_fleet(root, spec)
        print(f"data: {spec} in {time.perf_counter() - started:.1f} s ({root})", flush=True)
        port, health = free_port(), free_port()
        server = start_server(root, args.master, port, health)

        spark = spark_session(
            SparkSettings(
                master=args.master, app_name="sql-server-bench", settings=SETTINGS, delta_connector="off"
            )
        )
        lake = DeltaLake(spark)
        window = Window(DAY_START, DAY_START + timedelta(hours=spec.hours))
        warm = Window(DAY_START, DAY_START + timedelta(hours=1))
        print(
            f"warm-up: in-process {sum(in_process(lake, root, warm)[0].values()):.1f} s, "
            f"JDBC {sum(over_jdbc(port, warm)[0].values()):.1f} s",
            flush=True,
        )
        local: list[tuple[dict[str, float], int]] = []
        remote: list[tuple[dict[str, float], int]] = []
        for k in range(args.repeat):
            local.append(in_process(lake, root, window))
            remote.append(over_jdbc(port, window))
            print(
                f"round {k + 1}: in-process {sum(local[-1][0].values()):.1f} s, "
                f"JDBC {sum(remote[-1][0].values()):.1f} s ({remote[-1][1]} rows)",
                flush=True,
            )
        spark.stop()
        best_local = min(local, key=lambda r: sum(r[0].values()))
        best_remote = min(remote, key=lambda r: sum(r[0].values()))
        assert best_local[1] == best_remote[1], "JDBC and in-process gave different row counts"
        ceiling, seconds = sum(best_local[0].values()), sum(best_remote[0].values())
        print(f"\n{'query':<22}{'in-process s':>14}{'JDBC s':>10}")
        for name in QUERY_NAMES:
            print(f"{name:<22}{best_local[0][name]:>14.2f}{best_remote[0][name]:>10.2f}")
        print(f"\nin-process (ceiling): {ceiling:.1f} s; JDBC: {seconds:.1f} s; rows {best_remote[1]}")
        print(f"ratio in-process / JDBC: {ceiling / seconds:.3f} (goal >= 0.8)")

        wall, times, errors = concurrently(port, window, args.clients)
        print(
            f"{args.clients} clients at once: {len(errors)} errors, {wall:.1f} s wall, "
            f"each {min(times):.1f}-{max(times):.1f} s"
        )
        for error in errors:
            print(f"  {error}")
        server.terminate()
        server.wait(timeout=120)
        attack: Hostile | None = None
        if args.hostile_rounds:
            passwords = scratch / "passwords"
            passwords.write_text(
                f"{USER}:{hash_password(PASSWORD)}\n{ATTACKER}:{hash_password(ATTACKER_PASSWORD)}\n"
            )
            server = start_server(root, args.master, port, health, "--password-file", str(passwords))
            attack = hostile(port, window, args.hostile_rounds, args.attackers)
            print(f"\n{'hostile request':<45}answers")
            for name, by_answer in sorted(attack.answers.items()):
                print(f"{name:<45}{by_answer}")
            for who, login_s in attack.login_s.items():
                median = 1000 * statistics.median(login_s) if login_s else float("nan")
                print(f"failed logins as {who}: {len(login_s)}, median {median:.0f} ms")
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/metrics", timeout=10) as answer:
                for line in answer.read().decode().splitlines():
                    if line.startswith("telemetry_sink_sqlserver_"):
                        print(f"server: {line}")
            within = max(attack.attacked_s) <= max(attack.quiet_s)
            print(
                f"hostile requests that ran: {attack.ran} (goal 0); BI client quiet "
                f"{min(attack.quiet_s):.1f}-{max(attack.quiet_s):.1f} s, beside the attack "
                f"{min(attack.attacked_s):.1f}-{max(attack.attacked_s):.1f} s: "
                f"{'within' if within else 'OUTSIDE'} the quiet spread"
            )
        print(
            json.dumps(
                {
                    "benchmark": "sql_server",
                    "python": platform.python_version(),
                    "pyspark": pyspark.__version__,
                    "master": args.master,
                    "fleet": {"clients": spec.clients, "entities": spec.entities, "hours": spec.hours},
                    "rows": best_remote[1],
                    "in_process_s": round(ceiling, 3),
                    "jdbc_s": round(seconds, 3),
                    "ratio": round(ceiling / seconds, 4),
                    "per_query_in_process_s": {k: round(v, 3) for k, v in best_local[0].items()},
                    "per_query_jdbc_s": {k: round(v, 3) for k, v in best_remote[0].items()},
                    "concurrent_clients": args.clients,
                    "concurrent_errors": len(errors),
                    "concurrent_wall_s": round(wall, 3),
                    "concurrent_client_s": [round(t, 3) for t in times],
                    "hostile": None if attack is None else asdict(attack),
                }
            )
        )
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)


def start_server(root: str, master: str, port: int, health: int, *options: str) -> subprocess.Popen[str]:
    """``telemetry-sink sql-server`` on ``root``, once it serves (its log drained from then on)."""
    conf = [x for key, value in SETTINGS.items() for x in ("--conf", f"{key}={value}")]
    server = subprocess.Popen(
        [sys.executable, "-m", "telemetry_sink", "sql-server", "--data-root", root, "--master",
         master, *conf, "--port", str(port), "--health-port", str(health),
         "--max-result-rows", "1000000", "--query-timeout", "3600", *options],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    for line in server.stderr:
        if "telemetry-sink sql-server: serving" in line:
            break
    else:
        raise SystemExit("the SQL server did not start")
    threading.Thread(target=server.stderr.read, daemon=True).start()  # keep its pipe drained
    return server


if __name__ == "__main__":
    main()
