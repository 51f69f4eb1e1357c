"""The telemetry APIs on the wire: the same subscriptions set with ``kafka-client-metrics.sh`` on the real
broker and on the sink, then the same client (client id, software name and version, instance id) asks
both which metrics to send (subscription id, metrics, interval, compression types, delta temporality
and max bytes must be the same) and pushes to both (the same answers, push by push)
(docs/kafka-oracle.md)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.static.primitive import i8

from tests.support.kafka import KafkaClient, push_request
from tests.support.kafka_broker import KafkaOracle
from tests.support.otlp import metrics_data
from tests.support.process import Running

pytestmark = pytest.mark.integration

SUBSCRIPTIONS = {
    # the sink's bootstrap subscription, made on the broker too
    "kafka-client-metrics": ["--metrics", "org.apache.kafka.", "--interval", "30000"],
    "apps": ["--metrics", "org.apache.kafka.producer.,org.apache.kafka.consumer.", "--interval", "5000",
             "--match", "client_id=app-.*"],
    "python": ["--metrics", "org.apache.kafka.producer.record", "--interval", "1000", "--match",
               "client_software_name=confluent-kafka-python,client_software_version=2\\..*"],
    "exact": ["--metrics", "org.apache.kafka.consumer.fetch.manager.fetch.latency.avg",
              "--interval", "120000", "--match", "client_id=billing"],
}  # fmt: skip


@pytest.fixture(scope="module")
def subscribed(kafka_oracle: KafkaOracle, sink: Running) -> Iterator[None]:
    """Both hold exactly ``SUBSCRIPTIONS`` (the broker is shared: what other tests left is removed)."""
    tool = "kafka-client-metrics"
    listed = kafka_oracle.tools.run(tool, "--bootstrap-server", kafka_oracle.broker.bootstrap, "--list")
    for name in listed.stdout.split():
        kafka_oracle.tools.run(
            tool, "--bootstrap-server", kafka_oracle.broker.bootstrap, "--delete", "--name", name
        )
    for name, args in SUBSCRIPTIONS.items():
        kafka_oracle.same(tool, sink.kafka_port, "--alter", "--name", name, *args)
    yield
    for name in SUBSCRIPTIONS:
        kafka_oracle.tools.run(
            tool, "--bootstrap-server", kafka_oracle.broker.bootstrap, "--delete", "--name", name
        )


async def _get(port: int, client_id: str, software: tuple[str, str], instance_id: uuid.UUID | None) -> Any:
    client = await KafkaClient.connect(port)
    try:
        name, version = software
        await client.request(
            ApiVersionsRequest(client_software_name=name, client_software_version=version), client_id
        )
        return await client.request(
            GetTelemetrySubscriptionsRequest(client_instance_id=instance_id), client_id
        )
    finally:
        client.close()


def _answer(response: Any) -> tuple[Any, ...]:
    return (
        int(response.error_code),
        int(response.subscription_id),
        sorted(response.requested_metrics),
        response.push_interval.total_seconds(),
        sorted(int(c) for c in response.accepted_compression_types),
        response.delta_temporality,
        int(response.telemetry_max_bytes),
    )


@pytest.mark.parametrize(
    ("client_id", "software"),
    [
        ("app-orders", ("apache-kafka-java", "4.4.0")),
        ("billing", ("apache-kafka-java", "4.4.0")),
        ("billing-2", ("confluent-kafka-python", "2.5.0")),
        ("app-x", ("confluent-kafka-python", "2.5.0")),
        ("other", ("confluent-kafka-python", "3.0.0")),
        ("", ("librdkafka", "2.10.0")),
    ],
)
async def test_a_client_gets_the_same_subscription_from_the_sink_as_from_kafka(
    kafka_oracle: KafkaOracle, sink: Running, subscribed: None, client_id: str, software: tuple[str, str]
) -> None:
    # Each side's first Get of the instance: the broker's gives the id (a second Get at once would be
    # throttled, too early), which the sink adopts as the client's own on its first Get.
    kafka = await _get(kafka_oracle.broker.plaintext_port, client_id, software, None)
    ours = await _get(sink.kafka_port, client_id, software, kafka.client_instance_id)
    assert _answer(ours) == _answer(kafka)


def _push(instance_id: uuid.UUID, subscription_id: int, **fields: Any) -> PushTelemetryRequest:
    request = push_request(instance_id, subscription_id, metrics_data())
    return dataclasses.replace(request, **fields)


async def _pushes(
    port: int, instance_id: uuid.UUID | None, steps: list[dict[str, Any]]
) -> tuple[uuid.UUID, list[int]]:
    """One connection: the client's first Get of its instance (``None``: the server gives the id), then
    each push of ``steps`` (fields over a valid push of the subscription the Get gave;
    ``subscription_offset`` added to its id), back to back: the instance id and the error codes."""
    client = await KafkaClient.connect(port)
    try:
        await client.request(
            ApiVersionsRequest(client_software_name="apache-kafka-java", client_software_version="4.4.0"),
            "app-gate",
        )
        got = await client.request(
            GetTelemetrySubscriptionsRequest(client_instance_id=instance_id), "app-gate"
        )
        instance_id = got.client_instance_id if instance_id is None else instance_id
        codes = []
        for step in steps:
            fields = dict(step)
            subscription_id = int(got.subscription_id) + fields.pop("subscription_offset", 0)
            pushed = await client.request(_push(instance_id, subscription_id, **fields), "app-gate")
            codes.append(int(pushed.error_code))
        return instance_id, codes
    finally:
        client.close()


@pytest.mark.parametrize(
    "steps",
    [
        [{}, {}],
        [{"subscription_offset": 1}],
        [{"compression_type": i8(9)}],
        [{"metrics": b"\\0" * (1024 * 1024 + 1)}],
        [{"terminating": True}, {"terminating": True}, {}],
    ],
    ids=["first push, then too early", "unknown subscription id", "unknown compression", "too large",
         "terminating, twice, then a push"],
)  # fmt: skip
async def test_pushes_are_gated_as_kafka_gates_them(
    kafka_oracle: KafkaOracle, sink: Running, subscribed: None, steps: list[dict[str, Any]]
) -> None:
    # Each side's first Get of the instance (a second Get at once would be too early on the broker):
    # the broker's gives the id, which the sink adopts as the client's own.
    instance_id, kafka = await _pushes(kafka_oracle.broker.plaintext_port, None, steps)
    _, ours = await _pushes(sink.kafka_port, instance_id, steps)
    assert ours == kafka
