"""Kafka's Java client (kafka-clients 4.4.0, and the older 4.0.2 and 3.7.2, from Maven Central) pushing its
telemetry to the sink's Kafka listener: its pushes land under the client instance id the client itself
reports (``clientInstanceId()``), with its client id, principal and software name and version,
PLAINTEXT and over SASL/SCRAM (docs/kafka-oracle.md)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import USERS, KafkaOracle, java_command
from tests.support.landed import until_landed
from tests.support.process import Running, line_driven, running_sink

pytestmark = pytest.mark.integration

DEADLINE_S = 120.0
"""How long a client may take to start, push and land (seconds; usually a few)."""
SUBSCRIPTION = 'subscriptions:\n  kafka-client-metrics: {metrics: "org.apache.kafka.", interval.ms: 1000}\n'


@pytest.fixture(scope="module")
def sinks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Running]]:
    """Two sinks: one with a PLAINTEXT Kafka listener, one with SASL_PLAINTEXT (the oracle's users)."""
    workdir = tmp_path_factory.mktemp("java-client-sinks")
    users = workdir / "users.yaml"
    users.write_text("".join(f"{user}: {password}\n" for user, password in USERS.items()))
    sasl = (
        f"kafka_listener: {{port: 0, security_protocol: SASL_PLAINTEXT}}\n"
        f"security: {{sasl_users_file: {users}}}\n"
    )
    with (
        running_sink(workdir / "plain", workdir / "plain" / "data", extra=SUBSCRIPTION) as plain,
        running_sink(workdir / "sasl", workdir / "sasl" / "data", extra=SUBSCRIPTION + sasl) as scram,
    ):
        yield {"PLAINTEXT": plain, "SASL_PLAINTEXT": scram}


CLIENTS = {"4.4.0": "kafka", "4.0.2": "kafka-clients-4.0", "3.7.2": "kafka-clients-3.7"}
"""Each Java client version the tests run, and the list of ``artifacts/`` its jars are in. 3.7 is the
first with KIP-714's client telemetry."""


@pytest.mark.parametrize(
    ("version", "kind", "protocol"),
    [
        *(
            ("4.4.0", kind, protocol)
            for kind in ("producer", "consumer")
            for protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
        ),
        *((older, "producer", "SASL_PLAINTEXT") for older in ("4.0.2", "3.7.2")),
        *((older, "consumer", "PLAINTEXT") for older in ("4.0.2", "3.7.2")),
    ],
)
def test_the_java_clients_telemetry_lands_under_the_instance_id_it_reports(
    kafka_oracle: KafkaOracle, sinks: dict[str, Running], version: str, kind: str, protocol: str
) -> None:
    sink = sinks[protocol]
    configs = {
        "bootstrap.servers": f"127.0.0.1:{sink.kafka_port}",
        "client.id": f"java-{kind}",
        "security.protocol": protocol,
    }
    if protocol == "SASL_PLAINTEXT":
        configs |= {
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{USERS["alice"]}";',
        }
    with line_driven(
        [*java_command(kafka_oracle.helpers, "256m", jars=CLIENTS[version]),
         "telemetry.sink.oracle.TelemetryClient", kind, *(f"{k}={v}" for k, v in configs.items())],
    ) as client:  # fmt: skip
        assert client.stdout is not None
        said = client.stdout.readline().split()
        assert said[:1] == ["instance"], said
        instance_id = said[1]
        uuid.UUID(bytes=base64.urlsafe_b64decode(instance_id + "=="))  # Kafka's printed form
        rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 2, DEADLINE_S)
    # No terminating push is asserted: Kafka 4.4's Java client sends one only while its close has other
    # network work to do. Closed idle it goes from TERMINATING_PUSH_NEEDED to TERMINATED without sending:
    # seen for the producer against the broker and the sink alike, and for this consumer against the
    # sink (its topic does not exist there; on the broker, which creates it, the consumer sent one).
    assert {row["client_id"] for row in rows} == {f"java-{kind}"}
    assert {row["client_software_name"] for row in rows} == {"apache-kafka-java"}
    assert {row["client_software_version"] for row in rows} == {version}
    principal = "User:alice" if protocol == "SASL_PLAINTEXT" else "User:ANONYMOUS"
    assert {row["principal"] for row in rows} == {principal}
