"""Telemetry forwarded by brokers and collectors lands under the right client (issue 19): exports shaped
as each known forwarder builds them, and Collector-style batches of several clients, through the real
OTLP gRPC and HTTP receivers; then decoded and rolled up by client and by quota entity."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from prometheus_client.parser import text_string_to_metric_families

from exporters import InMemoryExporter, TelemetryPush
from exporters.delta.schema import pushes_to_table
from ingest.proto import client_telemetry_pb2 as pb
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.authentication import Authenticator
from ingest.wire import CLIENT_ID_HEADER, OTLP_METRICS_PATH
from quotas import DEFAULT, ClientQuotaEntity
from spark_jobs.transforms.decode import decode_batches
from subscriptions import kafka_uuid_string
from tests.support.clock import FakeClock
from tests.support.forwarders import (
    FIXTURES,
    FORWARDERS,
    Client,
    collector_batch,
    librdkafka_metrics,
    points_of,
    strimzi_via_collector,
)
from tests.support.otlp import sdk_metrics
from tests.support.pipeline import kafka_pipeline
from tests.support.rollup_reference import client_rows, entity_rows
from tests.support.servers import Endpoints, serve_both

pytestmark = pytest.mark.integration

BROKER_TOKEN = "t0k3n-kafka-broker"
BROKER = "User:kafka-broker"
ALICE = Client(uuid.UUID("69577f7f-3be2-4464-a012-e016358e6630"), "payments-api", "alice")
BOB = Client(uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100"), "billing", "bob", address="10.9.8.7")
FROM_BROKER = (("authorization", f"Bearer {BROKER_TOKEN}"),)
OTHER_BROKER_TOKEN = "t0k3n-kafka-broker-2"
OTHER_BROKER = "User:kafka-broker-2"
"""Another broker's plugin, with a principal of its own."""
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@dataclass
class Sink:
    endpoints: Endpoints
    pipeline: TelemetryPipeline
    exporter: InMemoryExporter
    clock: FakeClock

    def landed(self) -> dict[uuid.UUID, TelemetryPush]:
        return {p.context.client_instance_id: p for p in self.exporter.pushes}

    async def scrape(self, name: str) -> float:
        text = (await self.endpoints.http.get("/metrics")).text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


@pytest.fixture
async def sink(tmp_path: Path) -> AsyncIterator[Sink]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        f'"{BROKER_TOKEN}": "{BROKER}"\n"{OTHER_BROKER_TOKEN}": "{OTHER_BROKER}"\n'
        '"t0k3n-mallory": "User:mallory"\n'
    )
    clock, exporter = FakeClock(), InMemoryExporter()
    authenticator = Authenticator(str(tokens), trusted_forwarders=[BROKER, OTHER_BROKER])
    pipeline = kafka_pipeline(clock, exporter, authenticator=authenticator)
    pipeline.quotas.alter(ClientQuotaEntity(DEFAULT, None), "producer_byte_rate", 1e12)  # entities per user
    async with serve_both(pipeline) as endpoints:
        yield Sink(endpoints, pipeline, exporter, clock)


def _row(push: TelemetryPush) -> tuple[Any, ...]:
    c = push.context
    return (c.client_id, c.principal, c.client_source_address, dict(c.quota_tags))


@pytest.mark.parametrize("forwarder", list(FORWARDERS))
async def test_each_forwarders_export_lands_under_its_client(sink: Sink, forwarder: str) -> None:
    export = FORWARDERS[forwarder](ALICE, librdkafka_metrics()).SerializeToString()
    status, _, _ = await sink.endpoints.otlp_export(export, FROM_BROKER)
    assert status is grpc.StatusCode.OK
    (push,) = sink.exporter.pushes
    names_principal = forwarder in ("confluent_tutorial", "monedula")
    names_address = forwarder != "instaclustr"
    assert _row(push) == (
        "payments-api",
        ALICE.principal if names_principal else BROKER,
        ALICE.address if names_address else "127.0.0.1",
        {"user": "alice" if names_principal else "kafka-broker", "client-id": ""},
    )
    if forwarder == "instaclustr":  # no instance id sent: a stable derived one
        await sink.endpoints.otlp_export(export, FROM_BROKER)
        assert len({p.context.client_instance_id for p in sink.exporter.pushes}) == 1
        assert push.context.client_instance_id != ALICE.instance_id
        assert push.context.client_software_name == "librdkafka"
    else:
        assert push.context.client_instance_id == ALICE.instance_id


