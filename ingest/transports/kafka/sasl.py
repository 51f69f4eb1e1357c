"""SASL on the Kafka listener: one connection's authentication, framed as Kafka frames it (Kafka's
``SaslServerAuthenticator``, KIP-43, KIP-152 and KIP-368).

On a ``SASL_PLAINTEXT`` or ``SASL_SSL`` listener every connection starts unauthenticated, and until it
is authenticated ``KafkaSasl.respond`` answers its frames, not the APIs:

1. optionally one ApiVersions request (any supported version; an unsupported one is answered
   UNSUPPORTED_VERSION and may be retried), answered as the APIs answer it;
2. SaslHandshake (v0-1) naming a mechanism: one of ``kafka_listener.sasl_enabled_mechanisms`` is
   answered NONE with the enabled list; any other UNSUPPORTED_SASL_MECHANISM (33) with the list, and
   the connection is closed;
3. the mechanism's tokens: after a v1 handshake each in a SaslAuthenticate request (v0-2), answered
   with the server's token (and, once complete, v1+ ``session_lifetime_ms``: the
   ``kafka_listener.connections_max_reauth_ms``, 0 when unset); after a v0 handshake as bare
   size-prefixed tokens, as Kafka clients before KIP-152 send them. A failed exchange is answered
   SASL_AUTHENTICATION_FAILED (58) with ``ingest.security.sasl``'s message (v1; v0 has no way to say
   it), and the connection is closed.

Any other request before authentication closes the connection, as Kafka closes it: before the
handshake (a second ApiVersions included) at once and with no answer; in place of a SaslAuthenticate
with the request's own error answer, ILLEGAL_SASL_STATE, 34, where its schema can carry one, after the
failed-authentication delay. Every failed exchange and every unsupported mechanism is answered (or,
v0, closed) after that delay too. A successful SaslAuthenticate's error message is the empty string, as
Kafka's generated response sends it, and a successful bare v0 exchange answers each token, an empty
one included (PLAIN's). Once authenticated, the connection's principal
is ``User:<name>`` (it replaces a TLS client certificate's on ``SASL_SSL``, as Kafka's principal
builder does), for quotas, super users and the landed rows alike.

Re-authentication (KIP-368): while its session has an expiry (``connections_max_reauth_ms`` set), a
client that authenticated with SaslAuthenticate v1 or later may send SaslHandshake again on its
authenticated connection, at most once a second (Kafka's ``KafkaChannel``); the same exchange runs
again, its requests waiting meanwhile. Another mechanism's handshake is answered NONE, and its
SaslAuthenticate is not answered: the connection is closed after the failed-authentication delay
(Kafka's REAUTH_BAD_MECHANISM state). Another principal fails the exchange: SASL_AUTHENTICATION_FAILED
``Cannot change principals during re-authentication``, answered after the delay, and the connection
is closed. A connection whose session has expired is closed on its next request other than
SaslHandshake. A second handshake otherwise (no expiry, a v0 client, within a second of the last
re-authentication) goes to the APIs, which answer ILLEGAL_SASL_STATE, as Kafka's do.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import MISSING, fields
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ingest.security.sasl import SaslAuthenticationError, SaslCredentials, SaslServer, create_sasl_server
from ingest.transports.kafka.protocol import (
    API_VERSIONS,
    FRAME_SIZE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUPPORTED_VERSIONS,
    FrameError,
    build,
    encode_response,
    parse_request,
    peek_header,
    response_schema,
)

__all__ = ["KafkaSasl", "SaslSettings"]

log = logging.getLogger(__name__)

_ZERO_MS: Final = datetime.timedelta(0)
MIN_REAUTH_INTERVAL_MS: Final = 1000
"""How soon after the last re-authentication began another may begin (Kafka's ``KafkaChannel``)."""


class SaslSettings:
    """What a SASL listener accepts: its mechanisms (Kafka's ``sasl.enabled.mechanisms``), the users,
    ``connections.max.reauth.ms`` (0: sessions do not expire), and
    ``connection.failed.authentication.delay.ms``: how long the answer to a failed authentication (and
    the close after it) waits, as Kafka's Selector delays it, so that guessing passwords is slow."""

    def __init__(
        self,
        mechanisms: Sequence[str],
        credentials: SaslCredentials,
        *,
        connections_max_reauth_ms: int = 0,
        failed_authentication_delay_ms: int = 100,
    ) -> None:
        self.mechanisms = tuple(mechanisms)
        self.credentials = credentials
        self.connections_max_reauth_ms = connections_max_reauth_ms
        self.failed_authentication_delay_ms = failed_authentication_delay_ms


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


class KafkaSasl:
    """One connection's SASL state. ``intercepts(frame)`` says whether a frame is this object's to
    answer; ``respond(frame)`` answers it: ``(answer, close)``, where close means that the connection
    is closed once the answer (if any) is written. ``username`` is set once authenticated."""

    def __init__(
        self,
        settings: SaslSettings,
        api_versions: Callable[[bytes], Awaitable[bytes]],
        now_ms: Callable[[], int],
    ) -> None:
        self._settings = settings
        self._api_versions = api_versions
        self._now_ms = now_ms
        self._state = _State.HANDSHAKE_OR_VERSIONS
        self._server: SaslServer | None = None
        self._headers = True
        """False after a v0 handshake: the tokens come bare."""
        self._previous: tuple[str, str] | None = None
        """(mechanism, username) of the session a re-authentication renews."""
        self._bad_mechanism: str | None = None
        self._reauthenticated_at_ms: int | None = None
        self.supports_reauthentication = False
        self.username: str | None = None
        self.expires_at_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self._state is _State.COMPLETE

    def intercepts(self, frame: bytes) -> bool:
        """Whether ``frame`` is part of an authentication (or starts a re-authentication); FrameError
        when the session has expired and the frame does not renew it."""
        if self._state is not _State.COMPLETE:
            return True
        api_key = peek_header(frame)[0]
        # only a session that expires may be renewed (Kafka's KafkaChannel: without an expiry the
        # handshake goes to the APIs, which answer ILLEGAL_SASL_STATE; KF3-S15)
        if api_key == SASL_HANDSHAKE and self.supports_reauthentication and self.expires_at_ms is not None:
            now_ms = self._now_ms()
            last_ms = self._reauthenticated_at_ms
            if last_ms is None or now_ms - last_ms >= MIN_REAUTH_INTERVAL_MS:
                self._reauthenticated_at_ms = now_ms
                self._begin_reauthentication()
                return True
        if self.expires_at_ms is not None and self._now_ms() >= self.expires_at_ms:
            raise FrameError("the SASL session expired (connections_max_reauth_ms) and was not renewed")
        return False

    def _begin_reauthentication(self) -> None:
        assert self._server is not None
        assert self.username is not None
        self._previous = (self._server.mechanism, self.username)
        self._state = _State.HANDSHAKE

    async def respond(self, frame: bytes) -> tuple[bytes | None, bool]:
        if self._state is _State.AUTHENTICATE:
            if self._bad_mechanism is not None:  # no answer, closed after the delay (KF3-S14)
                log.info("SASL re-authentication failed: %s", self._bad_mechanism)
                return None, True
            return self._authenticate(frame) if self._headers else self._bare_token(frame)
        api_key, api_version, _ = peek_header(frame)
        if api_key == API_VERSIONS and self._state is _State.HANDSHAKE_OR_VERSIONS:
            low, high = SUPPORTED_VERSIONS[API_VERSIONS]
            if low <= api_version <= high:
                self._state = _State.HANDSHAKE
            return await self._api_versions(frame), False
        if api_key != SASL_HANDSHAKE:  # unanswered and closed at once, as a broker closes it (KF3-S5)
            raise FrameError(f"Unexpected Kafka request of type {api_key} during SASL handshake")
        return self._handshake(frame)

    def _handshake(self, frame: bytes) -> tuple[bytes | None, bool]:
        header, body = _parsed(frame, SASL_HANDSHAKE)
        schema = response_schema(SASL_HANDSHAKE, header.api_version)
        mechanism = body.mechanism
        enabled = self._settings.mechanisms
        if mechanism not in enabled:
            log.info("SASL mechanism %r requested by a client is not enabled", mechanism[:64])
            answer = build(schema, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            return encode_response(SASL_HANDSHAKE, header.api_version, header.correlation_id, answer), True
        self._headers = header.api_version >= 1
        if self._previous is not None and mechanism != self._previous[0]:
            self._bad_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                f"of mechanism '{self._previous[0]}'"
            )
        self._server = create_sasl_server(mechanism, self._settings.credentials)
        self._state = _State.AUTHENTICATE
        answer = build(schema, error_code=ErrorCode.none, mechanisms=enabled)
        return encode_response(SASL_HANDSHAKE, header.api_version, header.correlation_id, answer), False

    def _evaluate(self, token: bytes) -> bytes | None:
        """The server's next token; SaslAuthenticationError when the exchange (or the renewal) fails."""
        assert self._server is not None
        answer = self._server.evaluate(token)
        if self._server.complete:
            username = self._server.username
            assert username is not None
            if self._previous is not None and self._previous[1] != username:
                raise SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from User.{self._previous[1]}: "
                    f"User.{username}"
                )
            self.username = username
            self._previous = None
            self._state = _State.COMPLETE
            lifetime = self._settings.connections_max_reauth_ms
            self.expires_at_ms = self._now_ms() + lifetime if lifetime > 0 else None
        return answer

    def _bare_token(self, token: bytes) -> tuple[bytes | None, bool]:
        try:
            answer = self._evaluate(token)
        except SaslAuthenticationError as exc:
            log.info("SASL authentication failed: %s", exc)
            return None, True  # v0: no way to say why
        answer = answer or b""  # a broker sends even PLAIN's empty answer as a frame of its own
        return FRAME_SIZE.pack(len(answer)) + answer, False

    def _authenticate(self, frame: bytes) -> tuple[bytes | None, bool]:
        api_key = peek_header(frame)[0]
        if api_key != SASL_AUTHENTICATE:
            return _illegal_state(frame, api_key), True
        header, body = _parsed(frame, SASL_AUTHENTICATE)
        self.supports_reauthentication = self.supports_reauthentication or header.api_version > 0
        schema = response_schema(SASL_AUTHENTICATE, header.api_version)
        try:
            answer = self._evaluate(bytes(body.auth_bytes))
        except SaslAuthenticationError as exc:
            log.info("SASL authentication failed: %s", exc)
            failed = build(
                schema,
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=str(exc),
                auth_bytes=b"",
                session_lifetime=_ZERO_MS,
            )
            return encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id, failed), True
        lifetime = self._settings.connections_max_reauth_ms if self.authenticated else 0
        done = build(
            schema,
            error_code=ErrorCode.none,
            error_message="",  # Kafka's generated SaslAuthenticateResponseData: "" unless set
            auth_bytes=answer or b"",
            session_lifetime=datetime.timedelta(milliseconds=lifetime),
        )
        return encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id, done), False


