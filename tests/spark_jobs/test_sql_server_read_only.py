"""``telemetry-sink sql-server`` is read-only by construction (docs/sql-server.md, "Read-only"): each of
the review's attacks (docs/findings.md T3-2, T3-3, T3-9, T3-10), made by a real client (PyHive and
beeline over JDBC, PySpark's Spark Connect client) against one real server, is refused before anything
in it runs, and a well-behaved client beside them still reads the views.

The server has a password file, a Spark Connect token, a 20-second timeout, and an operator's catalog
``c`` whose plugin would make a Derby database (a folder) if anything loaded it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pyhive import hive

from ingest.admin.config_log import ConfigLog, QuotaChange
from quotas import ClientQuotaEntity
from spark_jobs.sql_server import SqlServerSettings, hash_password, settings_conflicts, spark_conf
from tests.spark_jobs.test_sql_server import COMMAND, PASSWORD, Server, _beeline, _fetch, _stop, sql_server
from tests.support.fleet import kafka_pushes, land

# its Spark runs in processes of its own, not the tests' session: beside the Spark tests (scripts/unit.sh)
pytestmark = pytest.mark.integration

TIMEOUT_S = 20
SLACK_S = 30.0
"""How much later than the timeout a statement may end on a loaded 2-core machine."""
TOKEN = "connect-token-for-the-tests"
DERBY_CATALOG = "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog"
REFUSED = "telemetry-sink sql-server is read-only"


@dataclass(frozen=True)
class Guarded:
    server: Server
    root: Path
    derby: Path
    """Where the operator's catalog ``c`` would make its Derby database."""
    xsd: XsdHost


class XsdHost:
    """A web server that serves an XML schema and remembers every path asked for (T3-10's attacker)."""

    def __init__(self) -> None:
        asked = self.asked = list[str]()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked.append(self.path)
                body = b'<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"/>'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/schema.xsd"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    """Six clients' pushes and a config change (no Spark needed: the sink's own writers), served."""
    root = tmp_path_factory.mktemp("read-only")
    land(kafka_pushes(clients=6, pushes=8, start_ms=int(time.time() // 60 * 60_000) - 15 * 60_000), str(root))
    ConfigLog(f"{root}/config_log", replica_id="r1").append(
        [QuotaChange(ClientQuotaEntity(user="bob"), "producer_byte_rate", 1024.0)], "User:ops", 0
    )
    secrets = tmp_path_factory.mktemp("read-only-secrets")
    (secrets / "passwords").write_text(f"analyst:{hash_password(PASSWORD, iterations=1000)}\n")
    (secrets / "token").write_text(TOKEN + "\n")
    derby = tmp_path_factory.mktemp("operator-catalog") / "c"
    xsd = XsdHost()
    try:
        with sql_server(
            str(root),
            "--password-file", str(secrets / "passwords"),
            "--connect-token-file", str(secrets / "token"),
            "--query-timeout", str(TIMEOUT_S),
            "--conf", f"spark.sql.catalog.c={DERBY_CATALOG}",
            "--conf", f"spark.sql.catalog.c.url=jdbc:derby:{derby};create=true",
            connect=True,
        ) as server:  # fmt: skip
            yield Guarded(server, root, derby, xsd)
            _stop(server)  # and its JVM, which holds the pipe the server's lines come through
    finally:
        xsd.close()


def _pyhive(server: Server, **configuration: str) -> hive.Connection:
    return hive.connect(
        host="127.0.0.1",
        port=server.port,
        username="analyst",
        password=PASSWORD,
        auth="CUSTOM",
        database="default",
        configuration=configuration,
    )


def _refusal(connection: hive.Connection, statement: str) -> str:
    """The read-only refusal ``statement`` gets (asserted: it gets one)."""
    with pytest.raises(hive.OperationalError) as error:
        _fetch(connection, statement)
    found = re.search(rf"{REFUSED}: .*? is refused", str(error.value))
    assert found, f"{statement}: {str(error.value)[:2000]}"
    return found.group(0)


_STATES = hive.ttypes.TOperationState
_RUNNING = {_STATES.INITIALIZED_STATE, _STATES.PENDING_STATE, _STATES.RUNNING_STATE}


def _run(connection: hive.Connection, statement: str) -> tuple[str, str]:
    """Run ``statement`` as beeline does (asynchronously, polling): its end state and error message."""
    cursor = connection.cursor()
    try:
        cursor.execute(statement, async_=True)
        while (status := cursor.poll()).operationState in _RUNNING:
            time.sleep(0.1)
        return _STATES._VALUES_TO_NAMES[status.operationState], status.errorMessage or ""
    finally:
        cursor.close()


def _audited(server: Server, pattern: str) -> bool:
    """Whether the server's audit trail (its stderr) has a line matching ``pattern`` (read as it
    arrives: the audit line is logged as the refusal is answered)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if re.search(pattern, "".join(server.said)):
            return True
        time.sleep(0.2)
    return False


