"""A real Apache Kafka 4.4 broker on loopback, the tests' oracle of Kafka's behaviour, and Kafka's own
command-line tools in one long-lived JVM (docs/kafka-oracle.md).

The broker is ``kafka.Kafka`` from the jars setup fetched (``artifacts``, nothing downloads here): one
KRaft node that is broker and controller, storage formatted in a temporary folder with SCRAM users,
a PLAINTEXT listener beside a SASL_PLAINTEXT one (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; sessions
that expire), Kafka's ``StandardAuthorizer`` with super users and no ACLs, as the sink's, and the
tests' no-op client-telemetry reporter (``java/telemetry/sink/oracle``), without which a broker does not
advertise the telemetry APIs. ``KafkaTools`` runs ``kafka-configs.sh`` and ``kafka-client-metrics.sh``
(their classes, ``ConfigCommand`` and ``ClientMetricsCommand``), and ``kafka-jmx.sh`` (``JmxTool``), in a
JVM that stays up between calls.
The ``kafka_oracle`` fixture (a plugin of ``tests/conftest.py``) gives the whole session one of each.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import pytest

from artifacts import classpath
from tests.support.kafka import KafkaClient
from tests.support.process import free_port

JAVA_SOURCES: Final = Path(__file__).with_name("java")
CLUSTER_ID: Final = "q1Sh-9_ISia_zwGINzRvyQ"
USERS: Final = {"admin": "admin-secret", "alice": "alice-secret"}
"""The SASL users the broker's storage is formatted with (SCRAM-SHA-256 and -512) and PLAIN accepts;
``admin`` is a super user."""
REAUTH_MS: Final = 3_600_000
"""``connections.max.reauth.ms``: SASL sessions expire, so that clients may re-authenticate (KIP-368)."""
START_S: Final = 120.0
"""How long the broker may take to answer its first request (seconds, usually well under 10)."""
_LOG4J: Final = """\
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


def build_helpers(into: Path) -> Path:
    """The tests' Java helpers (``java/``), compiled against Kafka's jars into ``into``; returns it."""
    sources = sorted(str(path) for path in JAVA_SOURCES.rglob("*.java"))
    javac = shutil.which("javac")
    assert javac is not None, "javac: the Kafka oracle's helpers need a JDK (make setup installs one)"
    subprocess.run([javac, "-d", str(into), "-cp", classpath("kafka"), *sources], check=True)
    return into


def java_command(
    helpers: Path,
    heap: str,
    log4j: Path | None = None,
    jars: str = "kafka",
    *,
    plugins: Sequence[Path] = (),
    options: Sequence[str] = (),
) -> list[str]:
    """``java`` (with more JVM ``options``; the serial collector unless they name another) with Kafka's
    jars (``jars``: a list of ``artifacts/``, Kafka 4.4.0's by default, or an older client's,
    ``kafka-clients-3.7``), the tests' helpers and ``plugins`` (more jars) on its class path (and
    ``log4j`` as its log configuration; without one, Log4j's default: errors to the console)."""
    java = shutil.which("java")
    assert java is not None, "java: the Kafka oracle needs a Java 17 runtime"
    logging = [] if log4j is None else [f"-Dlog4j2.configurationFile=file:{log4j}"]
    path = os.pathsep.join([str(helpers), *map(str, plugins), classpath(jars)])
    gc = [] if any(o.startswith("-XX:+Use") and o.endswith("GC") for o in options) else ["-XX:+UseSerialGC"]
    return [
        java, f"-Xmx{heap}", *gc, "-Djava.awt.headless=true", *logging, *options, "-cp", path
    ]  # fmt: skip


def jmx_options(port: int) -> list[str]:
    """The JVM options of a JMX server on loopback ``port``, without authentication (``kafka-jmx.sh``'s
    ``service:jmx:rmi:///jndi/rmi://127.0.0.1:<port>/jmxrmi`` reads it)."""
    return [
        "-Dcom.sun.management.jmxremote", f"-Dcom.sun.management.jmxremote.port={port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={port}", "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1", "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false",
    ]  # fmt: skip


