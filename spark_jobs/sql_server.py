"""``telemetry-sink sql-server``: the tables over JDBC/ODBC (Spark's Thrift server, the HiveServer2
protocol) and, optionally, Spark Connect, for the dashboards and notebooks people already use.

One Spark application (``SqlServer``) serves:

- **the views**: every table as ``telemetry.<table>`` (``spark_jobs.views``), the dashboard's window
  views and named queries as ``telemetry.dashboard_<name>`` (``dashboards.queries.shared_views``),
  made by the server's own session as global temporary views, which every client session sees;
- **freshness**: every ``refresh_s`` seconds the server reads the tables' Delta versions (the logs
  only) and makes again the views of the tables that changed, each at the version it read. A client's
  query reads the snapshot its view had when the query started: a committed Delta version, never part
  of a commit;
- **read-only clients**, by construction (docs/sql-server.md, "Read-only"): a JDBC session opens with
  no client settings (``telemetry.sink.ReadOnlyThriftServer``); every Spark Connect request is checked
  against an allowlist before Spark sees it (``telemetry.sink.ConnectGuard``); the project's Spark
  extension ``telemetry.sink.SqlGuard`` (``spark_jobs/java``) checks every client statement as it is
  parsed, planned and analysed, and refuses anything but reading the views (DDL, DML, settings,
  other catalogs, files by path, XML options, code); results hold at most ``max_result_rows`` rows;
  a statement is cancelled ``query_timeout_s`` after its start, planning included
  (``telemetry.sink.QueryTimeout``, which no client setting changes);
- **authentication**: none on loopback; beyond loopback a password file or LDAP is required (SASL
  PLAIN over the binary transport, HTTP basic over the HTTP one). The password file is the Thrift
  server's ``CUSTOM`` authentication with ``telemetry.sink.PasswordFileAuthenticator``, lines
  ``user:pbkdf2_sha256$iterations$salt$hash`` (``hash_password`` makes one); LDAP is Hive's own,
  a bind as ``uid=<user>,<base DN>`` (``telemetry.sink.LdapAuthenticator``). Every login goes through
  ``telemetry.sink.LoginGate``: a failure costs the same for a known and an unknown user, few passwords
  are checked at once (more are shed), failures are answered late, and all are audited;
- **no statement ends the server** (``isolation``): on a local master the clients' tasks run in an
  executor JVM of their own (``local-cluster``), where running out of heap fails the statement only;
- **no user takes the server**: each JDBC session runs in a FAIR scheduler pool of its own
  (``telemetry.sink.SessionPools``), and a user whose statements exhausted a limit (the executor's
  heap, the result size, the timeout) waits before its next one (``telemetry.sink.StatementBackoff``);
- **TLS**: a PEM certificate chain and key, turned into a PKCS #12 keystore (in a private temporary
  folder, removed on stop) for the Thrift server;
- **health**: ``GET /healthz`` on ``health_port`` (200 once serving, 503 before; with the number of
  views, how many refreshes were done, when the last one succeeded and the last error); a watchdog
  probes the JVM, Spark and the listeners every ``LIVENESS_INTERVAL_S`` and at each ``/healthz``: once
  one is gone, ``/healthz`` answers 503 and ``on_failure`` is called (the command exits 1);
  ``GET /metrics``: the audit trail's counters (``telemetry.sink.Audit``) in Prometheus' format;
- **Spark Connect** (``connect_port``): a gRPC endpoint for notebooks. Its requests are checked against
  an allowlist before Spark sees them, and their plans by the same guard. It always needs a pre-shared
  token (``connect_token_file``), but on loopback for a developer who says so
  (``connect_insecure_loopback``, not with a JDBC password); Spark gives it no TLS.

The Spark UI stays off (``spark.ui.enabled=true`` is refused): it would serve every query's text and
plan to anyone who reaches the port.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Literal

import pyspark
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import SparkSession

from spark_jobs.dashboards.queries import shared_views
from spark_jobs.jvm import JAR
from spark_jobs.lake import DeltaLake
from spark_jobs.views import NAMESPACE, TableVersions, register_views, table_versions

__all__ = [
    "DEFAULT_CONNECT_PORT",
    "DEFAULT_HEALTH_PORT",
    "DEFAULT_PORT",
    "EXECUTOR_MEMORY",
    "GUARD",
    "MAX_RESULT_SIZE",
    "Isolation",
    "SqlServer",
    "SqlServerSettings",
    "hash_password",
    "isolation",
    "port_state",
    "ports_in_use",
    "settings_conflicts",
    "spark_conf",
    "spark_environment",
]

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 10000
"""HiveServer2's port, which BI tools assume."""
DEFAULT_CONNECT_PORT: Final = 15002
"""Spark Connect's port."""
DEFAULT_HEALTH_PORT: Final = 10002
"""HiveServer2's web port; here only ``/healthz``."""
DEFAULT_HTTP_PATH: Final = "cliservice"
GUARD: Final = "telemetry.sink.SqlGuard"
PASSWORD_FILE_PROPERTY: Final = "telemetry.sink.sqlserver.password.file"
_AUTHENTICATOR: Final = "telemetry.sink.PasswordFileAuthenticator"
_LDAP_AUTHENTICATOR: Final = "telemetry.sink.LdapAuthenticator"
PBKDF2_ITERATIONS: Final = 600_000
"""OWASP's figure for PBKDF2-HMAC-SHA256."""

