"""``kafka-configs.sh`` (Kafka's ``ConfigCommand``, from Kafka 4.4's jars) on dynamic broker configs
and client quotas, against the real broker and the sink's Kafka listener: the same exit status, output
and error (its exception and message) for the same arguments; and AlterClientQuotas removals the tool
will not send, on the wire (docs/kafka-oracle.md)."""

from __future__ import annotations

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.static.primitive import f64

from tests.support.kafka_broker import KafkaOracle, ToolRun
from tests.support.process import Running

pytestmark = pytest.mark.integration

BROKER_DEFAULT = ["--entity-type", "brokers", "--entity-default"]
USER_Q = ["--entity-type", "users", "--entity-name", "q"]
CLIENT_Q = ["--entity-type", "clients", "--entity-name", "q"]
IP = ["--entity-type", "ips", "--entity-name", "10.1.2.3"]


def _answer(run: ToolRun) -> tuple[int, str, str]:
    """Status, output, and the error: the line naming the exception and its message (the line before it
    quotes the arguments, ports included; the ones after are the tool's own stack). A described
    entity's quotas are sorted: a broker sends them in its hash map's order, the sink by name
    (docs/kafka-oracle.md)."""
    errors = [line for line in run.stderr.splitlines() if line.startswith("java.util.concurrent.")]
    lines = []
    for line in run.stdout.splitlines(keepends=True):
        head, are, quotas = line.partition(" are ")
        lines.append(head + are + ", ".join(sorted(quotas.rstrip("\n").split(", "))) + "\n" if are else line)
    return run.status, "".join(lines), errors[0] if errors else run.stderr


