"""The Kafka wire listener's APIs over real loopback sockets, with requests built from kio's schemas:
ApiVersions (incl. KIP-511's answer to an unsupported version), Metadata, DescribeCluster, the
telemetry RPCs through the pipeline (RPC-1, RPC-2, TEL-15, TEL-16, PD-4, PD-8), the client-quota
RPCs through the admin path (QUO-2, QUO-12), and the client text of the request header and ApiVersions
checked against ``limits:`` (F4)."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.describe_client_quotas.v1 import request as describe_v1
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.schema.metadata.v0 import request as metadata_v0
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.types import TopicName
from kio.static.primitive import f64, i8

from ingest.limits import DEFAULT_LIMITS
from ingest.transports.kafka import SUPPORTED_VERSIONS, ListenerLimits, NodeInfo
from quotas import ClientQuotaEntity
from subscriptions.errors import ClusterAuthorizationError
from tests.support.certificates import self_signed
from tests.support.clock import SteppedClock, eventually
from tests.support.kafka import IP, KafkaClient, encode_request, push_request, serving_kafka
from tests.support.otlp import metrics_data

pytestmark = pytest.mark.integration

ZERO = uuid.UUID(int=0)


async def _get(client: KafkaClient, instance_id: uuid.UUID = ZERO) -> object:
    return await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance_id))


# -- ApiVersions -------------------------------------------------------------------------------


async def test_api_versions_v3_advertises_exactly_what_is_implemented_and_records_the_software(
    tmp_path: Path,
) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(
            ApiVersionsV3(client_software_name="librdkafka", client_software_version="2.16.0")
        )
        assert answer.error_code == ErrorCode.none
        advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert advertised == dict(SUPPORTED_VERSIONS)
        assert advertised[71] == advertised[72] == (0, 0)  # both telemetry keys, or librdkafka never pushes

        got = await _get(client)
        assert got.error_code == ErrorCode.none  # type: ignore[attr-defined]
        instance = served.manager.instance(got.client_instance_id)  # type: ignore[attr-defined]
        assert instance is not None
        assert instance.context.client_software_name == "librdkafka"
        assert instance.context.client_software_version == "2.16.0"
        assert instance.context.client_id == "kio-test"
        assert instance.context.client_source_address == IP
        assert instance.context.principal == "User:ANONYMOUS"


async def test_api_versions_of_an_unsupported_version_answers_v0_with_its_own_range(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        frame = bytearray(
            encode_request(ApiVersionsV4(client_software_name="future", client_software_version="9"), 7)
        )
        frame[6:8] = struct.pack(">h", 5)  # a version after the newest the sink (and kio) knows
        client.send_raw(bytes(frame))
        answer = await client.response(18, 0, 7)  # KIP-511: a v0 body, whatever was asked
        assert answer.error_code == ErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in answer.api_keys] == [(18, 0, 4)]
        assert (await client.request(ApiVersionsV0())).error_code == ErrorCode.none  # still served


async def test_api_versions_v3_refuses_software_names_kafka_refuses(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(ApiVersionsV3(client_software_name="-bad", client_software_version="1"))
        assert answer.error_code == ErrorCode.invalid_request
        assert answer.api_keys == ()


@pytest.mark.parametrize(("name", "version"), [("n" * 129, "1"), ("librdkafka", "1" * 129)])
async def test_F4_api_versions_v3_refuses_software_over_its_limit_as_kafka_refuses_a_bad_name(
    tmp_path: Path, name: str, version: str
) -> None:
    assert DEFAULT_LIMITS.max_software_chars == 128
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(
            ApiVersionsV3(client_software_name=name, client_software_version=version)
        )
        assert (answer.error_code, answer.api_keys) == (ErrorCode.invalid_request, ())
        at_limit = ApiVersionsV3(client_software_name="n" * 128, client_software_version="1" * 128)
        assert (await client.request(at_limit)).error_code == ErrorCode.none  # the connection is served
        got = await _get(client)
        instance = served.manager.instance(got.client_instance_id)  # type: ignore[attr-defined]
        assert instance is not None
        assert instance.context.client_software_name == "n" * 128


async def test_without_api_versions_v3_the_software_is_unknown_as_in_kafka(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        got = await _get(client)
        instance = served.manager.instance(got.client_instance_id)  # type: ignore[attr-defined]
        assert instance is not None
        assert instance.context.client_software_name == "unknown"


# -- Metadata and DescribeCluster ------------------------------------------------------------


async def test_metadata_lists_this_node_at_the_address_the_client_reached(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(
            metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False)
        )
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(7, IP, served.port)]
        assert (answer.cluster_id, answer.controller_id, answer.topics) == ("test-cluster", 7, ())


async def test_metadata_answers_every_requested_topic_unknown(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        wanted = metadata_v12.MetadataRequestTopic(topic_id=None, name=TopicName("orders"))
        answer = await client.request(
            metadata_v12.MetadataRequest(topics=(wanted,), include_topic_authorized_operations=False)
        )
        assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
            ("orders", ErrorCode.unknown_topic_or_partition, ())
        ]
        old = await client.request(
            metadata_v0.MetadataRequest(topics=(metadata_v0.MetadataRequestTopic(name=TopicName("a")),))
        )
        assert [(t.name, t.error_code) for t in old.topics] == [("a", ErrorCode.unknown_topic_or_partition)]
        assert [(b.host, b.port) for b in old.brokers] == [(IP, served.port)]


async def test_metadata_v12_with_trailing_bytes_is_read_leniently(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        frame = encode_request(
            metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False), 41
        )
        client.send_raw(_resize(frame + b"\x00\x00\x00"))  # librdkafka 2.16's all-topics request does this
        answer = await client.response(3, 12, 41)
        assert [b.port for b in answer.brokers] == [served.port]


async def test_metadata_gives_the_advertised_address_when_one_is_set(tmp_path: Path) -> None:
    node = NodeInfo(3, "c", "sink.example.com", 19094)
    async with serving_kafka(tmp_path, node=node) as served:
        client = await served.connect()
        answer = await client.request(
            metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False)
        )
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(3, "sink.example.com", 19094)]


async def test_describe_cluster_describes_this_node_and_refuses_controllers(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(DescribeClusterRequest(include_cluster_authorized_operations=False))
        assert answer.error_code == ErrorCode.none
        assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [(7, IP, served.port)]
        assert (answer.cluster_id, answer.controller_id) == ("test-cluster", 7)
        controllers = await client.request(
            DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(2))
        )
        assert controllers.error_code == ErrorCode.mismatched_endpoint_type  # as a broker (tests/oracle)


# -- telemetry -------------------------------------------------------------------------------


async def test_RPC_1_2_get_and_push_go_through_the_pipeline_and_echo_the_instance_id(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        got = await _get(client)
        assert got.error_code == ErrorCode.none  # type: ignore[attr-defined]
        instance_id = got.client_instance_id  # type: ignore[attr-defined]
        assert instance_id not in (None, ZERO)
        assert got.push_interval.total_seconds() == 1.0  # type: ignore[attr-defined]
        assert got.accepted_compression_types == (4, 3, 1, 2)  # type: ignore[attr-defined]
        assert got.requested_metrics == ("org.apache.kafka.",)  # type: ignore[attr-defined]
        assert got.delta_temporality is True  # type: ignore[attr-defined]

        again = await KafkaClient.connect(served.port)
        served.clients.append(again)
        served.clock.advance(1000)
        echoed = await _get(again, instance_id)  # PD-4: the client's own id comes back
        assert echoed.client_instance_id == instance_id  # type: ignore[attr-defined]

        pushed = await client.request(push_request(instance_id, got.subscription_id, metrics_data()))  # type: ignore[attr-defined]
        assert pushed.error_code == ErrorCode.none
        assert [p.context.client_instance_id for p in served.exporter.pushes] == [instance_id]
        assert served.exporter.pushes[0].context.client_id == "kio-test"

        early = await client.request(push_request(instance_id, got.subscription_id, metrics_data()))  # type: ignore[attr-defined]
        assert early.error_code == ErrorCode.throttling_quota_exceeded  # TEL-17, with PD-7's wait
        assert early.throttle_time.total_seconds() > 0
        wrong = await client.request(push_request(instance_id, 1234, b"", terminating=True))
        assert wrong.error_code == ErrorCode.unknown_subscription_id


async def test_PD_8_instances_created_on_a_connection_are_evicted_when_it_closes(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        got = await _get(client)
        instance_id = got.client_instance_id  # type: ignore[attr-defined]
        assert served.manager.instance(instance_id) is not None
        client.close()
        await eventually(lambda: served.manager.instance(instance_id) is None)
        await eventually(lambda: served.listener.connections == 0)


async def test_TEL_16_a_push_with_a_null_instance_id_is_invalid_request_not_a_closed_connection(
    tmp_path: Path,
) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        answer = await client.request(push_request(ZERO, 0, b""))
        assert answer.error_code == ErrorCode.invalid_request
        assert (await _get(client)).error_code == ErrorCode.none  # type: ignore[attr-defined]


async def test_QUO_14_a_quota_throttle_mutes_the_connection_until_the_throttle_ends(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, {"quota.window.num": 2}, clock) as served:
        served.quotas.alter(ClientQuotaEntity(client_id="<default>"), "producer_byte_rate", 100.0)
        client = await served.connect()
        other = await served.connect()  # the same client id on another connection is not muted
        got = await _get(client)
        payload = metrics_data(points=40)
        pushed = await client.request(push_request(got.client_instance_id, got.subscription_id, payload))  # type: ignore[attr-defined]
        assert pushed.error_code == ErrorCode.none  # the push landed; its bytes were over the rate
        throttle_ms = round(pushed.throttle_time.total_seconds() * 1000)
        assert throttle_ms > 0
        assert len(served.quotas.produce.throttle_queue) == 1
        assert served.metric("throttle-time", "Produce", user="", **{"client-id": "kio-test"}) == throttle_ms

        gets_before = served.manager.stats.get_requests
        instance_id: uuid.UUID = got.client_instance_id  # type: ignore[attr-defined]
        correlation_id = client.send(GetTelemetrySubscriptionsRequest(client_instance_id=instance_id))
        assert (await other.request(ApiVersionsV0())).error_code == ErrorCode.none
        for _ in range(1000):
            await asyncio.sleep(0)
        assert served.manager.stats.get_requests == gets_before  # not read while muted

        clock.advance(throttle_ms)
        answer = await client.response(71, 0, correlation_id)
        assert answer.client_instance_id == instance_id  # read and answered once unmuted
        assert served.manager.stats.get_requests == gets_before + 1


@pytest.mark.parametrize(
    "client_id",
    ["c" * (DEFAULT_LIMITS.max_client_id_chars + 1), "tab\there", "bell\x07", "nel\x85"],
)
async def test_F4_a_client_id_over_its_limit_or_not_text_is_invalid_request_in_the_answer(
    tmp_path: Path, client_id: str
) -> None:
    """The request is answered (a Kafka client stops its telemetry on INVALID_REQUEST rather than
    reconnect forever); nothing reaches the pipeline; other requests on the connection are served."""
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        got = await _get(client)
        instance_id = got.client_instance_id  # type: ignore[attr-defined]
        refused = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=ZERO), client_id)
        assert refused.error_code == ErrorCode.invalid_request
        assert refused.client_instance_id in (None, ZERO)  # kio reads the zero uuid as null
        assert refused.requested_metrics == ()
        served.clock.advance(1000)
        push = push_request(instance_id, got.subscription_id, metrics_data())  # type: ignore[attr-defined]
        assert (await client.request(push, client_id)).error_code == ErrorCode.invalid_request
        assert served.exporter.pushes == []
        assert served.manager.stats.get_requests == 1  # only the well-named Get reached the core
        described = await client.request(
            describe_v1.DescribeClientQuotasRequest(components=(), strict=False), client_id
        )
        assert described.error_code == ErrorCode.invalid_request
        assert (described.error_message or "").startswith("ClientId ")
        entry = alter_v1.EntryData(
            entity=(alter_v1.EntityData(entity_type="user", entity_name="alice"),),
            ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
        )
        altered = await client.request(
            alter_v1.AlterClientQuotasRequest(entries=(entry,), validate_only=False), client_id
        )
        assert [e.error_code for e in altered.entries] == [ErrorCode.invalid_request]
        assert served.quotas.produce.quota_limit("User:alice", "x") is None
        metadata = await client.request(  # an API that does not use the client id ignores it
            metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False), client_id
        )
        assert metadata.cluster_id == "test-cluster"
        assert (await client.request(push)).error_code == ErrorCode.none  # its own push, well named


# -- client quotas ---------------------------------------------------------------------------


async def test_QUO_2_alter_then_describe_client_quotas_through_the_admin_path(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        entries = (
            alter_v1.EntryData(
                entity=(alter_v1.EntityData(entity_type="user", entity_name="alice"),),
                ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(1024.0), remove=False),),
            ),
            alter_v1.EntryData(
                entity=(alter_v1.EntityData(entity_type="client-id", entity_name=None),),
                ops=(alter_v1.OpData(key="request_percentage", value=f64(50.0), remove=False),),
            ),
            alter_v1.EntryData(  # refused on its own: a value must be > 0
                entity=(alter_v1.EntityData(entity_type="user", entity_name="bob"),),
                ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(-1.0), remove=False),),
            ),
            alter_v1.EntryData(  # an entity type Kafka does not know
                entity=(alter_v1.EntityData(entity_type="group", entity_name="g"),),
                ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
            ),
        )
        altered = await client.request(
            alter_v1.AlterClientQuotasRequest(entries=entries, validate_only=False)
        )
        assert [e.error_code for e in altered.entries] == [
            ErrorCode.none,
            ErrorCode.none,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ]
        assert [e.entity[0].entity_name for e in altered.entries] == ["alice", None, "bob", "g"]
        assert served.quotas.produce.quota_limit("User:alice", "x") == 1024.0  # applied from the log

        described = await client.request(describe_v1.DescribeClientQuotasRequest(components=(), strict=False))
        assert described.error_code == ErrorCode.none
        found = {
            tuple((e.entity_type, e.entity_name) for e in entry.entity): {
                v.key: v.value for v in entry.values
            }
            for entry in described.entries
        }
        assert found == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", None),): {"request_percentage": 50.0},
        }
        only_alice = await client.request(
            describe_v1.DescribeClientQuotasRequest(
                components=(describe_v1.ComponentData(entity_type="user", match_type=i8(0), match="alice"),),
                strict=True,
            )
        )
        assert len(only_alice.entries) == 1


async def test_QUO_2_client_quota_rpcs_need_a_super_user(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path, super_users=("User:admin",)) as served:
        client = await served.connect()
        described = await client.request(describe_v1.DescribeClientQuotasRequest(components=(), strict=False))
        assert described.error_code == ErrorCode.cluster_authorization_failed
        assert described.error_message == str(ClusterAuthorizationError("DESCRIBE_CONFIGS"))
        assert described.entries is None
        entry = alter_v1.EntryData(
            entity=(alter_v1.EntityData(entity_type="user", entity_name="alice"),),
            ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
        )
        malformed = alter_v1.EntryData(  # authorization comes first, as in Kafka
            entity=(alter_v1.EntityData(entity_type="group", entity_name="g"),),
            ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(-1.0), remove=False),),
        )
        altered = await client.request(
            alter_v1.AlterClientQuotasRequest(entries=(entry, malformed), validate_only=False)
        )
        assert [e.error_code for e in altered.entries] == [ErrorCode.cluster_authorization_failed] * 2
        assert {e.error_message for e in altered.entries} == {str(ClusterAuthorizationError("ALTER_CONFIGS"))}
        assert served.quotas.produce.quota_limit("User:alice", "x") is None


async def test_QUO_12_alter_client_quotas_over_the_mutation_quota_is_refused_with_a_throttle(
    tmp_path: Path,
) -> None:
    async with serving_kafka(tmp_path) as served:
        served.quotas.alter(ClientQuotaEntity(user="<default>"), "controller_mutation_rate", 1.0)
        client = await served.connect()

        def change(n: int) -> object:
            entry = alter_v1.EntryData(
                entity=(alter_v1.EntityData(entity_type="client-id", entity_name=f"c{n}"),),
                ops=(alter_v1.OpData(key="producer_byte_rate", value=f64(1.0), remove=False),),
            )
            return alter_v1.AlterClientQuotasRequest(entries=(entry,), validate_only=False)

        codes = []
        throttle = 0.0
        for n in range(13):  # a full bucket of 11 tokens; strict refuses once it is below zero (TB-4)
            answer = await client.request(change(n))
            codes.append(answer.entries[0].error_code)
            throttle = answer.throttle_time.total_seconds()
        assert codes.count(ErrorCode.none) == 12
        assert codes[-1] == ErrorCode.throttling_quota_exceeded
        assert throttle > 0


async def test_KF3_D25_a_subscription_change_over_the_mutation_quota_mutes_the_connection(
    tmp_path: Path,
) -> None:
    """As a broker's ``sendResponseMaybeThrottleWithControllerQuota``: the mutation throttle in the
    answer also mutes the connection, so a client that ignores ``throttle_time_ms`` waits anyway."""
    clock = SteppedClock()
    async with serving_kafka(tmp_path, clock=clock) as served:
        served.quotas.alter(ClientQuotaEntity(user="<default>"), "controller_mutation_rate", 1.0)
        client = await served.connect()

        def change(n: int) -> object:
            config = incremental_v1.AlterableConfig(
                name="interval.ms", config_operation=i8(0), value=str(1000 + n)
            )
            resource = incremental_v1.AlterConfigsResource(
                resource_type=i8(16), resource_name="kafka", configs=(config,)
            )
            return incremental_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)

        throttle_ms = 0
        for n in range(20):
            answer = await client.request(change(n))
            throttle_ms = round(answer.throttle_time.total_seconds() * 1000)
            if throttle_ms > 0:
                break
        assert throttle_ms > 0
        (connection,) = served.listener._serving.values()
        assert not connection._unmuted.is_set()  # muted: the next request is not read until it ends
        correlation_id = client.send(change(99))
        clock.advance(throttle_ms)
        assert (await client.response(44, 1, correlation_id)).responses[0].resource_name == "kafka"
        assert connection._unmuted.is_set()


async def test_KF3_R6_a_connection_throttled_by_two_quotas_stays_muted_for_the_longer(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, clock=clock) as served:
        client = await served.connect()
        await client.request(ApiVersionsV0())
        (connection,) = served.listener._serving.values()
        now = clock.now_ms()
        served.quotas.request.throttle("User:ANONYMOUS", "kio-test", 100, connection, now)
        served.quotas.controller_mutation.throttle("User:ANONYMOUS", "kio-test", 1000, connection, now)
        assert not connection._unmuted.is_set()
        clock.advance(100)
        await eventually(lambda: len(served.quotas.request.throttle_queue) == 0)
        assert not connection._unmuted.is_set()  # the request throttle is over, the mutation one is not
        clock.advance(900)
        await eventually(connection._unmuted.is_set)


# -- frames the listener will not answer -------------------------------------------------------


def _resize(frame: bytes) -> bytes:
    body = frame[4:]
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize(
    ("what", "frame"),
    [
        ("an api key nobody implements here (Produce)", struct.pack(">ihhih", 10, 0, 9, 1, -1)),
        ("an unsupported Metadata version", struct.pack(">ihhih", 10, 3, 13, 1, -1)),
        ("a frame shorter than a header", struct.pack(">ih", 2, 18)),
        ("a negative size", struct.pack(">i", -5)),
        ("a Get whose uuid is cut short", struct.pack(">ihhih", 14, 71, 0, 1, -1) + b"\x00" + b"\x01" * 3),
        (
            "a Metadata v10 request by topic id (ids are answered from v12)",
            encode_request(
                metadata_v10.MetadataRequest(
                    topics=(metadata_v10.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None),),
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                ),
                1,
            ),
        ),
        (
            "a Metadata request for more topics than are answered",
            encode_request(
                metadata_v12.MetadataRequest(
                    topics=tuple(
                        metadata_v12.MetadataRequestTopic(topic_id=None, name=TopicName(f"t{i}"))
                        for i in range(10_001)
                    ),
                    include_topic_authorized_operations=False,
                ),
                1,
            ),
        ),
    ],
)
async def test_frames_it_cannot_answer_close_the_connection_and_others_are_still_served(
    tmp_path: Path, what: str, frame: bytes
) -> None:
    async with serving_kafka(tmp_path) as served:
        bystander = await served.connect()
        client = await served.connect()
        client.send_raw(frame)
        assert await client.closed_by_server(), what
        assert (await bystander.request(ApiVersionsV0())).error_code == ErrorCode.none
        await eventually(lambda: served.connections.get(IP) == 1)


async def test_a_request_over_socket_request_max_bytes_closes_the_connection(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path, limits=ListenerLimits(socket_request_max_bytes=100)) as served:
        client = await served.connect()
        assert (await client.request(ApiVersionsV0())).error_code == ErrorCode.none
        client.send(push_request(uuid.uuid4(), 1, b"x" * 200))
        assert await client.closed_by_server()


async def test_a_slow_loris_request_and_an_idle_connection_are_closed(tmp_path: Path) -> None:
    limits = ListenerLimits(request_read_timeout_ms=1, connections_max_idle_ms=60_000)
    async with serving_kafka(tmp_path, limits=limits) as served:
        slow = await served.connect()
        slow.send_raw(struct.pack(">i", 50) + b"\x00\x12")  # 2 of 50 bytes, then nothing
        assert await slow.closed_by_server()
    idle_limits = ListenerLimits(connections_max_idle_ms=1)
    async with serving_kafka(tmp_path / "idle", limits=idle_limits) as served:
        idle = await served.connect()
        assert await idle.closed_by_server()
        await eventually(lambda: served.connections.get(IP) == 0)


async def test_mtls_principal_is_the_certificate_subject_and_a_client_without_one_is_refused(
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server_context.load_verify_locations(cert)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=str(cert))
    client_context.load_cert_chain(cert, key)
    async with serving_kafka(tmp_path, ssl_context=server_context) as served:
        client = await served.connect(client_context)
        got = await _get(client)
        instance = served.manager.instance(got.client_instance_id)  # type: ignore[attr-defined]
        assert instance is not None
        assert instance.context.principal == "User:CN=127.0.0.1"
        refused = await served.connect(ssl.create_default_context(cafile=str(cert)))  # no certificate
        assert await refused.closed_by_server()


async def test_AUD_D13_every_api_is_subject_to_the_request_quota_with_throttle_time_and_a_mute(
    tmp_path: Path,
) -> None:
    """Metadata (like ApiVersions, DescribeCluster and the admin APIs) records its handler time for the
    connection's client; over ``request_percentage`` the answer carries the throttle and the connection
    is muted until it ends, as a broker's sendResponseMaybeThrottle does (KIP-124)."""
    clock = SteppedClock()
    async with serving_kafka(tmp_path, clock=clock) as served:
        served.quotas.alter(ClientQuotaEntity(user="ANONYMOUS"), "request_percentage", 1e-6)
        client = await served.connect()
        metadata = metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False)
        answer = await client.request(metadata)
        throttle_ms = round(answer.throttle_time.total_seconds() * 1000)
        assert throttle_ms > 0
        assert len(served.quotas.request.throttle_queue) == 1
        correlation_id = client.send(DescribeClusterRequest(include_cluster_authorized_operations=False))
        for _ in range(1000):
            await asyncio.sleep(0)
        assert served.quotas.request.throttle_queue  # still muted: the request was not read
        clock.advance(throttle_ms)
        described = await client.response(60, 1, correlation_id)
        assert described.throttle_time.total_seconds() > 0  # answered once unmuted, and over quota still


