"""The broker plugin while the sink is away, slow or refusing (docs/broker-plugin.md): the broker goes
on serving its producers, the plugin's queue stays within its bound and counts what it drops, and once
the sink is back the telemetry still queued lands, once; a batch the sink landed but answered too late
is sent again and still lands once. The plugin's counts are read from the broker's JMX with Kafka's own
``kafka-jmx.sh``."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker_plugin import CLASS, build
from tests.broker_plugin.conftest import FORWARDER, TOKEN, subscribe_everything, trusting_sink
from tests.support.kafka_broker import KafkaBroker, KafkaOracle, java_command, jmx_options, kafka_broker
from tests.support.landed import until, until_landed
from tests.support.process import free_port, line_driven, running_sink

pytestmark = pytest.mark.integration

DEADLINE_S: Final = 120.0
QUEUE_MAX: Final = 2
"""The plugin's ``queue.max.pushes`` here: a few pushes overflow it while the sink is away."""


class Faulty:
    """A broker whose plugin forwards to a sink port where nothing listens yet, and its JMX port."""

    def __init__(self, broker: KafkaBroker, sink_port: int, jmx_port: int) -> None:
        self.broker = broker
        self.sink_port = sink_port
        self.jmx_port = jmx_port


@pytest.fixture
def faulty(tmp_path_factory: pytest.TempPathFactory, kafka_oracle: KafkaOracle) -> Iterator[Faulty]:
    sink_port, jmx_port = free_port(), free_port()
    settings = {
        "metric.reporters": CLASS,
        "telemetry.sink.forwarder.endpoint": f"http://127.0.0.1:{sink_port}/v1/metrics",
        "telemetry.sink.forwarder.queue.max.pushes": str(QUEUE_MAX),
        "telemetry.sink.forwarder.linger.ms": "20",
        "telemetry.sink.forwarder.retry.backoff.ms": "50",
        "telemetry.sink.forwarder.retry.backoff.max.ms": "500",
    }
    workdir = tmp_path_factory.mktemp("plugin-faults")
    with kafka_broker(
        workdir, kafka_oracle.helpers, settings, plugins=[build()], options=jmx_options(jmx_port)
    ) as broker:
        subscribe_everything(kafka_oracle, broker, 500)
        yield Faulty(broker, sink_port, jmx_port)


def _counts(oracle: KafkaOracle, jmx_port: int) -> dict[str, float]:
    """The plugin's metrics, as ``kafka-jmx.sh`` reads them from the broker."""
    return oracle.tools.jmx(jmx_port, "kafka.server:type=telemetry-sink-forwarder")