async def test_a_collector_batch_lands_one_row_per_client_with_each_clients_telemetry(sink: Sink) -> None:
    metrics = librdkafka_metrics()
    exports = [FORWARDERS["confluent_tutorial"](c, metrics) for c in (ALICE, BOB, ALICE)]
    answer = await sink.endpoints.http.post(
        OTLP_METRICS_PATH,
        content=collector_batch(exports),
        headers={"Authorization": f"Bearer {BROKER_TOKEN}", **PROTOBUF},
    )
    assert answer.status_code == 200
    assert ExportMetricsServiceResponse.FromString(answer.content) == ExportMetricsServiceResponse()
    landed = sink.landed()
    assert set(landed) == {ALICE.instance_id, BOB.instance_id}
    assert _row(landed[BOB.instance_id]) == (
        "billing",
        "User:bob",
        "10.9.8.7",
        {"user": "bob", "client-id": ""},
    )
    for client, resources in ((ALICE, 2), (BOB, 1)):
        data = MetricsData.FromString(landed[client.instance_id].payload)
        assert len(data.resource_metrics) == resources
        assert points_of(data.resource_metrics) == resources * points_of(metrics.resource_metrics)


async def test_strimzi_labels_through_a_collector_split_into_one_row_per_client(sink: Sink) -> None:
    metrics = librdkafka_metrics()
    status, _, _ = await sink.endpoints.otlp_export(
        strimzi_via_collector([ALICE, BOB], metrics).SerializeToString(), FROM_BROKER
    )
    assert status is grpc.StatusCode.OK
    landed = sink.landed()
    assert {i: _row(p)[:2] for i, p in landed.items()} == {
        ALICE.instance_id: ("payments-api", "User:alice"),
        BOB.instance_id: ("billing", "User:bob"),
    }
    for push in landed.values():
        assert points_of(MetricsData.FromString(push.payload).resource_metrics) == points_of(
            metrics.resource_metrics
        )


async def test_a_principal_in_labels_is_ignored_and_counted_from_an_untrusted_sender(sink: Sink) -> None:
    metrics = librdkafka_metrics()
    for client, who in ((ALICE, ()), (BOB, (("authorization", "Bearer t0k3n-mallory"),))):
        export = FORWARDERS["confluent_tutorial"](client, metrics).SerializeToString()
        assert (await sink.endpoints.otlp_export(export, who))[0] is grpc.StatusCode.OK
    assert [p.context.principal for p in sink.exporter.pushes] == ["User:ANONYMOUS", "User:mallory"]
    assert await sink.scrape("telemetry_sink_otlp_principals_ignored_total") == 2


async def test_a_forwarded_client_over_its_own_quota_is_left_out_while_the_others_land(sink: Sink) -> None:
    """Each client of a trusted forwarder's batch is recorded in its own quota entity (the asserted
    principal and client id): alice over hers is left out (reported, not retried: the batch is
    answered as landed) while she is throttled; bob and the forwarder are never throttled for her."""
    sink.pipeline.quotas.alter(ClientQuotaEntity("alice", None), "producer_byte_rate", 1)
    metrics = librdkafka_metrics()
    batch = collector_batch([FORWARDERS["monedula"](c, metrics) for c in (ALICE, BOB)])
    status, _, _ = await sink.endpoints.otlp_export(batch, FROM_BROKER)
    assert status is grpc.StatusCode.OK  # alice's push that went over lands: the next is throttled
    assert sorted(p.context.quota_tags["user"] for p in sink.exporter.pushes) == ["alice", "bob"]
    status, reply, _ = await sink.endpoints.otlp_export(batch, FROM_BROKER)
    assert status is grpc.StatusCode.OK
    partial = ExportMetricsServiceResponse.FromString(reply).partial_success
    assert partial.rejected_data_points == points_of(metrics.resource_metrics)
    assert "over quota" in partial.error_message
    assert [p.context.client_id for p in sink.exporter.pushes] == ["payments-api", "billing", "billing"]
    assert await sink.scrape("telemetry_sink_forwarded_over_quota_total") == 1
    assert sink.pipeline.holds.remaining_ms(ALICE.principal, "payments-api", sink.clock.now_ms()) > 0
    alone = collector_batch([FORWARDERS["monedula"](ALICE, metrics)])
    status, reply, _ = await sink.endpoints.otlp_export(alone, FROM_BROKER)  # only her: still not retried
    assert status is grpc.StatusCode.OK
    assert ExportMetricsServiceResponse.FromString(reply).partial_success.rejected_data_points > 0
    assert not sink.pipeline.holds.remaining_ms(BROKER, "", sink.clock.now_ms())


