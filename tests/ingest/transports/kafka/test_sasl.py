"""SASL on the Kafka listener, frame by frame as Kafka's ``SaslServerAuthenticator`` answers them: the
handshake, the tokens in SaslAuthenticate (v1) or bare (v0), the errors UNSUPPORTED_SASL_MECHANISM,
SASL_AUTHENTICATION_FAILED and ILLEGAL_SASL_STATE, the closes, and re-authentication (KIP-368)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import scramp
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as SaslAuthenticateV0
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as SaslAuthenticateV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as SaslHandshakeV1

from ingest.security.sasl import MECHANISMS, SaslCredentials
from ingest.transports.kafka import SaslSettings
from quotas import DEFAULT, ClientQuotaEntity
from tests.support.clock import FakeClock, SteppedClock, eventually
from tests.support.kafka import KafkaClient, KafkaServed, serving_kafka

USERS = SaslCredentials({"alice": "alice-secret", "bob": "bob-secret"})
METADATA = MetadataRequest(topics=(), include_topic_authorized_operations=False)
PLAIN_ALICE = b"\0alice\0alice-secret"


@asynccontextmanager
async def sasl_listener(
    tmp_path: Path,
    *,
    mechanisms: tuple[str, ...] = MECHANISMS,
    reauth_ms: int = 0,
    clock: FakeClock | None = None,
) -> AsyncIterator[KafkaServed]:
    settings = SaslSettings(mechanisms, USERS, connections_max_reauth_ms=reauth_ms)
    async with serving_kafka(tmp_path, clock=clock, super_users=("User:alice",), sasl=settings) as served:
        yield served


async def _authenticate(client: KafkaClient, token: bytes = PLAIN_ALICE, mechanism: str = "PLAIN") -> Any:
    handshake = await client.request(SaslHandshakeV1(mechanism=mechanism))
    assert handshake.error_code == ErrorCode.none
    return await client.request(SaslAuthenticateV2(auth_bytes=token))


async def test_plain_over_saslauthenticate_then_the_apis_answer_with_the_users_principal(
    tmp_path: Path,
) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        versions = await client.request(
            ApiVersionsRequest(client_software_name="kio", client_software_version="1")
        )
        advertised = {v.api_key: (v.min_version, v.max_version) for v in versions.api_keys}
        assert (advertised[17], advertised[36]) == ((0, 1), (0, 2))
        handshake = await client.request(SaslHandshakeV1(mechanism="PLAIN"))
        assert (handshake.error_code, tuple(handshake.mechanisms)) == (ErrorCode.none, MECHANISMS)
        done = await client.request(SaslAuthenticateV2(auth_bytes=PLAIN_ALICE))
        assert (done.error_code, done.error_message, done.session_lifetime.total_seconds()) == (
            ErrorCode.none,
            "",  # as a broker answers it (tests/oracle/test_sasl_wire.py)
            0,
        )
        assert (await client.request(METADATA)).brokers
        (connection,) = served.listener._serving.values()
        assert connection.principal == "User:alice"
        assert connection.client_context("app").principal == "User:alice"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_exchange_in_two_saslauthenticate_round_trips(tmp_path: Path, mechanism: str) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        scram = scramp.ScramClient([mechanism], "bob", "bob-secret")
        first = await _authenticate(client, scram.get_client_first().encode(), mechanism)
        assert first.error_code == ErrorCode.none
        scram.set_server_first(first.auth_bytes.decode())
        final = await client.request(SaslAuthenticateV2(auth_bytes=scram.get_client_final().encode()))
        assert final.error_code == ErrorCode.none
        scram.set_server_final(final.auth_bytes.decode())  # the server proved it knows bob's credential
        (connection,) = served.listener._serving.values()
        assert connection.principal == "User:bob"


async def test_a_wrong_password_is_sasl_authentication_failed_with_kafkas_message_then_closed(
    tmp_path: Path,
) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        failed = await _authenticate(client, b"\0alice\0guess")
        assert failed.error_code == ErrorCode.sasl_authentication_failed
        assert failed.error_message == "Authentication failed: Invalid username or password"
        assert await client.closed_by_server()


async def test_a_failed_authentication_is_answered_and_closed_only_after_the_delay(tmp_path: Path) -> None:
    """Kafka's connection.failed.authentication.delay.ms (100 ms by default): the answer to a wrong
    password, and the close, wait out the delay, which slows down guessing."""
    clock = SteppedClock()
    async with sasl_listener(tmp_path, clock=clock) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV1(mechanism="PLAIN"))).error_code == ErrorCode.none
        correlation_id = client.send(SaslAuthenticateV2(auth_bytes=b"\0alice\0guess"))
        answer = asyncio.ensure_future(client.response(36, 2, correlation_id))
        await eventually(lambda: clock.pending == [100])
        assert not answer.done()  # held for the delay
        clock.advance(100)
        assert (await answer).error_code == ErrorCode.sasl_authentication_failed
        assert await client.closed_by_server()


async def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_then_closed(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path, mechanisms=("SCRAM-SHA-512",)) as served:
        client = await served.connect()
        for mechanism in ("PLAIN", "GSSAPI"):
            handshake = await client.request(SaslHandshakeV1(mechanism=mechanism))
            assert (handshake.error_code, tuple(handshake.mechanisms)) == (
                ErrorCode.unsupported_sasl_mechanism,
                ("SCRAM-SHA-512",),
            )
            assert await client.closed_by_server()
            client = await served.connect()


async def test_any_api_request_before_authentication_closes_the_connection_unanswered(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path) as served:
        for early in (METADATA, SaslAuthenticateV2(auth_bytes=PLAIN_ALICE)):
            client = await served.connect()
            client.send(early)
            assert await client.closed_by_server()
        assert served.exporter.pushes == []


async def test_a_second_apiversions_during_the_handshake_closes_the_connection(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        request = ApiVersionsRequest(client_software_name="kio", client_software_version="1")
        assert (await client.request(request)).error_code == ErrorCode.none
        client.send(request)
        assert await client.closed_by_server()


async def test_another_request_in_place_of_saslauthenticate_gets_illegal_sasl_state_then_closed(
    tmp_path: Path,
) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV1(mechanism="PLAIN"))).error_code == ErrorCode.none
        versions = await client.request(
            ApiVersionsRequest(client_software_name="kio", client_software_version="1")
        )
        assert versions.error_code == ErrorCode.illegal_sasl_state
        assert await client.closed_by_server()


async def test_v0_handshake_sends_bare_tokens_as_kafka_clients_before_kip_152(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV0(mechanism="SCRAM-SHA-256"))).error_code == ErrorCode.none
        scram = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
        first = scram.get_client_first().encode()
        client.send_raw(struct.pack(">i", len(first)) + first)
        scram.set_server_first((await client.frame()).decode())
        final = scram.get_client_final().encode()
        client.send_raw(struct.pack(">i", len(final)) + final)
        scram.set_server_final((await client.frame()).decode())
        assert (await client.request(METADATA)).brokers


async def test_v0_tokens_that_fail_close_the_connection(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV0(mechanism="PLAIN"))).error_code == ErrorCode.none
        token = b"\0alice\0guess"
        client.send_raw(struct.pack(">i", len(token)) + token)
        assert await client.closed_by_server()


async def test_reauthentication_renews_the_session_of_the_same_principal(tmp_path: Path) -> None:
    clock = FakeClock()
    async with sasl_listener(tmp_path, reauth_ms=60_000, clock=clock) as served:
        client = await served.connect()
        done = await _authenticate(client)
        assert done.session_lifetime.total_seconds() == 60  # what the client schedules its renewal by
        clock.advance(59_000)
        again = await _authenticate(client)
        assert (again.error_code, again.session_lifetime.total_seconds()) == (ErrorCode.none, 60)
        clock.advance(59_000)  # 118 s after the first exchange, 59 s after the renewal
        assert (await client.request(METADATA)).brokers


async def test_an_expired_session_is_closed_on_its_next_request(tmp_path: Path) -> None:
    clock = FakeClock()
    async with sasl_listener(tmp_path, reauth_ms=60_000, clock=clock) as served:
        client = await served.connect()
        await _authenticate(client)
        clock.advance(60_000)
        client.send(METADATA)
        assert await client.closed_by_server()


async def test_reauthentication_cannot_change_the_principal(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with sasl_listener(tmp_path, reauth_ms=60_000, clock=clock) as served:  # an expiry: renewable
        client = await served.connect()
        await _authenticate(client)
        assert (await client.request(SaslHandshakeV1(mechanism="PLAIN"))).error_code == ErrorCode.none
        correlation_id = client.send(SaslAuthenticateV2(auth_bytes=b"\0bob\0bob-secret"))
        answer = asyncio.ensure_future(client.response(36, 2, correlation_id))
        await eventually(lambda: clock.pending == [100])
        assert not answer.done()  # held for the failed-authentication delay
        clock.advance(100)
        other = await answer
        assert other.error_code == ErrorCode.sasl_authentication_failed
        assert (
            other.error_message
            == "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert await client.closed_by_server()


async def test_KF3_S14_reauthentication_with_another_mechanism_is_closed_unanswered_after_the_delay(
    tmp_path: Path,
) -> None:
    clock = SteppedClock()
    async with sasl_listener(tmp_path, reauth_ms=60_000, clock=clock) as served:
        client = await served.connect()
        await _authenticate(client)
        handshake = await client.request(SaslHandshakeV1(mechanism="SCRAM-SHA-256"))
        assert handshake.error_code == ErrorCode.none  # as a broker: the mechanism is refused later
        scram = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
        client.send(SaslAuthenticateV2(auth_bytes=scram.get_client_first().encode()))
        closed = asyncio.ensure_future(client.closed_by_server())  # False if a frame came instead
        await eventually(lambda: clock.pending == [100])
        assert not closed.done()  # held for the failed-authentication delay
        clock.advance(100)
        assert await closed


async def test_reauthentication_begins_at_most_once_a_second(tmp_path: Path) -> None:
    clock = FakeClock()
    async with sasl_listener(tmp_path, reauth_ms=60_000, clock=clock) as served:
        client = await served.connect()
        await _authenticate(client)
        assert (await _authenticate(client)).error_code == ErrorCode.none  # the first renewal
        clock.advance(999)
        again = await client.request(SaslHandshakeV1(mechanism="PLAIN"))
        assert again.error_code == ErrorCode.illegal_sasl_state  # from the APIs, as Kafka's
        assert (await client.request(METADATA)).brokers  # still authenticated and served
        clock.advance(1)
        assert (await _authenticate(client)).error_code == ErrorCode.none


async def test_a_client_that_authenticated_with_v0_gets_illegal_sasl_state_for_a_second_handshake(
    tmp_path: Path,
) -> None:
    async with sasl_listener(tmp_path) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV1(mechanism="PLAIN"))).error_code == ErrorCode.none
        assert (await client.request(SaslAuthenticateV0(auth_bytes=PLAIN_ALICE))).error_code == ErrorCode.none
        again = await client.request(SaslHandshakeV1(mechanism="PLAIN"))
        assert again.error_code == ErrorCode.illegal_sasl_state
        assert (await client.request(METADATA)).brokers  # still authenticated and served


async def test_a_listener_without_sasl_answers_sasl_requests_illegal_sasl_state(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        client = await served.connect()
        assert (
            await client.request(SaslHandshakeV1(mechanism="PLAIN"))
        ).error_code == ErrorCode.illegal_sasl_state
        answer = await client.request(SaslAuthenticateV2(auth_bytes=PLAIN_ALICE))
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert answer.error_message == "SaslAuthenticate request received after successful authentication"


async def test_describe_user_scram_credentials_over_the_wire_for_super_users_only(tmp_path: Path) -> None:
    async with sasl_listener(tmp_path) as served:
        alice = await served.connect()
        await _authenticate(alice)
        described = await alice.request(DescribeUserScramCredentialsRequest(users=None))
        assert described.error_code == ErrorCode.none
        assert {
            (r.user, tuple((i.mechanism, i.iterations) for i in r.credential_infos))
            for r in described.results
        } == {
            ("alice", ((1, 4096), (2, 4096))),
            ("bob", ((1, 4096), (2, 4096))),
        }
        bob = await served.connect()
        await _authenticate(bob, b"\0bob\0bob-secret")
        refused = await bob.request(DescribeUserScramCredentialsRequest(users=None))
        assert (refused.error_code, refused.results) == (ErrorCode.cluster_authorization_failed, ())


async def test_KF3_S4_apiversions_before_authentication_is_outside_every_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker's authenticator answers it outside ``KafkaApis``: nothing is recorded, nothing throttled,
    even with a request quota on every client; once authenticated, requests are recorded again."""
    async with sasl_listener(tmp_path) as served:
        quotas = served.pipeline.quotas
        quotas.alter(ClientQuotaEntity(client_id=DEFAULT), "request_percentage", 0.01)
        recorded: list[str] = []
        for name in ("record_request_time", "record_network_time"):
            real = getattr(quotas.request, name)

            def spy(principal: str, *args: Any, real: Any = real) -> Any:
                recorded.append(principal)
                return real(principal, *args)

            monkeypatch.setattr(quotas.request, name, spy)
        for _ in range(20):  # one ApiVersions a connection, as the authenticator allows
            client = await served.connect()
            versions = await client.request(
                ApiVersionsRequest(client_software_name="kio", client_software_version="1")
            )
            assert versions.throttle_time.total_seconds() == 0
        assert recorded == []
        await _authenticate(client)
        await client.request(METADATA)
        await eventually(lambda: "User:alice" in recorded)


