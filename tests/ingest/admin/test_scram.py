"""SCRAM credentials in the config log (KIP-554): AlterUserScramCredentials writes the salted form only,
every replica applies it, DescribeUserScramCredentials lists them, with Kafka's per-user errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import scramp

from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower
from ingest.admin.operations import SinkAdmin, SuperUserAuthorizer
from ingest.admin.scram import ScramDeletion, ScramUpsertion, UserResult
from ingest.security.sasl import SaslCredentials, create_sasl_server, scram_credential
from quotas import QuotaConfig, create_quota_managers
from subscriptions import ClientContext, ClientMetricsManager, Errors, SubscriptionStore
from tests.support.clock import FakeClock

ADMIN = ClientContext(principal="User:admin")
SHA256, SHA512 = 1, 2


def _replica(tmp_path: Path, name: str, users: dict[str, str] | None = None) -> SinkAdmin:
    clock = FakeClock()
    store, quotas = SubscriptionStore(), create_quota_managers(QuotaConfig(), clock)
    image = ConfigImage(store, quotas, credentials=SaslCredentials(users or {}))
    follower = ConfigLogFollower(ConfigLog(str(tmp_path / "config_log"), replica_id=name), image)
    return SinkAdmin(
        follower, ClientMetricsManager(store), quotas, SuperUserAuthorizer(["User:admin"]), clock.now_ms
    )


def _upsertion(user: str, password: str, mechanism: int = SHA256, iterations: int = 4096) -> ScramUpsertion:
    salt = b"twenty-bytes-of-salt" + user.encode()
    digest = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)  # what the admin client sends
    return ScramUpsertion(user, mechanism, iterations, salt, salted)


def _authenticates(
    credentials: SaslCredentials, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
) -> bool:
    client = scramp.ScramClient([mechanism], user, password)
    server = create_sasl_server(mechanism, credentials)
    try:
        first = server.evaluate(client.get_client_first().encode())
        assert first is not None
        client.set_server_first(first.decode())
        server.evaluate(client.get_client_final().encode())
    except Exception:
        return False
    return server.complete


def test_the_stored_credential_of_a_salted_password_is_rfc_5802s() -> None:
    mechanism = scramp.ScramMechanism("SCRAM-SHA-512")
    salt, stored_key, server_key, _ = mechanism.make_auth_info(
        "pw", iteration_count=4096, salt=b"0123456789abcdef"
    )
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"0123456789abcdef", 4096)
    credential = scram_credential("SCRAM-SHA-512", salt, salted, 4096)
    assert (credential.stored_key, credential.server_key) == (stored_key, server_key)


async def test_an_upserted_credential_authenticates_on_every_replica_and_is_described(tmp_path: Path) -> None:
    one, two = _replica(tmp_path, "r1"), _replica(tmp_path, "r2")
    for upsertion in (_upsertion("bob", "bob-secret"), _upsertion("bob", "b", SHA512, 8192)):
        assert await one.scram.alter(ADMIN, [], [upsertion]) == [UserResult("bob", Errors.NONE, None)]
    await two.follower.catch_up()
    for replica in (one, two):
        credentials = replica.follower.image.credentials
        assert _authenticates(credentials, "bob", "bob-secret")
        assert _authenticates(credentials, "bob", "b", "SCRAM-SHA-512")
        assert not _authenticates(credentials, "bob", "guess")
    assert two.scram.describe(ADMIN, ["bob"]) == (
        Errors.NONE,
        [UserResult("bob", Errors.NONE, None, ((SHA256, 4096), (SHA512, 8192)))],
    )
    history = await one.follower.history(-1)
    assert len(history) == 2  # one record per mechanism
    assert all(b"bob-secret" not in repr(record).encode() for record in history)


async def test_a_deletion_removes_a_users_file_credential_too(tmp_path: Path) -> None:
    admin = _replica(tmp_path, "r1", {"alice": "alice-secret"})
    credentials = admin.follower.image.credentials
    assert _authenticates(credentials, "alice", "alice-secret")
    assert await admin.scram.alter(ADMIN, [ScramDeletion("alice", SHA256)], []) == [
        UserResult("alice", Errors.NONE, None)
    ]
    assert not _authenticates(credentials, "alice", "alice-secret")
    assert _authenticates(credentials, "alice", "alice-secret", "SCRAM-SHA-512")  # only that mechanism
    later = _replica(tmp_path, "r2", {"alice": "alice-secret"})
    await later.follower.catch_up()  # a replica started later replays the deletion over its file
    assert not _authenticates(later.follower.image.credentials, "alice", "alice-secret")


@pytest.mark.parametrize(
    ("deletions", "upsertions", "error", "message"),
    [
        ([], [_upsertion("", "pw")], Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        (
            [],
            [_upsertion("carol", "pw", mechanism=0)],
            Errors.UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism",
        ),
        (
            [],
            [_upsertion("carol", "pw", iterations=4095)],
            Errors.UNACCEPTABLE_CREDENTIAL,
            "Too few iterations",
        ),
        (
            [],
            [_upsertion("carol", "pw", iterations=16385)],
            Errors.UNACCEPTABLE_CREDENTIAL,
            "Too many iterations",
        ),
        (  # one change per user and request, whatever the mechanisms (U4)
            [],
            [_upsertion("carol", "pw"), _upsertion("carol", "pw", SHA512)],
            Errors.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        ),
        (  # a user keeps its first failure: the deletion's, not the duplicate's
            [ScramDeletion("carol", SHA256)],
            [_upsertion("carol", "pw")],
            Errors.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        (
            [ScramDeletion("carol", SHA512)],
            [],
            Errors.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
    ],
)
async def test_alter_refuses_with_kafkas_codes_and_applies_nothing_of_that_user(
    tmp_path: Path,
    deletions: list[ScramDeletion],
    upsertions: list[ScramUpsertion],
    error: Errors,
    message: str,
) -> None:
    admin = _replica(tmp_path, "r1")
    results = await admin.scram.alter(ADMIN, deletions, [*upsertions, _upsertion("dave", "dave-secret")])
    user = (deletions or upsertions)[0].user
    assert results[0] == UserResult(user, error, message)
    assert results[-1] == UserResult("dave", Errors.NONE, None)  # another user's entry is unaffected
    assert set(admin.follower.image.credentials.scram_users()) == {"dave"}


async def test_describe_errors_and_authorization_are_kafkas(tmp_path: Path) -> None:
    admin = _replica(tmp_path, "r1", {"alice": "a"})
    assert admin.scram.describe(ADMIN, ["alice", "alice", "zed"]) == (
        Errors.NONE,
        [
            UserResult(
                "alice",
                Errors.DUPLICATE_RESOURCE,
                "Cannot describe SCRAM credentials for the same user twice in a single request: alice",
            ),
            UserResult(
                "zed",
                Errors.RESOURCE_NOT_FOUND,
                "Attempt to describe a user credential that does not exist: zed",
            ),
        ],
    )
    stranger = ClientContext(principal="User:alice")
    assert admin.scram.describe(stranger, None) == (Errors.CLUSTER_AUTHORIZATION_FAILED, [])
    assert await admin.scram.alter(stranger, [], [_upsertion("eve", "pw")]) == [
        UserResult("eve", Errors.CLUSTER_AUTHORIZATION_FAILED, None)
    ]
    assert "eve" not in admin.follower.image.credentials.scram_users()


async def test_the_admin_apis_history_shows_a_scram_change_without_its_credential(tmp_path: Path) -> None:
    from ingest.admin.http_api import _record_json  # noqa: PLC0415 - the history's one serialiser

    admin = _replica(tmp_path, "r1")
    await admin.scram.alter(ADMIN, [], [_upsertion("bob", "bob-secret")])
    (record,) = await admin.follower.history(-1)
    shown = _record_json(record)
    assert {k: shown[k] for k in ("kind", "user", "mechanism", "deleted")} == {
        "kind": "scram_credential",
        "user": "bob",
        "mechanism": "SCRAM-SHA-256",
        "deleted": False,
    }
    assert not {"salt", "stored_key", "server_key", "credential"} & set(shown)
