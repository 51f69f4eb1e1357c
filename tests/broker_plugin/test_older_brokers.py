"""The broker plugin inside a Kafka 4.0 broker, which has only the client-telemetry interface Kafka 4.2
deprecated (``ClientTelemetry``): its ``LegacyTelemetrySinkForwarder`` forwards a Java client's pushes,
which land under the client's identity as from a 4.4 broker, without the push interval that interface
does not give (docs/broker-plugin.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from tests.broker_plugin.conftest import forwarding_broker
from tests.support.kafka_broker import KafkaBroker, KafkaOracle, java_command
from tests.support.landed import until_landed
from tests.support.process import Running, line_driven

pytestmark = pytest.mark.integration

DEADLINE_S: Final = 120.0
LEGACY: Final = "telemetry.sink.forwarder.LegacyTelemetrySinkForwarder"


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, kafka_oracle: KafkaOracle, sink: Running
) -> Iterator[KafkaBroker]:
    workdir = tmp_path_factory.mktemp("plugin-broker-4.0")
    with forwarding_broker(kafka_oracle, workdir, sink, reporter=LEGACY, jars="kafka-4.0") as running:
        yield running


def _first_resource(row: dict[str, Any]) -> dict[str, Any]:
    resource = MetricsData.FromString(row["payload"]).resource_metrics[0].resource
    return {a.key: getattr(a.value, str(a.value.WhichOneof("value"))) for a in resource.attributes}


def test_a_kafka_4_0_broker_forwards_through_the_older_interface(
    kafka_oracle: KafkaOracle, broker: KafkaBroker, sink: Running
) -> None:
    command = [
        *java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.TelemetryClient", "producer",
        f"bootstrap.servers={broker.bootstrap}", "client.id=forwarded-by-4.0",
    ]  # fmt: skip
    with line_driven(command) as client:
        assert client.stdout is not None
        said = client.stdout.readline().split()
        assert said[:1] == ["instance"], said
        rows = until_landed(sink.table_uri, "client_instance_id", said[1], 2, DEADLINE_S)
    assert {(row["client_id"], row["principal"]) for row in rows} == {("forwarded-by-4.0", "User:ANONYMOUS")}
    assert {row["client_software_name"] for row in rows} == {"apache-kafka-java"}
    resource = _first_resource(rows[0])
    assert resource["node_id"] == "1"
    assert resource["kafka.listener.name"] == "PLAINTEXT"
    assert "kafka.push.interval.ms" not in resource
