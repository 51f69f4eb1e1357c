"""The broker plugin while the sink is away (docs/broker-plugin.md): the broker goes on serving its
producers, the plugin's queue stays within its bound and counts what it drops, and once the sink is
back the telemetry still queued lands, once. The plugin's counts are read from the broker's JMX with
Kafka's own ``kafka-jmx.sh``."""

from __future__ import annotations

import base64
import re
import urllib.request
from collections.abc import Iterator
from typing import Any, Final

import confluent_kafka
import pytest

from broker_plugin import CLASS, build
from tests.broker_plugin.conftest import FORWARDER, TOKEN, subscribe_everything
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
    """The sink answers 413 to a request over ``limits.max_resource_metrics`` (here 150: a Java client's
    push has 99): the plugin halves the batch until each part is taken, refusing nothing for good."""
    workdir = tmp_path_factory.mktemp("plugin-413")
    tokens = workdir / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "{FORWARDER}"\n')
    extra = (
        f"security: {{tokens_file: {tokens}, trusted_forwarders: ['{FORWARDER}']}}\n"
        "limits: {max_resource_metrics: 150}\n"
    )
    jmx_port = free_port()
    with running_sink(workdir / "sink", workdir / "sink" / "data", extra=extra) as sink:
        settings = {
            "metric.reporters": CLASS,
            "telemetry.sink.forwarder.endpoint": f"{sink.http_url}/v1/metrics",
            "telemetry.sink.forwarder.bearer.token": TOKEN,
            "telemetry.sink.forwarder.linger.ms": "2500",  # two or three pushes a batch: over 150
        }
        with kafka_broker(
            workdir / "broker",
            kafka_oracle.helpers,
            settings,
            plugins=[build()],
            options=jmx_options(jmx_port),
        ) as broker:
            subscribe_everything(kafka_oracle, broker, 500)
            command = [
                *java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient",
                "producer", f"bootstrap.servers={broker.bootstrap}", "client.id=split-java",
            ]  # fmt: skip
            with line_driven(command) as client:
                assert client.stdout is not None
                instance_id = client.stdout.readline().split()[1]
                rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 4, DEADLINE_S)
                counts = _counts(kafka_oracle, jmx_port)
            with urllib.request.urlopen(f"{sink.http_url}/metrics", timeout=30) as answer:
                scraped = answer.read().decode()
    refused = re.findall(r"telemetry_sink_requests_total\{([^}]*)\} ([0-9.e+]+)", scraped)
    too_large = sum(
        float(n) for labels, n in refused if 'transport="http"' in labels and 'code="118"' in labels
    )
    assert too_large >= 1, scraped  # TELEMETRY_TOO_LARGE: 413 on HTTP
    assert counts["rejected-total"] == 0
    assert counts["forwarded-total"] >= 4
    payloads = [row["payload"] for row in rows]
    assert len(set(payloads)) == len(payloads)