def _a_well_behaved_client_reads_the_views(server: Server) -> None:
    with _pyhive(server) as connection:
        assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.telemetry_pushes") == [[48]]
        assert _fetch(connection, "SELECT COUNT(*) FROM telemetry.config_log") == [[1]]


# -- T3-3: JDBC connection settings, catalogs ---------------------------------------------------------


def test_T3_3_a_session_with_settings_in_its_jdbc_url_does_not_open_and_no_catalog_is_loaded(
    guarded: Guarded, tmp_path: Path
) -> None:
    server, database = guarded.server, tmp_path / "derby"
    derby = {
        "set:hiveconf:spark.sql.catalog.x": DERBY_CATALOG,
        "set:hiveconf:spark.sql.catalog.x.url": f"jdbc:derby:{database}",
        "set:hiveconf:spark.sql.catalog.x.create": "true",
    }
    for configuration in (
        derby,
        {"set:hivevar:spark.sql.catalog.x": DERBY_CATALOG},  # `#key=value`: Spark applies it as a setting
        {"set:system:javax.xml.accessExternalDTD": "all"},  # a JVM system property
        {"set:hiveconf:spark.sql.thriftServer.queryTimeout": "86400s"},  # T3-9: the client's own timeout
        {"use:database": "default; DROP VIEW x"},
    ):
        with pytest.raises(Exception) as refused:  # noqa: PT011 - PyHive raises its Thrift answer as it is
            _pyhive(server, **configuration)
        assert f"{REFUSED}: the session setting" in str(refused.value), configuration
    # beeline: hiveconf after `?`, hivevar after `#`
    for url in (
        f"jdbc:hive2://127.0.0.1:{server.port}/default?spark.sql.catalog.x={DERBY_CATALOG}",
        f"jdbc:hive2://127.0.0.1:{server.port}/default#spark.sql.catalog.x={DERBY_CATALOG}",
    ):
        done = _beeline(url, "SHOW NAMESPACES IN x;", "-n", "analyst", "-p", PASSWORD)
        assert done.returncode != 0
        assert f"{REFUSED}: the session setting spark.sql.catalog.x" in done.stderr
    assert not database.exists()
    assert _audited(server, r'refused: user="analyst" address="127\.0\.0\.1" what=.*the session setting')
    _a_well_behaved_client_reads_the_views(server)


@pytest.mark.parametrize(
    "statement",
    [
        "SHOW NAMESPACES IN c",
        "USE c",
        "USE c.ns",
        "SET CATALOG c",
        "SELECT * FROM c.ns.t",
        "DESCRIBE TABLE c.ns.t",
        "SHOW TABLES IN IDENTIFIER('c.ns')",
        "SELECT * FROM IDENTIFIER('c.ns.t')",
        "EXECUTE IMMEDIATE 'SHOW NAMESPACES IN c'",
    ],
)
def test_T3_3_a_statement_naming_another_catalog_is_refused_before_the_catalog_is_loaded(
    guarded: Guarded, statement: str
) -> None:
    with _pyhive(guarded.server) as connection:
        assert _refusal(connection, statement) == f"{REFUSED}: the catalog c is refused"
    assert not guarded.derby.exists()  # Derby never ran: its plugin was not loaded