async def test_one_client_whose_labels_no_row_can_hold_is_refused_alone(sink: Sink) -> None:
    metrics = librdkafka_metrics()
    broken = Client(uuid.UUID(int=99), "bad\x01id", "eve")
    batch = collector_batch([FORWARDERS["monedula"](c, metrics) for c in (ALICE, broken, BOB)])
    status, reply, _ = await sink.endpoints.otlp_export(batch, FROM_BROKER)
    assert status is grpc.StatusCode.OK
    partial = ExportMetricsServiceResponse.FromString(reply).partial_success
    assert partial.rejected_data_points == points_of(metrics.resource_metrics)
    assert "1 clients refused" in partial.error_message
    assert set(sink.landed()) == {ALICE.instance_id, BOB.instance_id}


async def test_an_untrusted_sender_cannot_land_under_an_instance_another_principal_created(
    sink: Sink,
) -> None:
    got = await sink.endpoints.stub.GetTelemetrySubscriptions(
        pb.GetTelemetrySubscriptionsRequest(), metadata=(("authorization", "Bearer t0k3n-mallory"),)
    )
    owned = Client(uuid.UUID(bytes=got.client_instance_id), "victim", "mallory")
    export = FORWARDERS["confluent_tutorial"](owned, librdkafka_metrics()).SerializeToString()
    anonymous = await sink.endpoints.http.post(OTLP_METRICS_PATH, content=export, headers=PROTOBUF)
    assert anonymous.status_code == 403  # the label principal is not believed: User:ANONYMOUS
    status, _, _ = await sink.endpoints.otlp_export(export, FROM_BROKER)  # the broker vouches for mallory
    assert status is grpc.StatusCode.OK
    assert [p.context.principal for p in sink.exporter.pushes] == ["User:mallory"]


async def test_request_headers_name_the_client_for_every_resource(sink: Sink) -> None:
    batch = collector_batch([FORWARDERS["instaclustr"](c, librdkafka_metrics()) for c in (ALICE, BOB)])
    status, _, _ = await sink.endpoints.otlp_export(batch, (*FROM_BROKER, (CLIENT_ID_HEADER, "from-header")))
    assert status is grpc.StatusCode.OK
    assert [p.context.client_id for p in sink.exporter.pushes] == ["from-header"]  # one client: one row


async def test_rollups_of_a_batched_export_are_by_each_client_and_its_entity(sink: Sink) -> None:
    metrics = librdkafka_metrics()
    batch = collector_batch([FORWARDERS["confluent_tutorial"](c, metrics) for c in (ALICE, BOB)])
    assert (await sink.endpoints.otlp_export(batch, FROM_BROKER))[0] is grpc.StatusCode.OK
    bronze = pushes_to_table(sink.exporter.pushes, "forwarded", 0)
    points = [
        row
        for batch_ in decode_batches(bronze.to_batches())
        for row in pa.Table.from_batches([batch_]).to_pylist()
    ]
    landed_ids = set(bronze.column("client_instance_id").to_pylist())
    assert len(landed_ids) == 2
    assert {r["client_instance_id"] for r in client_rows(points, "1m")} == landed_ids
    entities = {r["quota_entity"] for r in entity_rows(points, "1m")}
    assert entities == {"client-id=,user=alice", "client-id=,user=bob"}