def _produce(bootstrap: str, messages: int) -> list[Any]:
    """Send ``messages`` records with librdkafka and wait for each answer: the delivery errors."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "client.id": "faults-producer"})
    for n in range(messages):
        producer.produce("plugin-faults", str(n).encode(), on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(60) == 0
    return errors


@contextlib.contextmanager
def _java_through_plugin(
    oracle: KafkaOracle,
    workdir: Path,
    endpoint: str,
    jmx_port: int,
    client_id: str,
    *,
    settings: dict[str, str],
) -> Iterator[tuple[KafkaBroker, str]]:
    """A broker (JMX on ``jmx_port``) whose plugin forwards to ``endpoint`` with the forwarder's token
    and ``settings`` (``telemetry.sink.forwarder.`` keys, without the prefix), every client subscribed
    each 500 ms, and Kafka's Java producer ``client_id`` on it: the broker and the producer's instance id."""
    configs = {
        "metric.reporters": CLASS,
        "telemetry.sink.forwarder.endpoint": endpoint,
        "telemetry.sink.forwarder.bearer.token": TOKEN,
        **{f"telemetry.sink.forwarder.{key}": value for key, value in settings.items()},
    }
    with kafka_broker(
        workdir / "broker", oracle.helpers, configs, plugins=[build()], options=jmx_options(jmx_port)
    ) as broker:
        subscribe_everything(oracle, broker, 500)
        command = [
            *java_command(oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient", "producer",
            f"bootstrap.servers={broker.bootstrap}", f"client.id={client_id}",
        ]  # fmt: skip
        with line_driven(command) as client:
            assert client.stdout is not None
            yield broker, client.stdout.readline().split()[1]


def test_while_the_sink_is_away_the_broker_serves_producers_and_the_queue_holds_its_bound(
    kafka_oracle: KafkaOracle,
    faulty: Faulty,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    command = [
        *java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient", "producer",
        f"bootstrap.servers={faulty.broker.bootstrap}", "client.id=faults-java",
    ]  # fmt: skip
    with line_driven(command) as client:
        assert client.stdout is not None
        instance_id = client.stdout.readline().split()[1]
        base64.urlsafe_b64decode(instance_id + "==")
        assert _produce(faulty.broker.bootstrap, 50) == [None] * 50  # served with the sink away
        away: dict[str, float] = {}

        def retrying_and_dropping() -> bool:
            away.update(_counts(kafka_oracle, faulty.jmx_port))
            return away["retried-total"] >= 1 and away["dropped-total"] >= 1

        until("the plugin retrying and dropping", retrying_and_dropping, DEADLINE_S)
        assert away["queue-size"] <= QUEUE_MAX
        assert away["forwarded-total"] == 0
        workdir = tmp_path_factory.mktemp("plugin-faults-sink")
        monkeypatch.setenv("TELEMETRY_SINK_SERVER__HTTP_PORT", str(faulty.sink_port))
        with running_sink(workdir, workdir / "data") as sink:
            rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 2, DEADLINE_S)
            back = _counts(kafka_oracle, faulty.jmx_port)
    assert back["forwarded-total"] >= 2
    assert back["dropped-total"] >= away["dropped-total"]
    payloads = [row["payload"] for row in rows]
    assert len(set(payloads)) == len(payloads)  # nothing landed twice


def test_a_batch_the_sink_finds_too_large_is_split_until_each_push_lands(
    kafka_oracle: KafkaOracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The sink answers 413 to a request over ``limits.max_metrics`` (here 150: a Java client's push
    has 99): the plugin halves the batch until each part is taken, refusing nothing for good."""
    workdir = tmp_path_factory.mktemp("plugin-413")
    jmx_port = free_port()
    with trusting_sink(workdir / "sink", "limits: {max_metrics: 150}\n") as sink:
        endpoint = f"{sink.http_url}/v1/metrics"
        with _java_through_plugin(  # linger: two or three pushes a batch, over 150
            kafka_oracle, workdir, endpoint, jmx_port, "split-java", settings={"linger.ms": "2500"}
        ) as (_, instance_id):
            rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 4, DEADLINE_S)
            counts = _counts(kafka_oracle, jmx_port)
        too_large = _scraped(sink.http_url, "telemetry_sink_requests_total", transport="http", code="118")
    assert too_large >= 1  # TELEMETRY_TOO_LARGE: 413 on HTTP
    assert counts["rejected-total"] == 0
    assert counts["forwarded-total"] >= 4
    payloads = [row["payload"] for row in rows]
    assert len(set(payloads)) == len(payloads)


