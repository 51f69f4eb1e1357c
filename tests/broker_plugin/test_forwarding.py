"""The project's broker plugin inside a real Kafka 4.4 broker (docs/broker-plugin.md): Kafka's Java client
and librdkafka produce to the broker with a client-metrics subscription set by Kafka's own tool, the
broker hands each push to the plugin, and the plugin forwards it to a running sink as a trusted
forwarder. Their telemetry lands in Delta under the client's own instance id, client id, principal,
software name and version and source address, with the broker's node id, cluster id and listener in
the landed resource; a client that writes another identity into its own payload lands as itself."""

from __future__ import annotations

import base64
import sys
import time
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
    """The resource attributes of each of the landed payload's ResourceMetrics, the last value of a
    repeated key."""
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
    [resource] = _resources(rows[0])  # the client's one ResourceMetrics a metric, merged by the plugin
    assert (resource["client_instance_id"], resource["node_id"]) == (instance_id, "1")
    context = (resource["kafka.cluster.id"], resource["kafka.listener.name"])
    assert (*context, resource["kafka.security.protocol"], resource["kafka.push.interval.ms"]) == (
        CLUSTER_ID, protocol, protocol, 1000,
    )  # fmt: skip
    [merged] = MetricsData.FromString(rows[0]["payload"]).resource_metrics
    names = {metric.name for scope in merged.scope_metrics for metric in scope.metrics}
    assert len(names) > 50  # every metric of the push, in the one ResourceMetrics


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


async def _push_through(broker: KafkaBroker, client_id: str, payload: bytes) -> str:
    """Pushes ``payload`` to the broker as a new client ``client_id``; its instance id as it lands."""
    client = await KafkaClient.connect(broker.plaintext_port)
    try:
        got = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=None), client_id)
        assert got.error_code == 0, got
        instance_id = got.client_instance_id
        pushed = await client.request(push_request(instance_id, int(got.subscription_id), payload), client_id)
        assert pushed.error_code == 0, pushed
    finally:
        client.close()
    return kafka_uuid_string(instance_id)


async def test_a_client_cannot_name_another_identity_in_its_own_payload(
    broker: KafkaBroker, sink: Running
) -> None:
    """The plugin's labels come after the client's own resource attributes, and the sink reads a key's
    last value: the landed row is the client the broker saw (docs/broker-plugin.md)."""
    landed = await _push_through(broker, "spoofer", _spoofing_payload())
    rows = until_landed(sink.table_uri, "client_instance_id", landed, 1, DEADLINE_S)
    assert [(row["client_id"], row["principal"]) for row in rows] == [("spoofer", "User:ANONYMOUS")]
    assert {r["node_id"] for r in _resources(rows[0])} == {"1"}
    assert landed_rows(sink.table_uri, "client_id", "someone-else") == []


async def test_only_consecutive_resource_metrics_with_one_resource_are_merged(
    broker: KafkaBroker, sink: Running
) -> None:
    """Resources A, A, B, A and one with a field OTLP does not define: the plugin merges the first two
    (their scope metrics in order) and keeps the others apart, each labelled with the client's
    identity, the broker's context on the first alone, and every metric kept in order."""
    data = MetricsData()
    for host, metric in [("a", "m1"), ("a", "m2"), ("b", "m3"), ("a", "m4"), ("a", "m5")]:
        resource_metrics = data.resource_metrics.add()
        resource_metrics.resource.attributes.add(key="host", value=AnyValue(string_value=host))
        gauge = resource_metrics.scope_metrics.add().metrics.add(name=metric).gauge
        gauge.data_points.add(as_int=1, time_unix_nano=time.time_ns())
    encoded = bytearray(data.SerializeToString())
    last = MetricsData(resource_metrics=[data.resource_metrics[-1]]).SerializeToString()
    assert encoded.endswith(last)
    # field 9 (varint 1) in the last ResourceMetrics: lengthen it and append the unknown field
    encoded[-len(last) :] = bytes([last[0], last[1] + 2]) + last[2:] + bytes([9 << 3, 1])
    landed = await _push_through(broker, "merged", bytes(encoded))
    [row] = until_landed(sink.table_uri, "client_instance_id", landed, 1, DEADLINE_S)
    got = MetricsData.FromString(row["payload"]).resource_metrics
    hosts = [r["host"] for r in _resources(row)]
    metrics = [[m.name for scope in r.scope_metrics for m in scope.metrics] for r in got]
    assert list(zip(hosts, metrics, strict=True)) == [
        ("a", ["m1", "m2"]), ("b", ["m3"]), ("a", ["m4"]), ("a", ["m5"])
    ]  # fmt: skip
    assert [r["client_id"] for r in _resources(row)] == ["merged"] * 4
    assert ["kafka.cluster.id" in r for r in _resources(row)] == [True, False, False, False]