def _parsed(frame: bytes, api_key: int) -> tuple[Any, Any]:
    version = peek_header(frame)[1]
    low, high = SUPPORTED_VERSIONS[api_key]
    if not low <= version <= high:
        raise FrameError(f"api key {api_key} version {version} is not supported")
    return parse_request(frame, api_key, version)


def _illegal_state(frame: bytes, api_key: int) -> bytes | None:
    """The request's own answer carrying ILLEGAL_SASL_STATE, when its schema can say so."""
    api_key, version, correlation_id = peek_header(frame)
    low, high = SUPPORTED_VERSIONS.get(api_key, (0, -1))
    if not low <= version <= high:
        return None
    schema = response_schema(api_key, version)
    values: dict[str, Any] = {}
    for field in fields(schema):
        if field.default is not MISSING or field.default_factory is not MISSING:
            continue
        if field.name == "error_code":
            values[field.name] = ErrorCode.illegal_sasl_state
        elif field.name == "throttle_time":
            values[field.name] = _ZERO_MS
        elif field.name == "error_message":
            values[field.name] = f"Unexpected Kafka request of type {api_key} during SASL authentication."
        else:
            values[field.name] = ()
    try:
        return encode_response(api_key, version, correlation_id, schema(**values))
    except Exception:  # a schema whose required fields are not all lists: no answer, just the close
        return None