@pytest.mark.parametrize(
    ("statement", "refused"),
    [
        ("SELECT * FROM parquet.`{root}/telemetry_pushes/r1`", "a file by path: parquet"),
        ("SELECT * FROM json.`/etc/hostname`", "a file by path: json"),
        ("SELECT * FROM IDENTIFIER('text.`/etc/hostname`')", "a file by path: text"),
        ("SET spark.sql.runSQLOnFiles=true", "changing a setting"),
        ("SET spark.sql.variable.substitute=true", "changing a setting"),
    ],
)
def test_no_statement_opens_a_file_by_path(guarded: Guarded, statement: str, refused: str) -> None:
    with _pyhive(guarded.server) as connection:
        assert refused in _refusal(connection, statement.format(root=guarded.root))


def test_a_statement_reads_no_environment_variable_or_system_property(guarded: Guarded) -> None:
    """Spark's variable substitution would put the JVM's environment (Connect's token) in the text."""
    with _pyhive(guarded.server) as connection:
        [[token]] = _fetch(connection, "SELECT '${env:SPARK_CONNECT_AUTHENTICATE_TOKEN}'")
        [[java]] = _fetch(connection, "SELECT '${system:java.version}'")
    assert (token, java) == ("${env:SPARK_CONNECT_AUTHENTICATE_TOKEN}", "${system:java.version}")


# -- T3-10: XML --------------------------------------------------------------------------------------


def test_T3_10_no_xml_function_or_source_makes_the_server_fetch_a_schema(guarded: Guarded) -> None:
    url = guarded.xsd.url
    xsd = f"map('rowValidationXSDPath', '{url}')"
    with _pyhive(guarded.server) as connection:
        for statement in (
            f"SELECT from_xml('<p><a>1</a></p>', 'a INT', {xsd})",
            f"SELECT schema_of_xml('<p><a>1</a></p>', {xsd})",
            f"SELECT system.builtin.from_xml('<p/>', 'a INT', {xsd})",
            f"SELECT to_xml(named_struct('a', 1), {xsd})",
            f"SELECT from_xml('<p/>', schema_of_xml('<p><a>1</a></p>'), {xsd})",
            f"CREATE TEMPORARY VIEW x AS SELECT from_xml('<p/>', 'a INT', {xsd})",
        ):
            assert "the XML function" in _refusal(connection, statement), statement
        assert "a file by path: xml" in _refusal(connection, f"SELECT * FROM xml.`{url}`")
    assert guarded.xsd.asked == []


def test_T3_10_the_jvm_resolves_no_external_dtd_or_schema(guarded: Guarded) -> None:
    jvms = [
        command
        for command in map(_cmdline, _descendants(guarded.server.process.pid))
        if {"org.apache.spark.deploy.SparkSubmit", "org.apache.spark.executor.CoarseGrainedExecutorBackend"}
        & set(command)
    ]
    assert any("org.apache.spark.deploy.SparkSubmit" in command for command in jvms)
    for options in jvms:  # the server's, and its executors' when they run apart (a local-cluster)
        assert "-Djavax.xml.accessExternalDTD=" in options
        assert "-Djavax.xml.accessExternalSchema=" in options


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, of in parents.items() if of == parent]
        found.extend(children)
        todo.extend(children)
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return [""]


# -- T3-9: bounded planning, the timeout from the start ------------------------------------------------