async def test_AUD_D9_network_time_is_recorded_once_the_answer_is_written_without_a_throttle(
    tmp_path: Path,
) -> None:
    """Parsing a request, encoding and writing its answer is recorded for the client after the answer
    is written, with no quota check (Kafka's recordNoThrottle): the answer that spent it is never
    throttled for it; the client's next request is."""
    clock = SteppedClock()
    async with serving_kafka(tmp_path, clock=clock) as served:
        served.quotas.alter(ClientQuotaEntity(user="ANONYMOUS"), "request_percentage", 1.0)
        ticks = itertools.count(step=100_000_000)  # each reading of the network clock is 100 ms on
        served.listener.apis.network_clock = lambda: next(ticks)
        client = await served.connect()
        metadata = metadata_v12.MetadataRequest(topics=None, include_topic_authorized_operations=False)
        first = await client.request(metadata)
        assert first.throttle_time.total_seconds() == 0  # its own 300 ms came after its answer
        second = await client.request(metadata)
        assert second.throttle_time.total_seconds() > 0  # 300 ms in a 10 s window: 3 % of a thread


async def test_AUD_B3_consumer_byte_rate_is_accepted_and_described_but_never_throttles(
    tmp_path: Path,
) -> None:
    """A documented difference: the sink serves no fetches, so ``consumer_byte_rate`` is kept for
    Kafka's tools (set, described) and nothing is ever recorded against it."""
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        entry = alter_v1.EntryData(
            entity=(alter_v1.EntityData(entity_type="client-id", entity_name=None),),
            ops=(alter_v1.OpData(key="consumer_byte_rate", value=f64(1.0), remove=False),),
        )
        altered = await client.request(
            alter_v1.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
        )
        assert [e.error_code for e in altered.entries] == [ErrorCode.none]
        described = await client.request(describe_v1.DescribeClientQuotasRequest(components=(), strict=False))
        assert [(v.key, v.value) for e in described.entries for v in e.values] == [
            ("consumer_byte_rate", 1.0)
        ]
        got: Any = await _get(client)
        pushed = await client.request(
            push_request(got.client_instance_id, got.subscription_id, metrics_data())
        )
        assert pushed.error_code == ErrorCode.none
        assert pushed.throttle_time.total_seconds() == 0  # a push far over 1 byte/s
        assert served.quotas.fetch.entity_count == 0  # nothing recorded