Transport = Literal["binary", "http"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class SqlServerSettings:
    """What ``telemetry-sink sql-server`` serves and how (its flags, one for one)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    transport: Transport = "binary"
    http_path: str = DEFAULT_HTTP_PATH
    health_port: int = DEFAULT_HEALTH_PORT
    connect_port: int | None = None
    connect_host: str = "127.0.0.1"
    connect_token_file: Path | None = None
    connect_insecure_loopback: bool = False
    password_file: Path | None = None
    ldap_url: str | None = None
    ldap_base_dn: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    refresh_s: float = 30.0
    query_timeout_s: float = 300.0
    max_result_rows: int = 100_000

    @property
    def authentication(self) -> str:
        """The Thrift server's ``hive.server2.authentication``: ``CUSTOM`` for a password file and for LDAP
        (Hive's LDAP check wrapped in the login gate, ``telemetry.sink.LdapAuthenticator``)."""
        return "NONE" if self.password_file is None and self.ldap_url is None else "CUSTOM"

    def problems(self) -> list[str]:
        """Every problem at once (empty when fine)."""
        found = []
        # the Thrift server and Spark Connect do not say which port 0 gave them: a port must be named
        for name, port in (("--port", self.port), ("--connect-port", self.connect_port)):
            if port is not None and not 1 <= port <= 65535:
                found.append(f"{name} must be between 1 and 65535, got {port}")
        if not 0 <= self.health_port <= 65535:
            found.append(f"--health-port must be between 0 and 65535, got {self.health_port}")
        if self.transport not in ("binary", "http"):
            found.append(f"--transport must be binary or http, not {self.transport!r}")
        if not self.refresh_s > 0:
            found.append("--refresh must be positive")
        if not self.query_timeout_s > 0:
            found.append("--query-timeout must be positive")
        if not 1 <= self.max_result_rows <= 2**31 - 1:
            found.append(f"--max-result-rows must be between 1 and {2**31 - 1}, got {self.max_result_rows}")
        if self.password_file is None and self.ldap_url is None and not _is_loopback(self.host):
            found.append(
                f"listening on {self.host} (beyond loopback) needs --password-file or --ldap-url: "
                "anyone who reaches the port could read every table"
            )
        if self.password_file is not None and self.ldap_url is not None:
            found.append("--password-file and --ldap-url are two ways to check passwords: give one")
        if (self.ldap_url is None) != (self.ldap_base_dn is None):
            found.append("--ldap-url and --ldap-base-dn go together")
        if self.ldap_url is not None and not self.ldap_url.startswith(("ldap://", "ldaps://")):
            found.append(
                f"--ldap-url must be ldap://HOST[:PORT] or ldaps://HOST[:PORT], not {self.ldap_url!r}"
            )
        found.extend(self._connect_problems())
        if (self.tls_cert is None) != (self.tls_key is None):
            found.append("--tls-cert and --tls-key go together")
        for name, path in (
            ("--password-file", self.password_file),
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
            ("--connect-token-file", self.connect_token_file),
        ):
            if path is not None and not path.is_file():
                found.append(f"{name} {path}: no such file")
        return found

    def _connect_problems(self) -> list[str]:
        """Spark Connect always asks for a token, but where a developer opts out on loopback (and JDBC
        asks for no password: then Connect must ask for a token too)."""
        if not self.connect_insecure_loopback:
            if self.connect_port is not None and self.connect_token_file is None:
                return [
                    "Spark Connect needs --connect-token-file: without it any process that reaches "
                    f"{self.connect_host}:{self.connect_port} reads every table (on loopback, "
                    "--connect-insecure-loopback opts out for a developer's machine)"
                ]
            return []
        found = []
        if self.connect_port is None:
            found.append("--connect-insecure-loopback needs --connect-port")
        if self.connect_token_file is not None:
            found.append("--connect-insecure-loopback and --connect-token-file contradict each other")
        if not _is_loopback(self.connect_host):
            found.append(
                f"--connect-insecure-loopback is for a loopback --connect-host, not {self.connect_host}"
            )
        if self.password_file is not None or self.ldap_url is not None:
            found.append(
                "--connect-insecure-loopback cannot go with --password-file or --ldap-url: JDBC asks for a "
                "password, so Spark Connect must ask for a token (--connect-token-file)"
            )
        return found


def hash_password(password: str, *, iterations: int = PBKDF2_ITERATIONS, salt: str | None = None) -> str:
    """The password file's form of ``password``: ``pbkdf2_sha256$iterations$salt$hash`` (the hash in
    standard base64), which ``PasswordFileAuthenticator`` checks."""
    salt = salt or secrets.token_urlsafe(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"


XML_JAVA_OPTIONS: Final = "-Djavax.xml.accessExternalDTD= -Djavax.xml.accessExternalSchema="
"""JAXP may fetch no external DTD or schema: an XML document or schema that names one (by file or URL)
is refused, in the driver and in the executors (``spark.*.defaultJavaOptions``, which the caller's
``extraJavaOptions`` add to)."""
MAX_NESTED_VIEW_DEPTH: Final = 16
"""Views over views, at most (Spark's ``spark.sql.view.maxNestedViewDepth``; the dashboard's go 4 deep)."""
CONNECT_GUARD: Final = "telemetry.sink.ConnectGuard"


def spark_conf(settings: SqlServerSettings) -> dict[str, str]:
    """The Spark settings a server session is built with (over the caller's ``--conf``)."""
    hive = {
        "hive.server2.thrift.bind.host": settings.host,
        "hive.server2.transport.mode": settings.transport,
        "hive.server2.thrift.port": str(settings.port),
        "hive.server2.thrift.http.port": str(settings.port),
        "hive.server2.thrift.http.path": settings.http_path,
        "hive.server2.authentication": settings.authentication,
        "hive.server2.enable.doAs": "false",
    }
    conf = {f"spark.hadoop.{key}": value for key, value in hive.items()}
    conf.update(
        {
            "spark.sql.extensions": GUARD,
            "spark.sql.hive.thriftServer.singleSession": "false",
            # the Thrift server's own timeout gives JDBC clients a clean SQLTimeoutException (and interrupts
            # the statement's thread, which the guard's planning checks notice); clients cannot change it
            # (no session settings, no SET), and telemetry.sink.QueryTimeout cancels past it anyway
            "spark.sql.thriftServer.queryTimeout": f"{int(settings.query_timeout_s)}s",
            "spark.sql.thriftServer.interruptOnCancel": "true",
            # sessions share the executors' cores: each JDBC session has a pool (SessionPools), and a
            # free task slot goes to the pool running the fewest tasks
            "spark.scheduler.mode": "FAIR",
            # `parquet.`/path``, `text.`...``, `json.`http://...``: no SQL names a file, so none is opened
            # (Spark would read one while it analyses the statement, before the guard's check)
            "spark.sql.runSQLOnFiles": "false",
            # `${env:NAME}` and `${system:NAME}` in a statement's text would read the JVM's environment
            # (Spark Connect's token) and system properties
            "spark.sql.variable.substitute": "false",
            "spark.sql.view.maxNestedViewDepth": str(MAX_NESTED_VIEW_DEPTH),
            "spark.driver.defaultJavaOptions": XML_JAVA_OPTIONS,
            "spark.executor.defaultJavaOptions": XML_JAVA_OPTIONS,
        }
    )
    if settings.connect_port is not None:
        conf["spark.connect.grpc.binding.port"] = str(settings.connect_port)
        conf["spark.connect.grpc.binding.address"] = settings.connect_host
        conf["spark.connect.grpc.interceptor.classes"] = CONNECT_GUARD
        # clients send plans uncompressed, which the guard reads (it refuses compressed ones)
        conf["spark.connect.session.planCompression.threshold"] = "-1"
    return conf


def ports_in_use(settings: SqlServerSettings) -> list[str]:
    """The server's ports that another process already listens on, each as a sentence (empty: all
    free). Checked before Spark starts, so that a port in use costs a second, not a Spark start; a
    port taken between this check and the listener's bind still fails the start (``cannot start``)."""
    ports = [("--port", settings.host, settings.port), ("--health-port", settings.host, settings.health_port)]
    if settings.connect_port is not None:
        ports.append(("--connect-port", settings.connect_host, settings.connect_port))
    taken = []
    for flag, host, port in ports:
        if not port:  # --health-port 0: any free port
            continue
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the JVM's listeners bind
            try:
                probe.bind((host, port))
            except OSError as exc:
                taken.append(f"{flag} {port} on {host}: {exc.strerror or exc}")
    return taken


CONNECT_TOKEN_ENV: Final = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
"""Where Spark Connect reads its pre-shared token when ``spark.connect.authenticate.token`` is not
set: the server puts the token there, in the JVM's environment, not in a setting any session can
``SET``-read."""


def spark_environment(settings: SqlServerSettings) -> dict[str, str]:
    """Environment variables the Spark JVM must be started with (before the session is built)."""
    if settings.connect_port is None or settings.connect_token_file is None:
        return {}
    return {CONNECT_TOKEN_ENV: settings.connect_token_file.read_text(encoding="utf-8").strip()}


# -- client work out of the server's JVM (T3-1) -------------------------------------------------------

EXECUTOR_MEMORY: Final = "2g"
"""The heap of the executor JVM that runs the clients' statements on a local master
(``spark.executor.memory``): the most that all of them together hold at once."""
LOCAL_DRIVER_MEMORY: Final = "2g"
"""The server JVM's heap on a local master (``spark.driver.memory``): it plans statements and holds
results, but runs none of their tasks."""
MAX_RESULT_SIZE: Final = "256m"
"""``spark.driver.maxResultSize``: the most serialized result bytes one statement brings to the server
JVM (Spark's default is 1g)."""
_LOCAL_MASTER: Final = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?")
_LOCAL_CLUSTER: Final = re.compile(r"local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*(\d+)\s*\]")
_LOG4J: Final = Path(__file__).with_name("log4j2.properties")
AUTH_SECRET_ENV: Final = "_SPARK_AUTH_SECRET"
"""Where Spark's ``SecurityManager`` reads the RPC secret first (before ``spark.authenticate.secret``),
and where a standalone worker gives it to its executors."""
_MEMORY: Final = re.compile(r"(\d+)\s*([kmgt]?)b?")


def _megabytes(size: str) -> int:
    """A Spark memory size (``2g``, ``1536m``; a bare number is MiB) in MiB; ValueError if it is not one."""
    found = _MEMORY.fullmatch(size.strip().lower())
    if found is None:
        raise ValueError(f"spark.executor.memory: not a memory size: {size!r}")
    return max(1, int(found[1]) * {"k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}[found[2] or "m"] // 1024)


@dataclass(frozen=True)
class Isolation:
    """How the server keeps the clients' statements from ending it: the master and Spark settings to
    start Spark with (over the caller's), the environment of its JVM, and the private Spark home that
    environment names (``remove`` removes it)."""

    master: str
    settings: dict[str, str]
    environment: dict[str, str]
    home: Path | None = None

    def remove(self) -> None:
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)


def isolation(master: str, conf: Mapping[str, str]) -> Isolation:
    """Where the clients' statements run: never in the server's JVM.

    With a local master (``local``, ``local[N]``, ``local[*]``) Spark would run every task inside the
    server's JVM, where a task that runs out of heap ends the JVM (Spark's uncaught-exception handler
    calls ``System.exit(52)``). So a local master becomes ``local-cluster[1,N,MB]``: the server's JVM
    starts one executor JVM of ``spark.executor.memory`` (default ``EXECUTOR_MEMORY``) with N cores as a
    child process, and the tasks run there. That one is made safe:

    - its RPC, block transfers and the embedded master and worker listen on loopback only
      (``SPARK_LOCAL_IP``) and need a random secret (``spark.authenticate``), given in the JVM's
      environment (``AUTH_SECRET_ENV``): not on a command line, nor in a setting a Spark Connect
      client could read; the master's UI cannot kill anything;
    - the worker writes its work folder in a private Spark home (a temporary folder), not in Spark's
      own (which is read-only in the image);
    - a task's failure fails its statement at once (``spark.task.maxFailures=1``, as on ``local``);
    - the executor logs Spark's warnings and errors only (``log4j2.properties``), in files it rolls.

    On any master: a task that runs out of heap fails its statement and leaves its executor serving
    (``spark.executor.killOnFatalError.depth=0``), a result brings at most ``MAX_RESULT_SIZE`` to the
    server JVM, and the project's jar is on the server JVM's class path (``_over``). The caller's
    ``--conf`` wins over each of these settings."""
    settings = {
        "spark.executor.killOnFatalError.depth": "0",
        "spark.driver.maxResultSize": MAX_RESULT_SIZE,
    }
    local = _LOCAL_MASTER.fullmatch(master.strip())
    if local is not None:
        cores = 1 if local[1] is None else (os.cpu_count() or 1) if local[1] == "*" else int(local[1])
        memory = conf.get("spark.executor.memory", EXECUTOR_MEMORY)
        master = f"local-cluster[1,{max(cores, 1)},{_megabytes(memory)}]"
        settings["spark.executor.memory"] = memory
    cluster = _LOCAL_CLUSTER.fullmatch(master.strip())
    if cluster is None:
        return Isolation(master, _over(conf, settings), {})
    settings.setdefault("spark.executor.memory", f"{cluster[1]}m")
    settings.update(
        {
            "spark.driver.memory": LOCAL_DRIVER_MEMORY,
            "spark.authenticate": "true",
            "spark.authenticate.secret": f"(in the environment: {AUTH_SECRET_ENV})",
            "spark.task.maxFailures": "1",
            "spark.ui.killEnabled": "false",
            "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J}",
            "spark.executor.logs.rolling.strategy": "size",
            "spark.executor.logs.rolling.maxSize": str(16 * 1024 * 1024),
            "spark.executor.logs.rolling.maxRetainedFiles": "2",
        }
    )
    home = _private_spark_home()
    environment = {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        # Spark's RPC secret: the environment's wins over the setting, which must only be there
        # (a setting is on the JVM's command line, and a Spark Connect client reads settings)
        AUTH_SECRET_ENV: secrets.token_urlsafe(32),
    }
    return Isolation(master, _over(conf, settings), environment, home)


def _over(conf: Mapping[str, str], settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` that ``conf`` (the caller's) does not set, and the project's jar on the server JVM's
    own class path: Spark loads ``spark.jars`` in a class loader of its own, which Hive closes when the
    first JDBC session closes, so that a class first needed after that would not load."""
    chosen = {key: value for key, value in settings.items() if key not in conf}
    if JAR.is_file():
        listed = conf.get("spark.driver.extraClassPath", "")
        chosen["spark.driver.extraClassPath"] = os.pathsep.join(filter(None, (listed, str(JAR))))
    return chosen


def _private_spark_home() -> Path:
    """A Spark home in a private temporary folder: Spark's own entries as links, and a ``work`` folder
    of its own for the embedded worker (which writes there, and Spark's own is read-only in the image)."""
    source = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    home = Path(tempfile.mkdtemp(prefix="telemetry-sink-spark-home-"))
    for entry in source.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    (home / "work").mkdir()
    return home


class _Keystore:
    """A PKCS #12 keystore of a PEM certificate chain and key, in a private folder (until ``remove``)."""

    def __init__(self, cert: Path, key: Path) -> None:
        from cryptography import x509  # noqa: PLC0415 - only with TLS
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa  # noqa: PLC0415
        from cryptography.hazmat.primitives.serialization import (  # noqa: PLC0415
            BestAvailableEncryption,
            load_pem_private_key,
            pkcs12,
        )

        chain = x509.load_pem_x509_certificates(cert.read_bytes())
        private = load_pem_private_key(key.read_bytes(), password=None)
        if not isinstance(
            private, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
        ):
            raise ValueError(f"--tls-key {key}: a {type(private).__name__} cannot serve TLS")
        self.password = secrets.token_urlsafe(24)
        self.folder = Path(tempfile.mkdtemp(prefix="telemetry-sink-sql-tls-"))
        self.path = self.folder / "keystore.p12"
        self.path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"telemetry-sink",
                private,
                chain[0],
                chain[1:] or None,
                BestAvailableEncryption(self.password.encode()),
            )
        )
        self.path.chmod(0o600)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class SqlServer:
    """The server of the module docstring, on ``spark`` (a session built with ``spark_conf``)."""

    def __init__(
        self,
        spark: SparkSession,
        lake: DeltaLake,
        data_root: str,
        settings: SqlServerSettings,
        say: Callable[[str], None] = log.info,
        *,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.spark, self.lake, self.data_root, self.settings, self.say = spark, lake, data_root, settings, say
        self.on_failure = on_failure
        """Called once, from the watchdog, when the server cannot serve any more (``failure`` says why)."""
        self.failure: str | None = None
        """Why the server cannot serve any more (its JVM, Spark or a listener is gone), or None."""
        self._probed = threading.Condition()
        self._probes = 0  # the number of the last probe done
        self._probes_started = 0
        self._slow: str | None = None
        self._probe_now = threading.Event()
        self._counters: dict[str, int] = {}
        self.versions: TableVersions = {}
        self.views: set[str] = set()
        self.refreshed_at: str | None = None
        self.last_error: str | None = None
        self.serving = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thrift: Any = None
        self._timeout: Any = None
        self._keystore: _Keystore | None = None
        self._health: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._shared = shared_views(NAMESPACE)  # the .sql files, read once
        self.refreshes = 0
        """Refreshes done (with or without changes), for whoever waits for one."""
        self._refreshed = threading.Condition(self._lock)

    # -- start and stop ---------------------------------------------------------------------------

    def start(self) -> None:
        """Make the views, then serve (the Thrift server, Spark Connect, the health endpoint, the
        refresh loop). Raises RuntimeError when the guard is not on the session's classpath."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        if GUARD not in (self.spark.conf.get("spark.sql.extensions", "") or ""):
            raise RuntimeError(f"the session was not built with {GUARD} (spark_conf)")
        if not JAR.is_file():
            raise RuntimeError(
                f"the project's jar ({JAR.name}) is not built: the SQL server's read-only guard lives "
                "in it (make setup builds it; it needs a JDK)"
            )
        jvm.telemetry.sink.SqlGuard.configure(
            self.spark._jsparkSession, self.settings.max_result_rows, NAMESPACE
        )
        self._health = self._health_server()  # 503 until the end of start
        self._threads = [
            threading.Thread(target=self._health.serve_forever, name="sql-server-health", daemon=True)
        ]
        self._threads[0].start()
        self.refresh()
        # the Thrift server's Hive client boots an embedded Derby, which would write derby.log here
        jvm.java.lang.System.setProperty("derby.stream.error.file", os.devnull)
        self._configure_security(jvm)
        sc = self.spark.sparkContext._jsc.sc()
        self._timeout = jvm.telemetry.sink.QueryTimeout(sc, int(self.settings.query_timeout_s * 1000))
        sc.addSparkListener(self._timeout)
        sc.addSparkListener(jvm.telemetry.sink.StatementBackoff())
        try:
            # Spark's Thrift server, whose sessions open without client settings
            self._thrift = jvm.telemetry.sink.ReadOnlyThriftServer.start(self.spark._jsparkSession)
            if self.settings.connect_port is not None:
                jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(sc)
        except Py4JJavaError as exc:  # a port in use, a bad keystore: the JVM's innermost reason
            cause = exc.java_exception
            while cause.getCause() is not None:
                cause = cause.getCause()
            raise RuntimeError(str(cause.toString())) from exc
        # the binary transport checks passwords before Hive knows the client's address (LoginGate)
        log.debug("%s", jvm.telemetry.sink.ClientAddress.install(self._thrift))
        self._await_executor(sc)
        refresh = threading.Thread(target=self._refresh_loop, name="sql-server-refresh", daemon=True)
        watchdog = threading.Thread(target=self._watch, name="sql-server-watchdog", daemon=True)
        self._threads += [refresh, watchdog]
        refresh.start()
        self.serving = True
        watchdog.start()

    def _await_executor(self, sc: Any) -> None:
        """On ``local-cluster``, wait for the executor JVM that runs the clients' statements (its start
        is said at once if it fails, not at a client's first query, which would wait for it forever)."""
        master = str(self.spark.sparkContext.master)
        if not master.startswith("local-cluster"):
            return
        deadline = time.monotonic() + EXECUTOR_START_S
        while sc.getExecutorMemoryStatus().size() < 2:  # the driver's, then an executor's
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no executor JVM started within {EXECUTOR_START_S:g} s on {master} (the worker's "
                    "log is in $SPARK_HOME/work)"
                )
            time.sleep(0.2)

    def _configure_security(self, jvm: Any) -> None:
        """The password check and TLS, where the Thrift server reads them when it starts."""
        settings = self.settings
        system = jvm.java.lang.System
        if settings.password_file is not None:
            # the Thrift server makes its authenticator from a fresh HiveConf, which reads system properties
            system.setProperty("hive.server2.custom.authentication.class", _AUTHENTICATOR)
            # absolute, not resolved: a Kubernetes Secret volume swaps a symlink when the Secret changes
            system.setProperty(PASSWORD_FILE_PROPERTY, str(settings.password_file.absolute()))
        if settings.ldap_url is not None and settings.ldap_base_dn is not None:
            # Hive's LDAP check binds as uid=<user>,<base DN> with the client's password, through the
            # login gate (bounded binds at once, failures delayed and audited)
            system.setProperty("hive.server2.custom.authentication.class", _LDAP_AUTHENTICATOR)
            system.setProperty("hive.server2.authentication.ldap.url", settings.ldap_url)
            system.setProperty("hive.server2.authentication.ldap.baseDN", settings.ldap_base_dn)
        if settings.tls_cert is not None and settings.tls_key is not None:
            self._keystore = _Keystore(settings.tls_cert, settings.tls_key)
            hadoop = self.spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in {
                "hive.server2.use.SSL": "true",
                "hive.server2.keystore.path": str(self._keystore.path),
                "hive.server2.keystore.password": self._keystore.password,
            }.items():
                hadoop.set(key, value)

    def stop(self) -> None:
        """Stop serving: no new connections, running queries cancelled, the Spark session left to the
        caller. After a failure, what is gone of the JVM is not asked to stop."""
        self._stop.set()
        self._probe_now.set()
        self.serving = False
        with contextlib.suppress(*(() if self.failure is None else (Py4JError, OSError))):
            jvm = self.spark.sparkContext._jvm
            if self._thrift is not None:
                self._thrift.stop()
            if self.settings.connect_port is not None and jvm is not None:
                none = jvm.scala.Option.empty()
                jvm.org.apache.spark.sql.connect.service.SparkConnectService.stop(none, none)
            self.spark.sparkContext.cancelAllJobs()
            if self._timeout is not None:
                self._timeout.stop()
        if self._health is not None:
            self._health.shutdown()
            self._health.server_close()  # after the answers in flight (a failure's 503)
        for thread in self._threads:
            if thread.is_alive():
                thread.join()
        if self._keystore is not None:
            self._keystore.remove()

    @property
    def health_port(self) -> int:
        assert self._health is not None
        return int(self._health.server_address[1])

    # -- freshness --------------------------------------------------------------------------------

    def refresh(self) -> list[str]:
        """Make again the views of the tables whose versions changed (and the shared views that now
        have their tables); the views made."""
        try:
            versions = table_versions(self.lake, self.data_root)
            # a Spark Connect client's catalog call (dropGlobalTempView) reaches the views without a plan
            # the guard could check: a view that is gone is made again
            listed = self.spark.sql(f"SHOW TABLES IN {NAMESPACE}").collect()
            gone = self.views - {
                f"{NAMESPACE}.{row.tableName}" for row in listed if row.namespace == NAMESPACE
            }
            changed = {
                name: v
                for name, v in versions.items()
                if self.versions.get(name) != v or f"{NAMESPACE}.{name}" in gone
            }
            made = register_views(self.lake, self.data_root, only=changed) if changed else []
            views = (self.views - gone) | set(made)
            for name, (statement, tables) in self._shared.items():
                if name not in views and tables <= views:
                    self.spark.sql(statement)
                    made.append(name)
                    views.add(name)
        except Exception as exc:  # storage or Spark: the views stay as they were, said once per change
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if error != self.last_error:
                self.say(f"refreshing the views failed (the previous ones stay): {error}")
            with self._refreshed:
                self.last_error = error
                self.refreshes += 1
                self._refreshed.notify_all()
            return []
        with self._refreshed:
            self.versions, self.views = versions, views
            self.refreshed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            self.last_error = None
            self.refreshes += 1
            self._refreshed.notify_all()
        if made:
            self.say(f"views made: {', '.join(sorted(made))}")
        return made

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.settings.refresh_s):
            self.refresh()

    # -- health -----------------------------------------------------------------------------------

    def health(self) -> tuple[int, dict[str, object]]:
        """``/healthz``: 200 while serving, 503 while starting, once the server cannot serve any more
        (``failure``), or while its JVM does not answer a probe within ``PROBE_WAIT_S``."""
        slow = None
        if self.serving and self.failure is None:
            slow = self._fresh_probe()
        failure = self.failure
        with self._lock:
            status = (
                "failed" if failure else "starting" if not self.serving else "unresponsive" if slow else "ok"
            )
            body: dict[str, object] = {
                "status": status,
                "transport": self.settings.transport,
                "port": self.settings.port,
                "connect_port": self.settings.connect_port,
                "views": len(self.views),
                "refreshes": self.refreshes,
                "refreshed_at": self.refreshed_at,
                "last_error": self.last_error,
                "failure": failure or slow,
            }
        return (HTTPStatus.OK if status == "ok" else HTTPStatus.SERVICE_UNAVAILABLE), body

    def metrics(self) -> bytes:
        """``/metrics``: the audit trail's counters (``telemetry.sink.Audit``), whether the server serves,
        its views and refreshes, in Prometheus' text format."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Metrics(self))
        return generate_latest(registry)

    def audit_counters(self) -> dict[str, int]:
        """The JVM's audit counters by kind (the last ones read, once the JVM is gone)."""
        if self.failure is None:
            with contextlib.suppress(Py4JError, OSError):  # gone: the watchdog will say so
                jvm = self.spark.sparkContext._jvm
                if jvm is not None:
                    self._counters = {
                        str(k): int(v) for k, v in dict(jvm.telemetry.sink.Audit.counters()).items()
                    }
        return dict(self._counters)

    # -- liveness ---------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Probe every ``LIVENESS_INTERVAL_S``, and when ``/healthz`` asks, until stopped or failed."""
        while not self._stop.is_set() and self.failure is None:
            with self._probed:
                self._probes_started += 1
                number = self._probes_started
            failure, slow = self._probe()
            with self._probed:
                self._probes = number
                self._slow = slow
                if failure is not None and not self._stop.is_set():
                    self.failure = failure
                self._probed.notify_all()
            if self.failure is not None:
                self.say(f"cannot serve any more: {self.failure}")
                logging.getLogger("py4j").setLevel(logging.CRITICAL)  # not a traceback per call left
                if self.on_failure is not None:
                    self.on_failure(self.failure)
                return
            self._probe_now.wait(LIVENESS_INTERVAL_S)
            self._probe_now.clear()

    def _fresh_probe(self) -> str | None:
        """Have the watchdog probe now and wait for it: None when it answered in time, else why not."""
        with self._probed:
            wanted = self._probes_started + 1  # a probe that starts after this
            self._probe_now.set()
            if not self._probed.wait_for(
                lambda: self._probes >= wanted or self.failure is not None or self._stop.is_set(),
                PROBE_WAIT_S,
            ):
                return f"the Spark JVM did not answer within {PROBE_WAIT_S:g} s"
            return self._slow

    def _probe(self) -> tuple[str | None, str | None]:
        """(why the server cannot serve any more, or None; why it is slow to, or None): its JVM exited or
        does not answer, Spark stopped, or a listener refuses connections (one that does not answer in
        time is slow, not gone)."""
        context = self.spark.sparkContext
        process = getattr(context._gateway, "proc", None)
        if process is not None and process.poll() is not None:
            return f"the Spark JVM exited (status {process.returncode})", None
        try:
            if context._jsc is None or context._jsc.sc().isStopped():
                return "Spark stopped (its log says why)", None
        except (Py4JError, OSError) as exc:  # its connection closed: it is gone, or going
            if process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return f"the Spark JVM exited (status {process.wait(timeout=1)})", None
            return f"the Spark JVM does not answer: {_first_line(exc)}", None
        slow = None
        listeners = [("JDBC/ODBC", self.settings.host, self.settings.port)]
        if self.settings.connect_port is not None:
            listeners.append(("Spark Connect", self.settings.connect_host, self.settings.connect_port))
        for name, host, port in listeners:
            state = port_state(host, port)
            if state == "refused":
                return f"the {name} port {port} refuses connections", None
            if state != "open":
                slow = f"the {name} port {port} does not answer ({state})"
        return None, slow

    def _health_server(self) -> ThreadingHTTPServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a client that sends nothing does not hold a thread (nor stop) for long

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._answer(HTTPStatus.OK, CONTENT_TYPE_LATEST, server.metrics())
                    return
                status, body = server.health() if self.path == "/healthz" else (404, {"error": "not found"})
                self._answer(status, "application/json", json.dumps(body).encode())

            def _answer(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        http = ThreadingHTTPServer((self.settings.host, self.settings.health_port), Handler)
        http.daemon_threads = False  # stop answers what is in flight (a failure's 503) before it returns
        return http


LIVENESS_INTERVAL_S: Final = 5.0
"""How often the watchdog checks the server's JVM, Spark and listeners (and at each ``/healthz``)."""
PROBE_WAIT_S: Final = 3.0
"""How long ``/healthz`` waits for a probe: a JVM that does not answer by then is reported unresponsive
(503), not yet failed."""
EXECUTOR_START_S: Final = 180.0
"""How long the server waits for its executor JVM at start (``local-cluster``)."""
_METRIC_HELP: Final = {
    "refused_statements": "Statements and requests the read-only guard refused",
    "failed_logins": "Logins refused: a wrong password, an unknown user, a wrong Spark Connect token",
    "shed_logins": "Logins refused unchecked because too many passwords were being checked at once",
    "exhausting_statements": "Statements that ran out of executor heap, outgrew the result size or timed out",
    "delayed_statements": "Statements that waited because their user's statements exhausted limits",
}


def port_state(host: str, port: int, timeout_s: float = 2.0) -> str:
    """Whether ``host:port`` accepts a connection: ``open``, ``refused`` (nothing listens) or what else
    happened (a timeout: the listener is slow or its backlog full). A wildcard host is probed on loopback."""
    target = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        with socket.create_connection((target, port), timeout=timeout_s):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return type(exc).__name__ if not str(exc) else str(exc)


class _Metrics(Collector):
    """The sql-server's metrics, read when scraped."""

    def __init__(self, server: SqlServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        up = server.serving and server.failure is None
        yield GaugeMetricFamily(
            "telemetry_sink_sqlserver_up",
            "1 while the server serves, 0 while it starts or once it failed",
            up,
        )
        yield GaugeMetricFamily(
            "telemetry_sink_sqlserver_views", "Views the server serves", len(server.views)
        )
        yield CounterMetricFamily(
            "telemetry_sink_sqlserver_refreshes", "Refreshes of the views, done or failed", server.refreshes
        )
        for kind, count in sorted(server.audit_counters().items()):
            name = re.sub(r"[^a-z0-9_]", "_", kind.lower())
            yield CounterMetricFamily(
                f"telemetry_sink_sqlserver_{name}", _METRIC_HELP.get(kind, f"Audited events: {kind}"), count
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def settings_conflicts(conf: Mapping[str, str]) -> list[str]:
    """What in the caller's Spark settings the server cannot honour."""
    found = []
    if conf.get("spark.ui.enabled", "false").lower() == "true":
        found.append(
            "spark.ui.enabled=true is refused: the Spark UI would show every client's queries to anyone "
            "who reaches its port"
        )
    if conf.get("spark.sql.hive.thriftServer.singleSession", "false").lower() == "true":
        found.append("spark.sql.hive.thriftServer.singleSession=true is refused: clients would share views")
    found.extend(
        f"{key} is set by the sql-server, to keep it read-only, and cannot be changed"
        for key in _READ_ONLY_CONF
        if key in conf
    )
    return found


_READ_ONLY_CONF: Final = (
    "spark.sql.runSQLOnFiles",
    "spark.sql.variable.substitute",
    "spark.sql.view.maxNestedViewDepth",
    "spark.driver.defaultJavaOptions",
    "spark.executor.defaultJavaOptions",
    "spark.connect.grpc.interceptor.classes",
    "spark.connect.session.planCompression.threshold",
    "spark.sql.thriftServer.queryTimeout",
)
"""Settings ``spark_conf`` makes for the read-only guarantees, which ``--conf`` may not change."""
