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
- **read-only clients**: the project's Spark extension ``telemetry.sink.SqlGuard`` (``spark_jobs/java``)
  checks every client plan before it runs and refuses anything but reading the views (DDL, DML,
  settings, files by path, code); results hold at most ``max_result_rows`` rows; a statement is
  cancelled ``query_timeout_s`` after its first Spark job (``telemetry.sink.QueryTimeout``, which no
  client setting changes);
- **authentication**: none on loopback; beyond loopback a password file or LDAP is required (SASL
  PLAIN over the binary transport, HTTP basic over the HTTP one). The password file is the Thrift
  server's ``CUSTOM`` authentication with ``telemetry.sink.PasswordFileAuthenticator``, lines
  ``user:pbkdf2_sha256$iterations$salt$hash`` (``hash_password`` makes one); LDAP is Hive's own,
  a bind as ``uid=<user>,<base DN>``;
- **TLS**: a PEM certificate chain and key, turned into a PKCS #12 keystore (in a private temporary
  folder, removed on stop) for the Thrift server;
- **health**: ``GET /healthz`` on ``health_port`` (200 once serving, 503 before; with the number of
  views, how many refreshes were done, when the last one succeeded and the last error);
- **Spark Connect** (``connect_port``): a gRPC endpoint for notebooks. It carries DataFrame plans, which
  the same guard checks, but Spark gives it no TLS; beyond loopback it needs a pre-shared token
  (``connect_token_file``), and it is for trusted users only (docs/sql-server.md).

The Spark UI stays off (``spark.ui.enabled=true`` is refused): it would serve every query's text and
plan to anyone who reaches the port.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Literal

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from spark_jobs.dashboards.queries import shared_views
from spark_jobs.jvm import JAR
from spark_jobs.lake import DeltaLake
from spark_jobs.views import NAMESPACE, TableVersions, register_views, table_versions

__all__ = [
    "DEFAULT_CONNECT_PORT",
    "DEFAULT_HEALTH_PORT",
    "DEFAULT_PORT",
    "GUARD",
    "SqlServer",
    "SqlServerSettings",
    "hash_password",
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
        """The Thrift server's ``hive.server2.authentication``."""
        if self.ldap_url is not None:
            return "LDAP"
        return "NONE" if self.password_file is None else "CUSTOM"

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
        if (
            self.connect_port is not None
            and self.connect_token_file is None
            and not _is_loopback(self.connect_host)
        ):
            found.append(f"Spark Connect on {self.connect_host} (beyond loopback) needs --connect-token-file")
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


def hash_password(password: str, *, iterations: int = PBKDF2_ITERATIONS, salt: str | None = None) -> str:
    """The password file's form of ``password``: ``pbkdf2_sha256$iterations$salt$hash`` (the hash in
    standard base64), which ``PasswordFileAuthenticator`` checks."""
    salt = salt or secrets.token_urlsafe(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(digest).decode()}"


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
            # the Thrift server's own timeout gives JDBC clients a clean SQLTimeoutException; clients can
            # lower it, and telemetry.sink.QueryTimeout cancels past it whatever they set
            "spark.sql.thriftServer.queryTimeout": f"{int(settings.query_timeout_s)}s",
            "spark.sql.thriftServer.interruptOnCancel": "true",
        }
    )
    if settings.connect_port is not None:
        conf["spark.connect.grpc.binding.port"] = str(settings.connect_port)
        conf["spark.connect.grpc.binding.address"] = settings.connect_host
    return conf


CONNECT_TOKEN_ENV: Final = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
"""Where Spark Connect reads its pre-shared token when ``spark.connect.authenticate.token`` is not
set: the server puts the token there, in the JVM's environment, not in a setting any session can
``SET``-read."""


def spark_environment(settings: SqlServerSettings) -> dict[str, str]:
    """Environment variables the Spark JVM must be started with (before the session is built)."""
    if settings.connect_port is None or settings.connect_token_file is None:
        return {}
    return {CONNECT_TOKEN_ENV: settings.connect_token_file.read_text(encoding="utf-8").strip()}


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
    ) -> None:
        self.spark, self.lake, self.data_root, self.settings, self.say = spark, lake, data_root, settings, say
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
        thriftserver = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
        try:
            self._thrift = thriftserver.startWithContext(self.spark._jsparkSession.sqlContext())
            if self.settings.connect_port is not None:
                jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(sc)
        except Py4JJavaError as exc:  # a port in use, a bad keystore: the JVM's innermost reason
            cause = exc.java_exception
            while cause.getCause() is not None:
                cause = cause.getCause()
            raise RuntimeError(str(cause.toString())) from exc
        refresh = threading.Thread(target=self._refresh_loop, name="sql-server-refresh", daemon=True)
        self._threads.append(refresh)
        refresh.start()
        self.serving = True

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
            # Hive's LDAP check binds as uid=<user>,<base DN> with the client's password
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
        caller."""
        self._stop.set()
        self.serving = False
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
            self._health.server_close()
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
        with self._lock:
            body: dict[str, object] = {
                "status": "ok" if self.serving else "starting",
                "transport": self.settings.transport,
                "port": self.settings.port,
                "connect_port": self.settings.connect_port,
                "views": len(self.views),
                "refreshes": self.refreshes,
                "refreshed_at": self.refreshed_at,
                "last_error": self.last_error,
            }
        return (HTTPStatus.OK if self.serving else HTTPStatus.SERVICE_UNAVAILABLE), body

    def _health_server(self) -> ThreadingHTTPServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = server.health() if self.path == "/healthz" else (404, {"error": "not found"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        http = ThreadingHTTPServer((self.settings.host, self.settings.health_port), Handler)
        http.daemon_threads = True
        return http


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
    return found
