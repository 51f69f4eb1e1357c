"""SASL authentication as a Kafka broker does it, whatever carries the tokens: the mechanisms PLAIN
(RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), checked against the users of
``security.sasl_users_file``.

- ``SaslCredentials``: the users file (YAML ``{user: password}``) as Kafka keeps credentials: PLAIN
  compares the password (in constant time); SCRAM keeps only what RFC 5802 stores, a salted, iterated
  credential (salt, StoredKey, ServerKey, 4,096 iterations as ``kafka-configs.sh`` writes by default),
  derived at start with a random salt per user and mechanism, so the exchange never sees a password.
  The config log's SCRAM credentials (AlterUserScramCredentials) replace or delete the file's.
- Revocation (T3-11): a user whose SCRAM credentials the config log has all deleted is refused by
  PLAIN too (``SaslCredentials.revoked``). On a broker, PLAIN's users are a JAAS file that
  AlterUserScramCredentials does not touch; the sink has one users file behind both mechanisms and no
  other run-time way to lock a user out on every replica, so deleting every SCRAM credential of a
  user does that. Deleting one mechanism's credential, or changing a SCRAM password, leaves PLAIN
  with the users file's password.
- ``create_sasl_server(mechanism, credentials)``: one exchange. ``evaluate(token)`` takes the client's
  next token and returns the server's (or None when the exchange is complete); ``complete`` says
  whether it is, ``username`` whom it authenticated. The principal is ``User:<username>``.
- Failures raise ``SaslAuthenticationError`` with the message Kafka sends the client: PLAIN's own
  (``Authentication failed: Invalid username or password``, ...), and for SCRAM the same message
  whatever went wrong (an unknown user, a wrong proof, a malformed message), as Kafka words it:
  ``Authentication failed during authentication due to invalid credentials with SASL mechanism
  SCRAM-SHA-256``.
- Which SCRAM users exist is not hidden (T3-4): the message is the same, but not the step. A user
  without a credential fails at the client's first message, while a known user gets the server's
  first message (salt and iterations) and fails only at the proof. A Kafka broker does exactly this
  (its ``ScramSaslServer`` fails when the credential callback finds no credential), and so does the
  sink. RFC 5802 (section 9) suggests answering an unknown user with a made-up salt, but that salt
  would have to be the same on every replica and across restarts (a secret every replica shares), or
  it would tell the same thing. What slows probing down is Kafka's: the failed-authentication delay
  (``kafka_listener.connection_failed_authentication_delay_ms``) and the connection quotas.

A SCRAM message over ``MAX_SCRAM_MESSAGE_BYTES`` fails like any malformed one, unparsed. Kafka's SCRAM
extension for delegation tokens (``tokenauth=true``) is not supported: a client-first
message carrying it fails like any malformed message. The Kafka framing of the tokens (SaslHandshake,
SaslAuthenticate) is the Kafka listener's (``ingest.transports.kafka.sasl``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import scramp
import yaml

__all__ = [
    "MAX_SCRAM_ITERATIONS",
    "MAX_SCRAM_MESSAGE_BYTES",
    "MECHANISMS",
    "MIN_SCRAM_ITERATIONS",
    "SCRAM_ITERATIONS",
    "SCRAM_MECHANISMS",
    "SCRAM_MECHANISM_IDS",
    "SaslAuthenticationError",
    "SaslCredentials",
    "SaslServer",
    "ScramCredential",
    "create_sasl_server",
    "read_sasl_users",
    "sasl_principal",
    "scram_credential",
]

PLAIN: Final = "PLAIN"
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)
"""Every mechanism the sink implements (Kafka's names, as ``sasl.enabled.mechanisms`` lists them)."""
SCRAM_ITERATIONS: Final = 4096
"""Kafka's minimum and ``kafka-configs.sh``'s default for SCRAM-SHA-256 and SCRAM-SHA-512."""
MIN_SCRAM_ITERATIONS: Final = 4096
MAX_SCRAM_ITERATIONS: Final = 16384
"""The iterations Kafka accepts for a SCRAM credential (``ScramMechanism``'s bounds)."""
SCRAM_MECHANISM_IDS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Kafka's ``ScramMechanism`` type bytes, as the SCRAM admin APIs carry them (0 is UNKNOWN)."""
_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MAX_USERNAME_CHARS: Final = 1024
MAX_SCRAM_MESSAGE_BYTES: Final = 8192
"""A SCRAM message carries a user name (at most ``MAX_USERNAME_CHARS``), a nonce and a proof: a longer
one is refused before it is parsed, since parsing a megabyte-long one held the event loop for a second."""
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class SaslAuthenticationError(Exception):
    """The exchange failed; the message is the one the client is sent (SASL_AUTHENTICATION_FAILED)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What RFC 5802 has a server store: never the password, nor the salted password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def scram_credential(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """The stored credential of a salted password (``Hi(password, salt, iterations)``, which a Kafka admin
    client computes and sends with AlterUserScramCredentials, KIP-554)."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=hmac.new(salted_password, b"Server Key", digest).digest(),
        iterations=iterations,
    )