async def _closed_only_after_the_delay(client: KafkaClient, clock: SteppedClock) -> None:
    """The server holds the close for connection.failed.authentication.delay.ms (100 ms), then closes."""
    await eventually(lambda: clock.pending == [100])
    closed = asyncio.ensure_future(client.closed_by_server())
    await asyncio.sleep(0)
    assert not closed.done()
    clock.advance(100)
    assert await closed


async def test_KF3_S5_a_request_before_the_handshake_is_closed_at_once_as_a_broker_closes_it(
    tmp_path: Path,
) -> None:
    """A real broker closes such a connection at once (tests/oracle/test_sasl_wire.py compares them)."""
    clock = SteppedClock()
    async with sasl_listener(tmp_path, clock=clock) as served:
        client = await served.connect()
        client.send(METADATA)
        assert await client.closed_by_server()  # the stepped clock never moved: no delay held the close
        assert clock.pending == []


async def test_KF3_S7_a_bare_v0_token_that_fails_is_closed_only_after_the_delay(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with sasl_listener(tmp_path, clock=clock) as served:
        client = await served.connect()
        assert (await client.request(SaslHandshakeV0(mechanism="PLAIN"))).error_code == ErrorCode.none
        token = b"\0alice\0guess"
        client.send_raw(struct.pack(">i", len(token)) + token)
        await _closed_only_after_the_delay(client, clock)


async def test_KF3_S15_without_a_session_expiry_a_second_handshake_is_illegal_sasl_state(
    tmp_path: Path,
) -> None:
    async with sasl_listener(tmp_path, reauth_ms=0) as served:
        client = await served.connect()
        assert (await _authenticate(client)).error_code == ErrorCode.none
        again = await client.request(SaslHandshakeV1(mechanism="PLAIN"))
        assert again.error_code == ErrorCode.illegal_sasl_state