@dataclass(frozen=True)
class KafkaBroker:
    """A running broker: its listeners' ports, its cluster id, its log."""

    plaintext_port: int
    sasl_port: int
    controller_port: int
    cluster_id: str
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.plaintext_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def _properties(workdir: Path, broker: KafkaBroker, settings: Mapping[str, str]) -> str:
    jaas = " ".join(f'user_{user}="{password}"' for user, password in USERS.items())
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    values = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{broker.controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.plaintext_port},"
        f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port},CONTROLLER://127.0.0.1:{broker.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.plaintext_port},"
        f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": "org.apache.kafka.common.security.plain."
        f"PlainLoginModule required {jaas};",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "connections.max.reauth.ms": str(REAUTH_MS),
        "log.dirs": str(workdir / "logs"),
        "metric.reporters": "telemetry.sink.oracle.NoopTelemetryReporter",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "1",
        **settings,
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def api_versions_answered(port: int) -> bool:
    """Whether a Kafka listener on ``port`` answers an ApiVersions v0 request (a broker whose data
    plane is up)."""
    request = struct.pack(">hhih", 18, 0, 1, 6) + b"oracle"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(struct.pack(">i", len(request)) + request)
            header = connection.recv(8)
    except OSError:
        return False
    return len(header) == 8 and struct.unpack(">ii", header)[1] == 1