class SaslCredentials:
    """The users who may authenticate, and the form each mechanism checks them in: the users file's,
    and over them the SCRAM credentials of the config log (``set_scram``: what
    AlterUserScramCredentials wrote, or deleted, for a user and mechanism), which every replica applies
    as it follows the log."""

    def __init__(self, users: Mapping[str, str], *, iterations: int = SCRAM_ITERATIONS) -> None:
        problems = _user_problems(users)
        if problems:
            raise ValueError("\n".join(problems))
        self._passwords = {name: password.encode() for name, password in users.items()}
        self._scram = {
            mechanism: {
                name: ScramCredential(*scramp.ScramMechanism(mechanism).make_auth_info(password, iterations))
                for name, password in users.items()
            }
            for mechanism in SCRAM_MECHANISMS
        }
        self._logged: dict[tuple[str, str], ScramCredential | None] = {}
        """(mechanism, user) -> the config log's credential, or None where the log deleted it."""

    @classmethod
    def load(cls, path: str | Path) -> SaslCredentials:
        """The users of a YAML file ``{user: password}``; ValueError saying what is wrong with it."""
        return cls(read_sasl_users(path))

    @property
    def users(self) -> frozenset[str]:
        return frozenset(self._passwords)

    def plain_matches(self, username: str, password: bytes) -> bool:
        """Whether ``password`` is the users file's for a user not ``revoked``."""
        expected = self._passwords.get(username)
        # compared in constant time, and against something even for an unknown user
        matches = hmac.compare_digest(expected if expected is not None else b"\0" * 16, password)
        return matches and expected is not None and not self.revoked(username)

    def revoked(self, username: str) -> bool:
        """Whether the user has no SCRAM credential left for any mechanism: a user of the users file has
        one for each until the config log deletes them all, which revokes PLAIN too (T3-11)."""
        return all(self.scram(mechanism, username) is None for mechanism in SCRAM_MECHANISMS)

    def scram(self, mechanism: str, username: str) -> ScramCredential | None:
        if (mechanism, username) in self._logged:
            return self._logged[mechanism, username]
        return self._scram[mechanism].get(username)

    def set_scram(self, mechanism: str, username: str, credential: ScramCredential | None) -> None:
        """The config log's word on a user's credential for ``mechanism`` (None: deleted), over the
        users file's."""
        self._logged[mechanism, username] = credential

    def scram_users(self) -> dict[str, dict[str, int]]:
        """Every user with a SCRAM credential: mechanism -> iterations (DescribeUserScramCredentials)."""
        found: dict[str, dict[str, int]] = {}
        for mechanism in SCRAM_MECHANISMS:
            for name in {*self._scram[mechanism], *(u for m, u in self._logged if m == mechanism)}:
                credential = self.scram(mechanism, name)
                if credential is not None:
                    found.setdefault(name, {})[mechanism] = credential.iterations
        return found