def test_T3_9_nested_views_are_stopped_each_statement_within_the_timeout_from_its_start(
    guarded: Guarded,
) -> None:
    """The review's case: each view is two of the one before, so planning doubles at each level
    (60 s at level 15 against a 5 s timeout, before). Now every statement ends within the timeout,
    and the chain is refused by level 9 (1,022 SQL texts to parse), or stopped earlier by the
    timeout on a slow machine."""
    outcomes = []
    with _pyhive(guarded.server) as connection:
        assert _run(connection, "CREATE TEMPORARY VIEW v0 AS SELECT id FROM range(2)")[0] == "FINISHED_STATE"
        for level in range(1, 16):
            started = time.monotonic()
            twice = f"SELECT * FROM v{level - 1} UNION ALL SELECT * FROM v{level - 1}"
            state, message = _run(connection, f"CREATE TEMPORARY VIEW v{level} AS {twice}")
            outcomes.append((level, state, round(time.monotonic() - started, 1), message[:300]))
            assert time.monotonic() - started < TIMEOUT_S + SLACK_S, outcomes
            if state != "FINISHED_STATE":
                break
        else:
            pytest.fail(f"nothing stopped the nested views: {outcomes}")
    level, state, _, message = outcomes[-1]
    assert level <= 9, outcomes
    assert (
        "parses more than 1000 SQL texts" in message
        or "ran past its timeout" in message
        or state in ("TIMEDOUT_STATE", "CANCELED_STATE")
    ), outcomes
    _a_well_behaved_client_reads_the_views(guarded.server)


# -- T3-2: Spark Connect ------------------------------------------------------------------------------

CONNECT_CLIENT = r"""
import json, re, sys, time, warnings
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource
from pyspark.sql.functions import col, from_xml, lit, sum as sum_, udf, udtf
from pyspark.sql.streaming import StreamingQueryListener

args = json.loads(sys.argv[1])
spark = SparkSession.builder.remote(args["url"]).getOrCreate()
marker = args["marker"]


@udtf
class Peek:
    @staticmethod
    def analyze(*arguments):  # runs on the server as the UDTF is planned
        open(marker + ".udtf", "w").write("ran on the server")
        from pyspark.sql.types import StructType
        from pyspark.sql.udtf import AnalyzeResult
        return AnalyzeResult(StructType().add("a", "int"))

    def eval(self, *arguments):
        yield (1,)


class Evil(DataSource):
    @classmethod
    def name(cls):
        return "evil"

    def schema(self):  # runs on the server as a read of it is planned
        open(marker + ".datasource", "w").write("ran on the server")
        return "a int"


class Listener(StreamingQueryListener):
    def onQueryStarted(self, event): pass
    def onQueryProgress(self, event): pass
    def onQueryIdle(self, event): pass
    def onQueryTerminated(self, event): pass


def add_listener():
    # PySpark warns, and does not raise, when the server does not take a streaming listener
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spark.streams.addListener(Listener())
    for warning in caught:
        if "telemetry-sink" in str(warning.message):
            raise RuntimeError(str(warning.message))


def refusal(attempt):
    try:
        attempt()
    except Exception as exc:
        found = re.search(r"telemetry-sink sql-server is read-only: [^\n\"]*", str(exc))
        return found.group(0) if found else "not refused: " + str(exc)[:1000]
    return None


attacks = {
    "udtf analyze": lambda: Peek(lit(1)).collect(),
    "udtf registration": lambda: spark.udtf.register("peek", Peek),
    "data source registration": lambda: spark.dataSource.register(Evil),
    "data source read": lambda: spark.read.format("evil").load().collect(),
    "python udf": lambda: spark.range(3).select(udf(lambda x: x)("id")).collect(),
    "pandas": lambda: spark.range(3).mapInPandas(lambda frames: frames, "id long").collect(),
    "conf set": lambda: spark.conf.set("spark.sql.artifact.copyFromLocalToFs.allowDestLocal", "true"),
    "conf unset": lambda: spark.conf.unset("spark.sql.shuffle.partitions"),
    "copyFromLocalToFs": lambda: spark.copyFromLocalToFs(args["local"], args["copy_to"]),
    "addArtifacts": lambda: spark.addArtifacts(args["local"], file=True),
    "cacheTable": lambda: spark.catalog.cacheTable("telemetry.telemetry_pushes"),
    "clearCache": lambda: spark.catalog.clearCache(),
    "dropGlobalTempView": lambda: spark.catalog.dropGlobalTempView("config_log"),
    "setCurrentCatalog": lambda: spark.catalog.setCurrentCatalog("c"),
    "global view": lambda: spark.range(1).createOrReplaceGlobalTempView("mine"),
    "write": lambda: spark.range(3).write.parquet(args["copy_to"] + ".parquet"),
    "read files": lambda: spark.read.text("/etc/hostname").collect(),
    "foreachBatch": lambda: spark.readStream.format("rate").load().writeStream.foreachBatch(
        lambda frame, batch: None
    ).start(),
    "streaming listener": add_listener,
    "from_xml": lambda: spark.range(1).select(
        from_xml(lit("<p><a>1</a></p>"), "a INT", {"rowValidationXSDPath": args["xsd"]})
    ).collect(),
    "xml read": lambda: spark.read.format("xml").load(args["xsd"]).collect(),
    "sql from_xml": lambda: spark.sql(
        f"SELECT from_xml('<p/>', 'a INT', map('rowValidationXSDPath', '{args['xsd']}'))"
    ).collect(),
    "catalog c": lambda: spark.sql("SHOW NAMESPACES IN c").collect(),
    "table in catalog c": lambda: spark.table("c.ns.t").collect(),
    "drop view": lambda: spark.sql("DROP VIEW telemetry.config_log").collect(),
}
out = {"refused": {what: refusal(attack) for what, attack in attacks.items()}}

# a well-behaved notebook, in the same session
out["pushes"] = spark.table("telemetry.telemetry_pushes").count()
out["config_log"] = spark.sql("SELECT COUNT(*) FROM telemetry.config_log").collect()[0][0]
spark.range(5).createOrReplaceTempView("mine")
out["mine"] = spark.table("mine").where(col("id") > 1).count()
out["partitions"] = spark.conf.get("spark.sql.shuffle.partitions")

# nested views, each two of the one before: refused once the plan is too big
spark.range(2).createOrReplaceTempView("u0")
out["nested"] = []
for level in range(1, 40):
    started = time.monotonic()
    refused = refusal(
        lambda: spark.sql(f"SELECT * FROM u{level - 1} UNION ALL SELECT * FROM u{level - 1}")
        .createOrReplaceTempView(f"u{level}")
    )
    out["nested"].append([level, time.monotonic() - started, refused])
    if refused:
        break

# the timeout, from the statement's start
started = time.monotonic()
try:
    other = spark.range(10**7).withColumnRenamed("id", "other")
    spark.range(10**7).crossJoin(other).select(sum_(col("id") * col("other"))).collect()
    out["endless"] = None
except Exception as exc:
    out["endless"] = str(exc)[:2000]
out["endless_s"] = time.monotonic() - started
print(json.dumps(out))
"""


