"""``kafka-client-metrics.sh`` (Kafka's ``ClientMetricsCommand``, run from Kafka 4.4's jars) against the
real broker and against the sink's Kafka listener, with the same arguments: the same exit status and
the same output, line for line (docs/kafka-oracle.md)."""

from __future__ import annotations

import pytest

from tests.support.kafka_broker import KafkaOracle, ToolRun
from tests.support.process import Running

pytestmark = pytest.mark.integration


def _same(oracle: KafkaOracle, sink: Running, *args: str) -> ToolRun:
    return oracle.same("kafka-client-metrics", sink.kafka_port, *args)


def test_a_subscriptions_life_reads_the_same_from_the_sink_as_from_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    name = "oracle-life"
    metrics = "org.apache.kafka.producer.,org.apache.kafka.consumer.coordinator.rebalance.latency.max"
    match = "client_software_name=kafka-python,client_id=app-.*"
    alter = ["--alter", "--name", name, "--metrics", metrics, "--interval", "60000", "--match", match]
    said = _same(kafka_oracle, sink, *alter)
    assert said.stdout == f"Altered client metrics config for {name}.\n"
    _same(kafka_oracle, sink, "--describe", "--name", name)
    _same(kafka_oracle, sink, "--alter", "--name", name, "--interval", "1000")
    _same(kafka_oracle, sink, "--describe", "--name", name)
    _same(kafka_oracle, sink, "--alter", "--name", name, "--metrics", "")
    _same(kafka_oracle, sink, "--describe", "--name", name)
    assert [name in listed for listed in _lists(kafka_oracle, sink)] == [True, True]
    _same(kafka_oracle, sink, "--delete", "--name", name)
    _same(kafka_oracle, sink, "--describe", "--name", name)
    assert [name in listed for listed in _lists(kafka_oracle, sink)] == [False, False]


def _lists(oracle: KafkaOracle, sink: Running) -> list[list[str]]:
    """``--list`` on each, one name a line. The sink also lists its bootstrap subscriptions (here the
    embedded default's ``kafka-client-metrics``), which a broker does not have."""
    runs = oracle.both("kafka-client-metrics", sink.kafka_port, "--list")
    assert [run.status for run in runs] == [0, 0]
    return [run.stdout.split() for run in runs]


@pytest.mark.parametrize(
    "args",
    [
        ["--alter", "--name", "bad-interval", "--interval", "5"],
        ["--alter", "--name", "bad-interval", "--interval", "3600001"],
        ["--alter", "--name", "bad-interval", "--interval", "0"],
        ["--alter", "--name", "bad-selector", "--match", "client_nope=x"],
        ["--alter", "--name", "bad-regex", "--match", "client_id=["],
        ["--alter", "--name", "no-equals", "--match", "client_id"],
        ["--alter", "--name", "bad-port", "--match", "client_source_port=x"],
        ["--alter", "--name", "empty-value", "--match", "client_id="],
        ["--delete", "--name", "never-made"],
        ["--describe", "--name", "never-made"],
        ["--alter", "--generate-name", "--name", "both"],
        ["--alter"],
        ["--list", "--name", "x"],
    ],
    ids=" ".join,
)
def test_a_refused_change_answers_the_same_status_and_message_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, args: list[str]
) -> None:
    _same(kafka_oracle, sink, *args)