def read_sasl_users(path: str | Path) -> dict[str, str]:
    """The users file read and checked, without deriving any credential (the config's validation
    reads it this way: deriving SCRAM credentials costs two PBKDF2s per user)."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(document, dict) or not document:
        raise ValueError(f"{path} must map each user name to its password")
    users = {str(name): password for name, password in document.items()}
    if any(not isinstance(password, str) for password in users.values()):
        raise ValueError(f"{path}: every password must be a string")
    problems = _user_problems(users)
    if problems:
        raise ValueError("\n".join(problems))
    return users


def _user_problems(users: Mapping[str, str]) -> list[str]:
    problems = []
    for name, password in users.items():
        if not name or len(name) > MAX_USERNAME_CHARS or _CONTROL.search(name):
            problems.append(
                f"user {name[:64]!r}: a user name is 1 to {MAX_USERNAME_CHARS} characters, none a control "
                "character"
            )
        if not password:
            problems.append(f"user {name[:64]!r}: the password is empty")
    return problems


def sasl_principal(username: str) -> str:
    """The principal of a user authenticated by SASL, as Kafka's default principal builder names it."""
    return f"User:{username}"


class SaslServer(Protocol):
    """One SASL exchange on the server side."""

    mechanism: str
    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes | None:
        """The server's answer to the client's next token (None: nothing to send); raises
        SaslAuthenticationError when the exchange fails."""
        ...


def _generic_failure(mechanism: str) -> SaslAuthenticationError:
    """What Kafka tells a client whose exchange failed for a reason it must not learn."""
    return SaslAuthenticationError(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism "
        + mechanism
    )


class _PlainServer:
    """RFC 4616: one token, ``authzid NUL authcid NUL passwd``, and no answer."""

    mechanism = PLAIN

    def __init__(self, credentials: SaslCredentials) -> None:
        self._credentials = credentials
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes | None:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: the PLAIN exchange is already complete")
        parts = token.split(b"\0")
        if len(parts) != 3:  # RFC 4616's three fields, in the words of Kafka's PlainSaslServer (KF3-S8)
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authorization_id, username, password = parts
        # as Java decodes them: an invalid byte becomes U+FFFD (a name no user has), never an error
        name = username.decode("utf-8", errors="replace")
        if not name:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._credentials.plain_matches(name, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.username = name
        self.complete = True
        return None


class _ScramServer:
    """RFC 5802: client-first -> server-first -> client-final -> server-final."""

    def __init__(self, mechanism: str, credentials: SaslCredentials) -> None:
        self.mechanism = mechanism
        self.complete = False
        self.username: str | None = None
        self._claimed: str | None = None
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism).make_server(self._credential)
        self._step = 0

    def _credential(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        username = name.replace("=2C", ",").replace("=3D", "=")  # RFC 5802's saslname
        credential = self._credentials.scram(self.mechanism, username)
        if credential is None:
            raise KeyError(username)
        self._claimed = username
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _failed(self) -> SaslAuthenticationError:
        return _generic_failure(self.mechanism)

    def evaluate(self, token: bytes) -> bytes | None:
        if len(token) > MAX_SCRAM_MESSAGE_BYTES:
            raise self._failed()
        try:
            message = token.decode("utf-8")
            if self._step == 0:
                self._server.set_client_first(message)
                answer = self._server.get_server_first()
            elif self._step == 1:
                self._server.set_client_final(message)
                answer = self._server.get_server_final()
                self.username = self._claimed
                self.complete = True
            else:
                raise self._failed()
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
            raise self._failed() from exc
        self._step += 1
        return str(answer).encode("utf-8")


def create_sasl_server(mechanism: str, credentials: SaslCredentials) -> SaslServer:
    """A new exchange of ``mechanism`` (one of ``MECHANISMS``)."""
    if mechanism == PLAIN:
        return _PlainServer(credentials)
    if mechanism in SCRAM_MECHANISMS:
        return _ScramServer(mechanism, credentials)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
