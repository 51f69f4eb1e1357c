"""SASL on the wire, side by side: the same handshakes, tokens and out-of-turn requests sent to the
broker's SASL_PLAINTEXT listener and to a sink's (the same users), and what each answered compared
step by step: error codes and messages, the mechanisms offered, whether the connection was closed, and
whether a failed authentication's answer or close waited out Kafka's
``connection.failed.authentication.delay.ms`` (100 ms on both: a lower bound, never an exact time).
The rows of docs/findings.md this settles are KF3-S4, KF3-S5 and KF3-S7 (docs/kafka-oracle.md)."""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import scramp
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.support.kafka import KafkaClient
from tests.support.kafka_broker import USERS, KafkaOracle
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
    """A sink whose Kafka listener is SASL_PLAINTEXT, with the broker's users and passwords."""
    workdir = tmp_path_factory.mktemp("oracle-sasl-sink")
    users = workdir / "users.yaml"
    users.write_text("".join(f"{user}: {password}\n" for user, password in USERS.items()))
    extra = (
        "kafka_listener: {port: 0, security_protocol: SASL_PLAINTEXT}\n"
        f"security: {{sasl_users_file: {users}}}\n"
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
