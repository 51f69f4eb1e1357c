"""SASL on the wire, side by side: the same handshakes, tokens and out-of-turn requests sent to the
broker's SASL_PLAINTEXT listener and to a sink's (the same users), and what each answered compared
step by step: error codes and messages, the mechanisms offered, whether the connection was closed, and
whether a failed authentication's answer or close waited out Kafka's
``connection.failed.authentication.delay.ms`` (100 ms on both: a lower bound, never an exact time).
Both sides' sessions expire (``connections.max.reauth.ms``), so re-authentication (KIP-368) is compared too,
and, once authenticated, what a super user and another user may do on the cluster. The rows of
docs/findings.md this settles are KF3-S4, KF3-S5, KF3-S7, KF3-S8, KF3-S14 and KF3-V6
(docs/kafka-oracle.md)."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import scramp
from kio.schema.alter_client_quotas.v1 import request as alter_quotas
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10.request import MetadataRequest as MetadataV10
from kio.schema.metadata.v10.request import MetadataRequestTopic as MetadataV10Topic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import TopicName
from kio.static.primitive import f64

from tests.support.kafka import KafkaClient
from tests.support.kafka_broker import REAUTH_MS, USERS, KafkaOracle
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

DELAY_S = 0.1
"""``connection.failed.authentication.delay.ms``, Kafka's default on both sides."""
METADATA = MetadataRequest(topics=(), include_topic_authorized_operations=False)
VERSIONS = ApiVersionsRequest(client_software_name="kio", client_software_version="1")

Step = tuple[Any, ...]
Scenario = Callable[[KafkaClient], Awaitable[list[Step]]]


@pytest.fixture(scope="module")
def sasl_sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A sink whose Kafka listener is SASL_PLAINTEXT, with the broker's users and passwords, super user
    and session lifetime."""
    workdir = tmp_path_factory.mktemp("oracle-sasl-sink")
    users = workdir / "users.yaml"
    users.write_text("".join(f"{user}: {password}\n" for user, password in USERS.items()))
    extra = (
        "kafka_listener: {port: 0, security_protocol: SASL_PLAINTEXT, "
        f"connections_max_reauth_ms: {REAUTH_MS}}}\n"
        f"security: {{sasl_users_file: {users}, super_users: 'User:admin'}}\n"
    )
    with running_sink(workdir, workdir / "data", extra=extra) as running:
        yield running


# -- what a step observes ----------------------------------------------------------------------------


async def _handshake(client: KafkaClient, mechanism: str) -> Step:
    answer = await client.request(SaslHandshakeRequest(mechanism=mechanism))
    return ("handshake", int(answer.error_code), sorted(answer.mechanisms))


async def _authenticate(client: KafkaClient, token: bytes) -> tuple[Step, Any, float]:
    """SaslAuthenticate v2 with ``token``: the step, the answer, and how long the answer took."""
    started = time.monotonic()
    answer = await client.request(SaslAuthenticateRequest(auth_bytes=token))
    took_s = time.monotonic() - started
    step = (
        "authenticate",
        int(answer.error_code),
        answer.error_message,
        answer.session_lifetime.total_seconds(),
    )
    return step, answer, took_s


async def _closed(client: KafkaClient, since: float) -> Step:
    """Whether the server closed the connection, and whether it waited out the delay to do so."""
    closed = await client.closed_by_server()
    return ("closed", closed, time.monotonic() - since >= DELAY_S)


async def _served(client: KafkaClient) -> Step:
    return ("metadata answered", bool((await client.request(METADATA)).brokers))


def _bare(client: KafkaClient, token: bytes) -> None:
    """A token as SaslHandshake v0 clients send it: a size and the bytes, no Kafka header."""
    client.send_raw(struct.pack(">i", len(token)) + token)


# -- the scenarios -------------------------------------------------------------------------------------


async def _failed(steps: list[Step], started: float, took_s: float, client: KafkaClient) -> list[Step]:
    """A failed authentication's last steps: its answer waited out the delay, and the close."""
    return [*steps, ("answered after the delay", took_s >= DELAY_S), await _closed(client, started)]


