"""The project's broker plugin inside a real Kafka 4.4 broker (docs/broker-plugin.md): Kafka's Java client
and librdkafka produce to the broker with a client-metrics subscription set by Kafka's own tool, the
broker hands each push to the plugin, and the plugin forwards it to a running sink as a trusted
forwarder. Their telemetry lands in Delta under the client's own instance id, client id, principal,
software name and version and source address, with the broker's node id, cluster id and listener in
the landed resource; a client that writes another identity into its own payload lands as itself."""

from __future__ import annotations

import base64
import sys
import uuid
from pathlib import Path
from typing import Any, Final

import pytest
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from subscriptions import kafka_uuid_string
from tests.support.kafka import KafkaClient, push_request
from tests.support.kafka_broker import CLUSTER_ID, USERS, KafkaBroker, KafkaOracle, java_command
from tests.support.landed import landed_rows, until_landed
from tests.support.otlp import metrics_data
from tests.support.process import Running, line_driven

pytestmark = pytest.mark.integration

DEADLINE_S: Final = 120.0
"""How long a client may take to start, push through the broker and land (seconds; usually a few)."""
PRODUCER: Final = Path(__file__).resolve().parents[1] / "support" / "clients" / "librdkafka_producer.py"


def _resources(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The resource attributes of each of the landed payload's ResourceMetrics (a Java client sends one
    per metric), the last value of a repeated key."""
    resources = []
    for resource_metrics in MetricsData.FromString(row["payload"]).resource_metrics:
        said: dict[str, Any] = {}
        for attribute in resource_metrics.resource.attributes:
            value = attribute.value
            said[attribute.key] = getattr(value, str(value.WhichOneof("value")))
        resources.append(said)
    return resources


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_java_clients_telemetry_lands_through_the_broker_under_its_own_identity(
    kafka_oracle: KafkaOracle, broker: KafkaBroker, sink: Running, protocol: str
) -> None:
    configs = {"client.id": f"forwarded-java-{protocol.lower()}", "security.protocol": protocol}
    if protocol == "PLAINTEXT":
        configs["bootstrap.servers"] = broker.bootstrap
    else:
        configs |= {
            "bootstrap.servers": broker.sasl_bootstrap,
            "enable.idempotence": "false",  # alice has no ACL for IDEMPOTENT_WRITE on this broker
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{USERS["alice"]}";',
        }
    with line_driven(
        [*java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient", "producer",
         *(f"{k}={v}" for k, v in configs.items())],
    ) as client:  # fmt: skip
        assert client.stdout is not None
        said = client.stdout.readline().split()
        assert said[:1] == ["instance"], said
        instance_id = said[1]
        uuid.UUID(bytes=base64.urlsafe_b64decode(instance_id + "=="))
        rows = until_landed(sink.table_uri, "client_instance_id", instance_id, 2, DEADLINE_S)
    assert {row["client_id"] for row in rows} == {configs["client.id"]}
    assert {row["principal"] for row in rows} == {
        "User:alice" if protocol != "PLAINTEXT" else "User:ANONYMOUS"
    }
    assert {(row["client_software_name"], row["client_software_version"]) for row in rows} == {
        ("apache-kafka-java", "4.4.0")
    }
    assert {row["client_source_address"] for row in rows} == {"127.0.0.1"}
    assert all(row["client_source_port"] and row["client_source_port"] > 0 for row in rows)
    first, *rest = _resources(rows[0])
    assert {(r["client_instance_id"], r["node_id"]) for r in [first, *rest]} == {(instance_id, "1")}
    context = (first["kafka.cluster.id"], first["kafka.listener.name"], first["kafka.security.protocol"])
    assert (*context, first["kafka.push.interval.ms"]) == (CLUSTER_ID, protocol, protocol, 1000)
    assert not any("kafka.cluster.id" in r for r in rest)  # the broker's context on the first alone


def test_librdkafkas_telemetry_lands_through_the_broker(broker: KafkaBroker, sink: Running) -> None:
    with line_driven(
        [sys.executable, str(PRODUCER), str(broker.plaintext_port), "forwarded-librdkafka"]
    ) as client:
        assert client.stdout is not None
        said = client.stdout.readline().split()
        assert said[:1] == ["version"], said
        rows = until_landed(sink.table_uri, "client_id", "forwarded-librdkafka", 2, DEADLINE_S)
    assert {row["client_software_name"] for row in rows} == {"confluent-kafka-python"}
    assert {row["principal"] for row in rows} == {"User:ANONYMOUS"}
    assert len({row["client_instance_id"] for row in rows}) == 1


def _spoofing_payload() -> bytes:
    """A push whose own resource names another client, principal and broker: what a hostile client
    could write, since the broker does not read the payload."""
    data = MetricsData.FromString(metrics_data())
    spoofed = {
        "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "client_id": "someone-else",
        "principal": "User:admin",
        "kafka.client.principal": "User:admin",
        "node_id": "666",
    }
    for resource_metrics in data.resource_metrics:
        resource_metrics.resource.attributes.extend(
            KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in spoofed.items()
        )
    return bytes(data.SerializeToString())


async def test_a_client_cannot_name_another_identity_in_its_own_payload(
    broker: KafkaBroker, sink: Running
) -> None:
    """The plugin's labels come after the client's own resource attributes, and the sink reads a key's
    last value: the landed row is the client the broker saw (docs/broker-plugin.md)."""
    client = await KafkaClient.connect(broker.plaintext_port)
    try:
        got = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=None), "spoofer")
        assert got.error_code == 0, got
        instance_id = got.client_instance_id
        pushed = await client.request(
            push_request(instance_id, int(got.subscription_id), _spoofing_payload()), "spoofer"
        )
        assert pushed.error_code == 0, pushed
    finally:
        client.close()
    landed = kafka_uuid_string(instance_id)
    rows = until_landed(sink.table_uri, "client_instance_id", landed, 1, DEADLINE_S)
    assert [(row["client_id"], row["principal"]) for row in rows] == [("spoofer", "User:ANONYMOUS")]
    assert {r["node_id"] for r in _resources(rows[0])} == {"1"}
    assert landed_rows(sink.table_uri, "client_id", "someone-else") == []
