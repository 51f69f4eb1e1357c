"""SASL mechanisms as a Kafka broker checks them: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802)
against the users file, with Kafka's failure messages; SCRAM exchanges driven by an independent
client implementation (scramp's ``ScramClient``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import scramp

from ingest.security.sasl import (
    MAX_SCRAM_MESSAGE_BYTES,
    MECHANISMS,
    SaslAuthenticationError,
    SaslCredentials,
    create_sasl_server,
    sasl_principal,
)

USERS = SaslCredentials({"alice": "alice-secret", "bob,=odd": "bob-secret"})


def _scram(mechanism: str, user: str, password: str) -> str | None:
    """Run a whole exchange; the authenticated user name."""
    client = scramp.ScramClient([mechanism], user.replace("=", "=3D").replace(",", "=2C"), password)
    server = create_sasl_server(mechanism, USERS)
    server_first = server.evaluate(client.get_client_first().encode())
    assert server_first is not None
    client.set_server_first(server_first.decode())
    server_final = server.evaluate(client.get_client_final().encode())
    assert server_final is not None
    client.set_server_final(server_final.decode())  # the client checks the server's signature too
    assert server.complete
    return server.username


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_a_user_of_the_file_and_proves_the_server_knows_it(mechanism: str) -> None:
    assert _scram(mechanism, "alice", "alice-secret") == "alice"
    assert _scram(mechanism, "bob,=odd", "bob-secret") == "bob,=odd"  # saslname escapes undone


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")])
def test_scram_failures_all_get_kafkas_one_message(mechanism: str, user: str, password: str) -> None:
    with pytest.raises(SaslAuthenticationError) as failure:
        _scram(mechanism, user, password)
    assert str(failure.value) == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        + mechanism
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_T3_4_an_unknown_user_fails_at_the_first_message_a_known_one_at_the_proof_as_on_kafka(
    mechanism: str,
) -> None:
    """The step tells which users exist, as on a broker (documented, not hidden: see the module)."""
    unknown = create_sasl_server(mechanism, USERS)
    with pytest.raises(SaslAuthenticationError):
        unknown.evaluate(scramp.ScramClient([mechanism], "mallory", "x").get_client_first().encode())
    known = create_sasl_server(mechanism, USERS)
    client = scramp.ScramClient([mechanism], "alice", "wrong")
    server_first = known.evaluate(client.get_client_first().encode())
    assert server_first is not None
    assert b",s=" in server_first  # alice's salt: she exists
    client.set_server_first(server_first.decode())
    with pytest.raises(SaslAuthenticationError):
        known.evaluate(client.get_client_final().encode())


def test_scram_refuses_a_malformed_first_message_and_kafkas_token_extension() -> None:
    for message in (b"\xff\xfe", b"n,,n=alice,r=abc,tokenauth=true", b"hello"):
        with pytest.raises(SaslAuthenticationError):
            create_sasl_server("SCRAM-SHA-256", USERS).evaluate(message)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0mallory\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0\0alice-secret", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (
            b"bob\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different from username",
        ),
        (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),  # KF3-S8
        (b"\0alice\0alice-secret\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0al\xffice\0alice-secret", "Authentication failed: Invalid username or password"),
    ],
)  # fmt: skip
def test_plain_failures_carry_kafkas_messages(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=f"^{message}$"):
        create_sasl_server("PLAIN", USERS).evaluate(token)


def test_plain_authenticates_with_or_without_the_same_authorization_id() -> None:
    for token in (b"\0alice\0alice-secret", b"alice\0alice\0alice-secret"):
        server = create_sasl_server("PLAIN", USERS)
        assert server.evaluate(token) is None
        assert (server.complete, server.username) == (True, "alice")
    assert sasl_principal("alice") == "User:alice"


REFUSED = "Authentication failed: Invalid username or password"


def _plain(credentials: SaslCredentials, user: str, password: str) -> str | None:
    """How a PLAIN login ends: None if it succeeds, else the message the client is sent."""
    try:
        create_sasl_server("PLAIN", credentials).evaluate(f"\0{user}\0{password}".encode())
    except SaslAuthenticationError as failure:
        return str(failure)
    return None


def test_T3_11_deleting_every_scram_credential_of_a_user_revokes_plain_too_and_nothing_less_does() -> None:
    credentials = SaslCredentials({"dev": "dev-secret", "ops": "ops-secret"})
    replaced = credentials.scram("SCRAM-SHA-256", "ops")
    assert replaced is not None
    credentials.set_scram("SCRAM-SHA-512", "dev", None)  # one mechanism deleted: dev still has one
    assert (_plain(credentials, "dev", "dev-secret"), credentials.revoked("dev")) == (None, False)
    credentials.set_scram("SCRAM-SHA-256", "dev", None)  # the last one: dev is locked out everywhere
    assert (_plain(credentials, "dev", "dev-secret"), credentials.revoked("dev")) == (REFUSED, True)
    assert _plain(credentials, "ops", "ops-secret") is None  # another user is not
    credentials.set_scram("SCRAM-SHA-256", "dev", replaced)  # a credential again: PLAIN is back
    assert _plain(credentials, "dev", "dev-secret") is None
    assert _plain(credentials, "dev", "wrong") == REFUSED
    assert _plain(credentials, "nobody", "dev-secret") == REFUSED  # a log-only user never had PLAIN
    credentials.set_scram("SCRAM-SHA-256", "nobody", replaced)
    assert _plain(credentials, "nobody", "dev-secret") == REFUSED


def test_scram_keeps_salted_credentials_only(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("alice: alice-secret\n")
    credentials = SaslCredentials.load(users)
    for mechanism in MECHANISMS[1:]:
        stored = credentials.scram(mechanism, "alice")
        assert stored is not None
        assert stored.iterations == 4096
        assert b"alice-secret" not in stored.salt + stored.stored_key + stored.server_key
    again = SaslCredentials.load(users)  # a new random salt each time
    assert credentials.scram("SCRAM-SHA-256", "alice") != again.scram("SCRAM-SHA-256", "alice")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[alice]", "must map each user name to its password"),
        ("alice: 12", "every password must be a string"),
        ("alice: ''", "the password is empty"),
        ('"a\\x01b": pw', "none a control character"),
        ("'': pw", "a user name is 1 to"),
    ],
)
def test_a_bad_users_file_says_what_is_wrong(tmp_path: Path, text: str, problem: str) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(text)
    with pytest.raises(ValueError, match=problem):
        SaslCredentials.load(users)


def test_an_oversized_scram_message_is_refused_without_being_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A megabyte-long user name or nonce would hold the event loop while scramp parses it."""
    server = create_sasl_server("SCRAM-SHA-256", USERS)

    def parsed(*_: object) -> None:
        raise AssertionError("an oversized message reached the SCRAM parser")

    monkeypatch.setattr(scramp.core.ScramServer, "set_client_first", parsed)
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(b"n,,n=" + b"a" * MAX_SCRAM_MESSAGE_BYTES + b",r=abc")