def _both(
    oracle: KafkaOracle, sink: Running, *args: str
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    kafka, ours = oracle.both("kafka-configs", sink.kafka_port, *args)
    return _answer(kafka), _answer(ours)


def _same(oracle: KafkaOracle, sink: Running, *args: str) -> tuple[int, str, str]:
    kafka, ours = _both(oracle, sink, *args)
    assert ours == kafka, args
    return kafka


@pytest.mark.parametrize(
    "config",
    [
        "max.connections=-1",
        "max.connections=lots",
        "max.connections.per.ip=-1",
        "max.connection.creation.rate=-1",
        "max.connection.creation.rate=0",
        "max.connections.per.ip.overrides=10.0.0.1:x",
    ],
)
def test_KF3_C_11_a_refused_broker_config_answers_invalid_request_in_the_brokers_words(
    kafka_oracle: KafkaOracle, sink: Running, config: str
) -> None:
    status, _, error = _same(kafka_oracle, sink, "--alter", *BROKER_DEFAULT, "--add-config", config)
    assert status == 1
    assert "InvalidRequestException" in error


def test_a_connection_limit_is_set_and_removed_as_on_a_broker(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    for change in (["--add-config", "max.connections=100000"], ["--delete-config", "max.connections"]):
        assert _same(kafka_oracle, sink, "--alter", *BROKER_DEFAULT, *change)[0] == 0


def test_only_the_connection_keys_are_dynamic_on_the_sink(kafka_oracle: KafkaOracle, sink: Running) -> None:
    """A deliberate difference (docs/kafka-oracle.md): a broker changes many configs at run time, the
    sink only its connection limits, and it refuses the others as a broker refuses a static key."""
    kafka, ours = _both(kafka_oracle, sink, "--alter", *BROKER_DEFAULT, "--add-config", "num.io.threads=4")
    assert kafka[0] == 0
    assert ours[0] == 1
    assert "InvalidRequestException: Cannot update these configs dynamically: num.io.threads" in ours[2]
    _both(kafka_oracle, sink, "--alter", *BROKER_DEFAULT, "--delete-config", "num.io.threads")


@pytest.mark.parametrize(
    "entity",
    [
        ["--entity-type", "clients", "--entity-default"],
        ["--entity-type", "clients", "--entity-name", "oracle-app"],
        ["--entity-type", "users", "--entity-name", "oracle-quota-user"],
        ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default"],
        [
            "--entity-type",
            "users",
            "--entity-name",
            "oracle-quota-user",
            "--entity-type",
            "clients",
            "--entity-name",
            "oracle-app",
        ],
    ],
    ids=["default client", "client", "user", "default user and client", "user and client"],
)
def test_a_client_quotas_life_reads_the_same_from_the_sink_as_from_kafka(
    kafka_oracle: KafkaOracle, sink: Running, entity: list[str]
) -> None:
    quotas = "producer_byte_rate=1048576,request_percentage=25,controller_mutation_rate=10"
    assert _same(kafka_oracle, sink, "--alter", *entity, "--add-config", quotas)[0] == 0
    _same(kafka_oracle, sink, "--describe", *entity)
    assert _same(kafka_oracle, sink, "--alter", *entity, "--delete-config", "request_percentage")[0] == 0
    _same(kafka_oracle, sink, "--describe", *entity)
    _same(
        kafka_oracle,
        sink,
        "--alter",
        *entity,
        "--delete-config",
        "producer_byte_rate,controller_mutation_rate",
    )
    _same(kafka_oracle, sink, "--describe", *entity)


def test_an_ip_quota_reads_the_same_from_the_sink_as_from_kafka(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    for entity in (
        ["--entity-type", "ips", "--entity-name", "10.1.2.3"],
        ["--entity-type", "ips", "--entity-default"],
    ):
        assert (
            _same(kafka_oracle, sink, "--alter", *entity, "--add-config", "connection_creation_rate=25")[0]
            == 0
        )
        _same(kafka_oracle, sink, "--describe", *entity)
        _same(kafka_oracle, sink, "--alter", *entity, "--delete-config", "connection_creation_rate")
        _same(kafka_oracle, sink, "--describe", *entity)


@pytest.mark.parametrize(
    ("entity", "config"),
    [
        (USER_Q, "producer_byte_rate=-1"),
        (USER_Q, "producer_byte_rate=0"),
        (USER_Q, "request_percentage=0"),
        (CLIENT_Q, "controller_mutation_rate=0"),
        (IP, "connection_creation_rate=-1"),
        (IP, "producer_byte_rate=5"),
        (CLIENT_Q, "connection_creation_rate=5"),
        (["--entity-type", "ips", "--entity-name", "not-an-ip"], "connection_creation_rate=5"),
        (USER_Q, "producer_byte_rate=1.5"),
        (USER_Q, "producer_byte_rate=100000000000000000000"),
        (IP, "connection_creation_rate=3000000000"),
        (IP, "connection_creation_rate=2.5"),
    ],
)
def test_a_refused_client_quota_answers_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, entity: list[str], config: str
) -> None:
    assert _same(kafka_oracle, sink, "--alter", *entity, "--add-config", config)[0] == 1


@pytest.mark.parametrize(
    ("entity_type", "name", "key"),
    [
        ("ip", "10.1.2.3", "producer_byte_rate"),
        ("client-id", "q", "connection_creation_rate"),
        ("user", "q", "request_percentage"),
        ("user", "q", "no.such.quota"),
    ],
    ids=["a client key of an IP", "an IP key of a client", "a key the user does not have", "no such key"],
)
async def test_KF3_Q4_removing_a_quota_the_entity_cannot_have_is_accepted_as_by_kafka(
    kafka_oracle: KafkaOracle, sink: Running, entity_type: str, name: str, key: str
) -> None:
    """On the wire (``kafka-configs.sh`` refuses such a removal itself, before sending it): a removal is
    not validated by Kafka's controller, whatever the key."""
    entry = alter_quotas.EntryData(
        entity=(alter_quotas.EntityData(entity_type=entity_type, entity_name=name),),
        ops=(alter_quotas.OpData(key=key, value=f64(0.0), remove=True),),
    )
    request = alter_quotas.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
    kafka, ours = await kafka_oracle.answers(sink.kafka_port, request)
    said = [[(int(e.error_code), e.error_message) for e in answer.entries] for answer in (kafka, ours)]
    assert said[1] == said[0] == [(0, None)]