class LateAnswers:
    """A TCP relay in front of the sink that holds back the sink's answer on its first ``late``
    connections for ``hold_s`` (longer than the plugin's ``request.timeout.ms``): the sink has landed the
    batch, and the plugin, which timed out, sends it again. A fault at the network boundary, where a
    slow network or a sink answering late puts it."""

    def __init__(self, sink_port: int, late: int, hold_s: float) -> None:
        self.sink_port, self.late, self.hold_s = sink_port, late, hold_s
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = [self.server]
        self.threads: list[threading.Thread] = []
        self.closing = threading.Event()
        self._start(self._accept)

    def _start(self, target: Any, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.sink_port))
            self.sockets += [client, upstream]
            hold = self.hold_s if self.late > 0 else 0.0
            self.late -= 1
            self._start(self._pipe, client, upstream, 0.0)
            self._start(self._pipe, upstream, client, hold)

    def _pipe(self, source: socket.socket, target: socket.socket, hold_s: float) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if hold_s and self.closing.wait(hold_s):  # the fault itself: this answer is late
                    return
                hold_s = 0.0
                target.sendall(chunk)
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closing.set()
        self.threads[0].join(timeout=30)  # accepts nothing more
        for end in self.sockets[1:]:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(timeout=30)
        for end in self.sockets:
            end.close()


def _scraped(url: str, name: str, **labels: str) -> float:
    """The sum of the sink's ``name`` samples that carry ``labels``."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def test_a_batch_answered_too_late_is_sent_again_and_lands_once(
    kafka_oracle: KafkaOracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    workdir = tmp_path_factory.mktemp("plugin-late")
    jmx_port = free_port()
    settings = {"request.timeout.ms": "1000", "linger.ms": "20", "retry.backoff.ms": "50"}
    with trusting_sink(workdir / "sink") as sink:
        relay = LateAnswers(sink.http_port, late=2, hold_s=3.0)
        try:
            endpoint = f"http://127.0.0.1:{relay.port}/v1/metrics"
            with _java_through_plugin(
                kafka_oracle, workdir, endpoint, jmx_port, "late-java", settings=settings
            ) as (_, instance_id):
                until_landed(sink.table_uri, "client_instance_id", instance_id, 3, DEADLINE_S)
                duplicates = until(
                    "a resend recognised",
                    lambda: _scraped(sink.http_url, "telemetry_sink_forwarded_duplicates_total"),
                    DEADLINE_S,
                )
                counts = _counts(kafka_oracle, jmx_port)
            rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 3, DEADLINE_S)
        finally:
            relay.close()
    assert duplicates >= 1
    assert counts["retried-total"] >= 2
    assert counts["rejected-total"] == 0
    payloads = [row["payload"] for row in rows]
    assert len(set(payloads)) == len(payloads)  # nothing landed twice
    assert len({row["push_id"] for row in rows}) == len(rows)


def test_a_sink_throttling_the_forwarder_is_waited_out_and_everything_lands_once(
    kafka_oracle: KafkaOracle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The forwarder's own request quota (0.01% of a thread's time: any request takes more) holds it
    after a request: the sink answers 429 with ``Retry-After``; the plugin waits that long (at most a
    quota window) and sends the same batch again."""
    workdir = tmp_path_factory.mktemp("plugin-throttled")
    extra = (
        "server: {max_otlp_hold_delay_ms: 0}\n"
        "client_quotas:\n"
        f"  - entity: {{user: {FORWARDER.removeprefix('User:')}}}\n"
        "    quotas: {request_percentage: 0.01}\n"
    )
    jmx_port = free_port()
    with trusting_sink(workdir / "sink", extra) as sink:
        endpoint = f"{sink.http_url}/v1/metrics"
        with _java_through_plugin(
            kafka_oracle, workdir, endpoint, jmx_port, "throttled-java", settings={"linger.ms": "20"}
        ) as (broker, instance_id):
            assert _produce(broker.bootstrap, 50) == [None] * 50  # served meanwhile
            until(
                "the forwarder throttled",
                lambda: _counts(kafka_oracle, jmx_port)["retried-total"] >= 1,
                DEADLINE_S,
            )
            rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 3, DEADLINE_S)
            counts = _counts(kafka_oracle, jmx_port)
        throttled = _scraped(sink.http_url, "telemetry_sink_requests_total", transport="http", code="89")
    assert counts["rejected-total"] == 0
    payloads = [row["payload"] for row in rows]
    assert len(set(payloads)) == len(payloads)
    assert throttled >= 1