@contextlib.contextmanager
def kafka_broker(
    workdir: Path,
    helpers: Path,
    settings: Mapping[str, str] | None = None,
    *,
    plugins: Sequence[Path] = (),
    options: Sequence[str] = (),
    jars: str = "kafka",
) -> Iterator[KafkaBroker]:
    """A broker in ``workdir`` (``settings`` over the fixture's, ``plugins`` on its class path, more JVM
    ``options``; ``jars``: the ``artifacts/`` list of its Kafka, 4.4.0's by default, or ``kafka-4.0``),
    answering requests; stopped (SIGTERM, then SIGKILL) on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(free_port(), free_port(), free_port(), CLUSTER_ID, workdir / "broker.log")
    config = workdir / "server.properties"
    config.write_text(_properties(workdir, broker, settings or {}))
    log4j = workdir / "log4j2.properties"
    log4j.write_text(_LOG4J.format(log=broker.log))
    java = java_command(helpers, "768m", log4j, jars, plugins=plugins)
    scram = [
        f"--add-scram={mechanism}=[name={user},password={password}]"
        for user, password in USERS.items()
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    ]
    subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "--config", str(config), "--cluster-id", CLUSTER_ID,
         "--standalone", *scram],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    with (
        (workdir / "broker.out").open("w") as out,
        subprocess.Popen(
            [
                *java_command(helpers, "768m", log4j, jars, plugins=plugins, options=options),
                "kafka.Kafka",
                str(config),
            ],
            stdout=out,
            stderr=out,
        ) as process,
    ):
        try:
            deadline = time.monotonic() + START_S
            while not api_versions_answered(broker.plaintext_port):
                if process.poll() is not None or time.monotonic() > deadline:
                    said = (workdir / "broker.out").read_text()[-3000:] + broker.log.read_text()[-3000:]
                    raise RuntimeError(f"the Kafka broker did not start (exit {process.poll()}): {said}")
                time.sleep(0.2)
            yield broker
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass(frozen=True)
class ToolRun:
    """What one run of a Kafka tool did: its exit status and what it printed."""

    status: int
    stdout: str
    stderr: str


class KafkaTools:
    """Kafka's ``kafka-configs.sh`` and ``kafka-client-metrics.sh`` in one JVM (``KafkaTools.java``),
    one call at a time; ``close`` ends the JVM."""

    def __init__(self, workdir: Path, helpers: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        log4j = workdir / "tools-log4j2.properties"
        log4j.write_text(_LOG4J.format(log=workdir / "tools.log"))
        self._lock = threading.Lock()
        self._errors = (workdir / "tools.err").open("wb")
        self._process = subprocess.Popen(
            [*java_command(helpers, "256m", log4j), "telemetry.sink.oracle.KafkaTools"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
        )

    def run(self, tool: str, *args: str) -> ToolRun:
        """Run ``tool`` (``kafka-configs``, ``kafka-client-metrics``) with ``args``, as its script would."""
        assert all("\t" not in arg and "\n" not in arg for arg in args), args
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        with self._lock:
            stdin.write(("\t".join((tool, *args)) + "\n").encode())
            stdin.flush()
            header = stdout.readline().decode()
            if not header.startswith("DONE "):
                raise RuntimeError(f"the Kafka tools' JVM answered {header!r} (exit {self._process.poll()})")
            status, out_bytes, err_bytes = (int(word) for word in header.split()[1:])
            return ToolRun(status, _read(stdout, out_bytes), _read(stdout, err_bytes))

    def jmx(self, port: int, object_name: str) -> dict[str, float]:
        """The numeric attributes of a JVM's MBean ``object_name``, read once with ``kafka-jmx.sh`` from
        the JMX server on loopback ``port`` (``jmx_options``)."""
        run = self.run(
            "kafka-jmx", "--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi",
            "--object-name", object_name, "--one-time", "true", "--report-format", "properties",
        )  # fmt: skip
        assert run.status == 0, run
        values: dict[str, float] = {}
        for line in run.stdout.splitlines():  # kafka.server:type=telemetry-sink-forwarder:queue-size=1.0
            key, _, value = line.rpartition("=")
            with contextlib.suppress(ValueError):
                values[key.rpartition(":")[2]] = float(value)
        return values

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._errors.close()


def _read(stream: IO[bytes], size: int) -> str:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise RuntimeError("the Kafka tools' JVM ended mid-answer")
        data += chunk
    return data.decode()


@dataclass(frozen=True)
class KafkaOracle:
    """The session's broker, its tools' JVM, and the compiled Java helpers (for ``java_command``)."""

    broker: KafkaBroker
    tools: KafkaTools
    helpers: Path

    def both(self, tool: str, port: int, *args: str) -> tuple[ToolRun, ToolRun]:
        """``tool`` with ``args`` run against the broker, then against the Kafka listener on ``port``
        (the sink's)."""
        kafka, other = (
            self.tools.run(tool, "--bootstrap-server", server, *args)
            for server in (self.broker.bootstrap, f"127.0.0.1:{port}")
        )
        return kafka, other

    async def answers(self, port: int, request: Any) -> tuple[Any, Any]:
        """A kio ``request``'s response from the broker's PLAINTEXT listener, then from the Kafka listener
        on ``port`` (the sink's), each on a connection of its own."""
        answers = []
        for server in (self.broker.plaintext_port, port):
            client = await KafkaClient.connect(server)
            try:
                answers.append(await client.request(request))
            finally:
                client.close()
        return answers[0], answers[1]

    def same(self, tool: str, port: int, *args: str) -> ToolRun:
        """``both``, asserting that the two answered the same exit status and output; the broker's run."""
        kafka, other = self.both(tool, port, *args)
        assert (other.status, other.stdout) == (kafka.status, kafka.stdout), args
        return kafka


@pytest.fixture(scope="session")
def kafka_oracle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaOracle]:
    """One real Kafka 4.4 broker and one tools JVM for the whole test session, stopped at its end."""
    workdir = tmp_path_factory.mktemp("kafka-oracle")
    helpers = build_helpers(workdir / "classes")
    with kafka_broker(workdir / "broker", helpers) as broker:
        tools = KafkaTools(workdir / "tools", helpers)
        try:
            yield KafkaOracle(broker, tools, helpers)
        finally:
            tools.close()