def _client(script: str, argument: str) -> subprocess.CompletedProcess[str]:
    """PySpark's Spark Connect client running ``script``, as the user ``notebook``."""
    return subprocess.run(
        [sys.executable, "-c", script, argument],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "SPARK_USER": "notebook"},
    )


def test_T3_2_spark_connect_refuses_client_code_settings_and_artifacts_before_anything_runs(
    guarded: Guarded, tmp_path: Path
) -> None:
    assert guarded.server.connect_port is not None
    local = tmp_path / "local.txt"
    local.write_text("written by a Spark Connect client")
    arguments = {
        "url": f"sc://localhost:{guarded.server.connect_port}/;token={TOKEN}",
        "marker": str(tmp_path / "marker"),
        "local": str(local),
        "copy_to": str(guarded.root / "telemetry_pushes" / "WRITTEN-BY-A-CLIENT"),
        "xsd": guarded.xsd.url,
    }
    done = _client(CONNECT_CLIENT, json.dumps(arguments))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    not_refused = {what: why for what, why in out["refused"].items() if not (why or "").startswith(REFUSED)}
    assert not not_refused, not_refused
    assert "common_inline_user_defined_table_function" in out["refused"]["udtf analyze"]
    assert "register_data_source" in out["refused"]["data source registration"]
    assert "changing a setting (spark.conf.set)" in out["refused"]["conf set"]
    assert "AddArtifacts" in out["refused"]["copyFromLocalToFs"]
    # nothing the client sent ran on the server or reached its disk or the attacker's web server
    assert list(tmp_path.glob("marker*")) == []
    assert sorted(p.name for p in (guarded.root / "telemetry_pushes").iterdir()) == ["r1"]
    assert guarded.xsd.asked == []
    assert not guarded.derby.exists()
    # beside it, a notebook reads
    assert (out["pushes"], out["config_log"], out["mine"], out["partitions"]) == (48, 1, 3, "2")
    # nested views: every step bounded, the chain refused for its size
    *_, (level, _, refused) = out["nested"]
    assert all(took < TIMEOUT_S + SLACK_S for _, took, _ in out["nested"]), out["nested"]
    assert "a plan of more than 50000 nodes" in (refused or ""), out["nested"]
    assert level <= 16, out["nested"]
    # a statement's timeout counts from its start
    assert "the query ran past its timeout of 20.0 s" in (out["endless"] or ""), out["endless"]
    assert TIMEOUT_S - 1 < out["endless_s"] < TIMEOUT_S + SLACK_S
    # audited with the user the client says it is and its address
    assert _audited(
        guarded.server, r'refused: user="notebook" address="127\.0\.0\.1" what=.*common_inline_user_defined'
    )
    _a_well_behaved_client_reads_the_views(guarded.server)