@pytest.mark.parametrize("tolerant", [False, True])
async def test_raw_forwarders_bodies_land_only_with_tolerant_intake_and_each_repair_is_counted(
    tolerant: bool,
) -> None:
    """A 3.7 broker's plugin posting the client's zstd bytes as they came, and one posting the payload
    followed by zero padding, over HTTP and gRPC."""
    raw = (FIXTURES / "librdkafka-producer-push001-zstd.bin").read_bytes()
    padded = librdkafka_metrics().SerializeToString() + bytes(64)
    clock, exporter = FakeClock(), InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter, otlp_tolerant_intake=tolerant)
    async with serve_both(pipeline) as endpoints:
        sink = Sink(endpoints, pipeline, exporter, clock)
        for body in (raw, padded):
            answer = await endpoints.http.post(OTLP_METRICS_PATH, content=body, headers=PROTOBUF)
            assert answer.status_code == (200 if tolerant else 400)
            status, _, _ = await endpoints.otlp_export(body)
            assert status is (grpc.StatusCode.OK if tolerant else grpc.StatusCode.INVALID_ARGUMENT)
        repairs = "telemetry_sink_otlp_repairs_total"
        assert await sink.scrape(repairs) == (4 if tolerant else 0)
    assert len(exporter.pushes) == (4 if tolerant else 0)
    for push in exporter.pushes:
        assert MetricsData.FromString(push.payload) == librdkafka_metrics()


async def test_an_sdk_built_collector_batch_of_several_clients_lands_one_row_each(sink: Sink) -> None:
    """Each client's telemetry collected and encoded by the OpenTelemetry SDK, its KIP-714 labels as
    resource attributes, several clients batched into one request as a Collector does."""
    clients = [ALICE, BOB, Client(uuid.UUID(int=3), "orders", "carol")]
    requests = [
        encode_metrics(
            sdk_metrics(
                "kafka-client",
                client_instance_id=kafka_uuid_string(c.instance_id),
                client_id=c.client_id,
                principal=c.user,
            )
        )
        for c in clients
    ]
    batch = collector_batch([MetricsData(resource_metrics=r.resource_metrics) for r in requests])
    answer = await sink.endpoints.http.post(
        OTLP_METRICS_PATH, content=batch, headers={"Authorization": f"Bearer {BROKER_TOKEN}", **PROTOBUF}
    )
    assert answer.status_code == 200
    landed = sink.landed()
    assert {i: _row(p)[:2] for i, p in landed.items()} == {
        c.instance_id: (c.client_id, c.principal) for c in clients
    }
    for client in clients:
        (resource_metrics,) = MetricsData.FromString(landed[client.instance_id].payload).resource_metrics
        names = {a.key: a.value.string_value for a in resource_metrics.resource.attributes}
        assert names["client_id"] == client.client_id


async def test_a_push_labelled_terminating_lands_as_its_clients_last(sink: Sink) -> None:
    """The broker plugin says so on a push's first ResourceMetrics (``kafka.push.terminating``); the
    client's row is the terminating one even when another push of it came first in the export."""
    metrics = librdkafka_metrics()
    last = FORWARDERS["monedula"](ALICE, metrics)
    flag = KeyValue(key="kafka.push.terminating", value=AnyValue(bool_value=True))
    last.resource_metrics[0].resource.attributes.append(flag)
    not_last = FORWARDERS["monedula"](BOB, metrics)
    not_last.resource_metrics[0].resource.attributes.append(
        KeyValue(key="kafka.push.terminating", value=AnyValue(bool_value=False))
    )
    batch = collector_batch([FORWARDERS["monedula"](ALICE, metrics), last, not_last])
    status, _, _ = await sink.endpoints.otlp_export(batch, FROM_BROKER)
    assert status is grpc.StatusCode.OK
    assert {i: p.context.terminating for i, p in sink.landed().items()} == {
        ALICE.instance_id: True,
        BOB.instance_id: False,
    }


async def test_a_client_that_moves_to_a_broker_with_another_principal_stays_one_client(sink: Sink) -> None:
    """Instance ownership keys on the principal the plugin asserts, not the plugin's own."""
    export = FORWARDERS["monedula"](ALICE, librdkafka_metrics()).SerializeToString()
    for token in (BROKER_TOKEN, OTHER_BROKER_TOKEN):
        status, _, _ = await sink.endpoints.otlp_export(export, (("authorization", f"Bearer {token}"),))
        assert status is grpc.StatusCode.OK
    assert [(p.context.client_instance_id, p.context.principal) for p in sink.exporter.pushes] == [
        (ALICE.instance_id, ALICE.principal)
    ] * 2