def plain(user: str, password: str, authzid: str = "") -> Scenario:
    return plain_token(f"{authzid}\0{user}\0{password}".encode())


def plain_token(token: bytes) -> Scenario:
    async def exchange(client: KafkaClient) -> list[Step]:
        steps = [await _handshake(client, "PLAIN")]
        started = time.monotonic()
        step, _, took_s = await _authenticate(client, token)
        if step[1] != 0:
            return await _failed([*steps, step], started, took_s, client)
        return [*steps, step, await _served(client)]

    return exchange


def scram(mechanism: str, user: str, password: str) -> Scenario:
    async def exchange(client: KafkaClient) -> list[Step]:
        scram_client = scramp.ScramClient([mechanism], user, password)
        steps = [await _handshake(client, mechanism)]
        started = time.monotonic()
        first, answer, took_s = await _authenticate(client, scram_client.get_client_first().encode())
        steps.append(first)
        if first[1] != 0:
            return await _failed(steps, started, took_s, client)
        scram_client.set_server_first(answer.auth_bytes.decode())
        started = time.monotonic()
        final, answer, took_s = await _authenticate(client, scram_client.get_client_final().encode())
        steps.append(final)
        if final[1] != 0:
            return await _failed(steps, started, took_s, client)
        scram_client.set_server_final(answer.auth_bytes.decode())  # raises unless the server knew the key
        return [*steps, ("server proved it knows the credential", True), await _served(client)]

    return exchange


async def unsupported_mechanism(client: KafkaClient) -> list[Step]:
    started = time.monotonic()
    return [await _handshake(client, "GSSAPI"), await _closed(client, started)]


async def metadata_before_the_handshake(client: KafkaClient) -> list[Step]:
    started = time.monotonic()
    client.send(METADATA)
    return [await _closed(client, started)]


async def authenticate_before_the_handshake(client: KafkaClient) -> list[Step]:
    started = time.monotonic()
    client.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
    return [await _closed(client, started)]


async def api_versions_twice(client: KafkaClient) -> list[Step]:
    answer = await client.request(VERSIONS)
    started = time.monotonic()
    client.send(VERSIONS)
    return [("api versions", int(answer.error_code)), await _closed(client, started)]


async def api_versions_in_place_of_authenticate(client: KafkaClient) -> list[Step]:
    steps = [await _handshake(client, "PLAIN")]
    started = time.monotonic()
    answer = await client.request(VERSIONS)
    return [*steps, ("api versions", int(answer.error_code)), await _closed(client, started)]


async def v0_plain_right(client: KafkaClient) -> list[Step]:
    answer = await client.request(SaslHandshakeV0(mechanism="PLAIN"))
    _bare(client, b"\0alice\0alice-secret")
    back = await client.frame()  # PLAIN's server answer: an empty token
    return [("handshake v0", int(answer.error_code)), ("token back", back), await _served(client)]


async def v0_plain_wrong_password(client: KafkaClient) -> list[Step]:
    answer = await client.request(SaslHandshakeV0(mechanism="PLAIN"))
    started = time.monotonic()
    _bare(client, b"\0alice\0a guess")
    return [("handshake v0", int(answer.error_code)), await _closed(client, started)]


async def _logged_in(client: KafkaClient, user: str = "alice") -> list[Step]:
    steps = [await _handshake(client, "PLAIN")]
    step, _, _ = await _authenticate(client, f"\0{user}\0{USERS[user]}".encode())
    return [*steps, step]


async def reauthentication(client: KafkaClient) -> list[Step]:
    steps = await _logged_in(client)
    steps += await _logged_in(client)  # the renewal a session that expires allows
    return [*steps, await _served(client)]


async def reauthentication_twice_within_a_second(client: KafkaClient) -> list[Step]:
    steps = await _logged_in(client)
    steps += await _logged_in(client)
    steps.append(await _handshake(client, "PLAIN"))  # within a second of the renewal: for the APIs
    return [*steps, await _served(client)]