NO_TOKEN_CLIENT = """
import sys
from pyspark.sql import SparkSession
try:
    print(SparkSession.builder.remote(sys.argv[1]).getOrCreate().table("telemetry.config_log").count())
except Exception as exc:
    print("refused:", getattr(exc, "getGrpcStatusCode", lambda: None)(), exc)
"""


@pytest.mark.parametrize("token", ["", ";token=wrong"])
def test_T3_2_spark_connect_without_the_token_reads_nothing(guarded: Guarded, token: str) -> None:
    done = _client(NO_TOKEN_CLIENT, f"sc://localhost:{guarded.server.connect_port}/{token}")
    assert "refused: StatusCode.UNAUTHENTICATED" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Spark Connect needs the server's token" in done.stdout
    assert _audited(guarded.server, r"login failed: user=- address=\"127\.0\.0\.1\" reason=Spark Connect")


# -- options: Connect always needs a token; the read-only settings cannot be changed ------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--connect-port", "15002"], "Spark Connect needs --connect-token-file"),
        (
            ["--connect-port", "15002", "--connect-insecure-loopback", "--connect-host", "0.0.0.0"],
            "--connect-insecure-loopback is for a loopback --connect-host",
        ),
        (
            ["--connect-port", "15002", "--connect-insecure-loopback", "--password-file", "/dev/null"],
            "--connect-insecure-loopback cannot go with --password-file or --ldap-url",
        ),
        (["--conf", "spark.sql.runSQLOnFiles=true"], "spark.sql.runSQLOnFiles is set by the sql-server"),
        (
            ["--conf", "spark.connect.grpc.interceptor.classes=x"],
            "spark.connect.grpc.interceptor.classes is set by the sql-server",
        ),
    ],
)
def test_connect_without_a_token_or_a_weakened_setting_is_refused_before_spark_starts(
    options: list[str], message: str
) -> None:
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert message in done.stderr


def test_settings_let_a_developer_opt_out_of_the_token_on_loopback_only_without_jdbc_passwords() -> None:
    assert SqlServerSettings(connect_port=15002, connect_insecure_loopback=True).problems() == []
    assert SqlServerSettings(connect_port=15002).problems()[0].startswith("Spark Connect needs")
    assert SqlServerSettings(
        connect_port=15002, connect_insecure_loopback=True, ldap_url="ldap://x", ldap_base_dn="dc=x"
    ).problems() == [
        "--connect-insecure-loopback cannot go with --password-file or --ldap-url: JDBC asks for a "
        "password, so Spark Connect must ask for a token (--connect-token-file)"
    ]
    conf = spark_conf(SqlServerSettings(connect_port=15002, connect_insecure_loopback=True))
    assert conf["spark.connect.grpc.interceptor.classes"] == "telemetry.sink.ConnectGuard"
    assert conf["spark.sql.runSQLOnFiles"] == conf["spark.sql.variable.substitute"] == "false"
    assert settings_conflicts({"spark.sql.variable.substitute": "true"}) == [
        "spark.sql.variable.substitute is set by the sql-server, to keep it read-only, and cannot be changed"
    ]