async def reauthentication_as_another_principal(client: KafkaClient) -> list[Step]:
    steps = [*await _logged_in(client), await _handshake(client, "PLAIN")]
    started = time.monotonic()
    step, _, took_s = await _authenticate(client, f"\0admin\0{USERS['admin']}".encode())
    return await _failed([*steps, step], started, took_s, client)


async def reauthentication_with_another_mechanism(client: KafkaClient) -> list[Step]:
    steps = [*await _logged_in(client), await _handshake(client, "SCRAM-SHA-256")]
    started = time.monotonic()
    client.send(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abcdefgh"))
    return [*steps, await _closed(client, started)]  # unanswered: a frame would make it "not closed"


def authorized_operations(user: str) -> Scenario:
    """What ``user`` may do on the cluster, as DescribeCluster and Metadata v10 say when asked: every
    cluster operation for a super user, none for anybody else (no ACLs on either side)."""

    async def exchange(client: KafkaClient) -> list[Step]:
        steps = await _logged_in(client, user)
        cluster = await client.request(
            DescribeClusterRequest(include_cluster_authorized_operations=True, include_fenced_brokers=True)
        )
        metadata = await client.request(
            MetadataV10(
                topics=(),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True,
                include_topic_authorized_operations=True,
            )
        )
        return [
            *steps,
            ("describe cluster", int(cluster.error_code), cluster.cluster_authorized_operations),
            ("fenced", [broker.is_fenced for broker in cluster.brokers]),
            ("metadata v10", metadata.cluster_authorized_operations),
        ]

    return exchange


SCENARIOS: dict[str, Scenario] = {
    "PLAIN, the right password": plain("alice", "alice-secret"),
    "PLAIN, a wrong password": plain("alice", "a guess"),
    "PLAIN, an unknown user": plain("mallory", "alice-secret"),
    "PLAIN, the user's own authzid": plain("alice", "alice-secret", authzid="alice"),
    "PLAIN, another authzid (KF3-S8)": plain("alice", "alice-secret", authzid="admin"),
    "PLAIN, no user name (KF3-S8)": plain("", "alice-secret"),
    "PLAIN, no password (KF3-S8)": plain("alice", ""),
    "PLAIN, two tokens (KF3-S8)": plain_token(b"alice\0alice-secret"),
    "PLAIN, four tokens (KF3-S8)": plain_token(b"\0alice\0alice-secret\0more"),
    "PLAIN, a user name that is not UTF-8": plain_token(b"\0al\xffice\0alice-secret"),
    "SCRAM-SHA-256, the right password": scram("SCRAM-SHA-256", "alice", "alice-secret"),
    "SCRAM-SHA-512, the right password": scram("SCRAM-SHA-512", "admin", "admin-secret"),
    "SCRAM-SHA-512, a wrong password": scram("SCRAM-SHA-512", "alice", "a guess"),
    "SCRAM-SHA-256, an unknown user": scram("SCRAM-SHA-256", "mallory", "a guess"),
    "an unsupported mechanism": unsupported_mechanism,
    "Metadata before the handshake": metadata_before_the_handshake,
    "SaslAuthenticate before the handshake": authenticate_before_the_handshake,
    "ApiVersions twice": api_versions_twice,
    "ApiVersions in place of SaslAuthenticate": api_versions_in_place_of_authenticate,
    "SaslHandshake v0, the right password": v0_plain_right,
    "SaslHandshake v0, a wrong password": v0_plain_wrong_password,
    "re-authentication": reauthentication,
    "re-authentication twice within a second": reauthentication_twice_within_a_second,
    "re-authentication as another principal": reauthentication_as_another_principal,
    "re-authentication with another mechanism (KF3-S14)": reauthentication_with_another_mechanism,
    "a super user's authorized operations (KF3-V6)": authorized_operations("admin"),
    "a user's authorized operations (KF3-V6)": authorized_operations("alice"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_sasl_answers_as_the_broker_answers_step_by_step(
    kafka_oracle: KafkaOracle, sasl_sink: Running, name: str
) -> None:
    seen = []
    for port in (kafka_oracle.broker.sasl_port, sasl_sink.kafka_port):
        client = await KafkaClient.connect(port)
        try:
            seen.append(await SCENARIOS[name](client))
        finally:
            client.close()
    kafka, ours = seen
    assert ours == kafka


async def test_a_topic_is_unknown_to_every_principal_where_a_broker_refuses_it_to_a_user_without_acls(
    kafka_oracle: KafkaOracle, sasl_sink: Running
) -> None:
    """A deliberate difference (docs/kafka-oracle.md): a broker with an authorizer hides whether a topic
    exists from a principal that may not describe it; the sink has no topics to hide."""
    request = MetadataV10(
        topics=(MetadataV10Topic(name=TopicName("oracle-no-such-topic"), topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=True,
    )
    seen = []
    for port in (kafka_oracle.broker.sasl_port, sasl_sink.kafka_port):
        client = await KafkaClient.connect(port)
        try:
            await _logged_in(client)
            topic = (await client.request(request)).topics[0]
            seen.append((topic.error_code, topic.topic_authorized_operations))
        finally:
            client.close()
    kafka, ours = seen
    assert kafka == (ErrorCode.topic_authorization_failed, -(2**31))
    assert ours == (ErrorCode.unknown_topic_or_partition, 0)


PROBE_CLIENT = "oracle-s4-probe"
"""The client id of the request-quota scenario below, quota'd for it alone."""


async def _request_quota(port: int, percentage: float | None) -> None:
    """Set (None: remove) the request quota of the client id ``PROBE_CLIENT``, as ``admin``."""
    entry = alter_quotas.EntryData(
        entity=(alter_quotas.EntityData(entity_type="client-id", entity_name=PROBE_CLIENT),),
        ops=(
            alter_quotas.OpData(
                key="request_percentage", value=f64(percentage or 0.0), remove=percentage is None
            ),
        ),
    )
    client = await KafkaClient.connect(port)
    try:
        await _logged_in(client, "admin")
        answer = await client.request(
            alter_quotas.AlterClientQuotasRequest(entries=(entry,), validate_only=False)
        )
        assert [int(e.error_code) for e in answer.entries] == [0], answer
    finally:
        client.close()


async def _throttled_once_authenticated(port: int) -> bool:
    """Whether an authenticated client with ``PROBE_CLIENT``'s id is throttled within 500 ApiVersions."""
    client = await KafkaClient.connect(port)
    try:
        await _logged_in(client)
        for _ in range(500):
            if (await client.request(VERSIONS, client_id=PROBE_CLIENT)).throttle_time.total_seconds() > 0:
                return True
        return False
    finally:
        client.close()


async def _throttles_before_authentication(port: int, connections: int) -> list[float]:
    """The throttle time of the pre-authentication ApiVersions of ``connections`` connections."""
    throttles = []
    for _ in range(connections):
        client = await KafkaClient.connect(port)
        try:
            answer = await client.request(VERSIONS, client_id=PROBE_CLIENT)
            throttles.append(answer.throttle_time.total_seconds())
        finally:
            client.close()
    return throttles


async def test_KF3_S4_apiversions_before_authentication_is_never_throttled_as_on_a_broker(
    kafka_oracle: KafkaOracle, sasl_sink: Running
) -> None:
    """A client id over its request quota is throttled once authenticated, on both sides; its
    ApiVersions before authentication, answered by the authenticator outside every quota, never is."""
    for port in (kafka_oracle.broker.sasl_port, sasl_sink.kafka_port):
        await _request_quota(port, 0.01)
        try:
            assert await _throttled_once_authenticated(port), port
            assert await _throttles_before_authentication(port, 20) == [0.0] * 20, port
        finally:
            await _request_quota(port, None)
