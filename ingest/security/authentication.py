"""Authentication: bearer tokens from a secrets file, a trusted fronting proxy's word, and whether a
principal is required at all.

``Authenticator.authenticate`` turns what a transport can vouch for (the request headers, the
connection's peer address and port, the principal of its verified TLS client certificate, written by
``principals``) into the principal and source address of the request:

1. **Trusted proxy.** A peer is a trusted proxy when it is what ``security.trusted_proxies`` (exact
   addresses: a bare address, ``/32`` or ``/128``; a wider network is refused, since in a cluster it
   holds every pod) and ``security.trusted_proxy_principals`` (the principals of the proxies' mTLS
   client certificates, e.g. ``User:CN=edge-proxy,O=Acme``) say, each that is set; at least one
   must be. Only then are the proxy's forwarded headers believed, and then the proxy's own
   certificate is not the client's: the principal is ``User:`` + the ``Subject`` of the *last*
   element of ``x-forwarded-client-cert`` (Envoy's XFCC: the element the proxy itself wrote; a
   client can put elements before it, never after), rewritten in Kafka's form (``principals``,
   escapes kept: ``O=Acme\\,CN=x`` stays one attribute), or ``User:ANONYMOUS`` without one; no
   other XFCC field (``By``, ``Hash``, ``Cert``, ``URI``, ``DNS``) is read. A ``Subject`` that is not
   a distinguished name is an ``AuthenticationError``. The source address is the rightmost
   ``x-forwarded-for`` entry that is not itself a trusted proxy address, and the source port is
   unknown (no standard header carries it). From any other peer these headers are ignored: a client
   can never choose its principal.
2. **Bearer token.** ``Authorization: Bearer <token>`` (HTTP) or ``authorization`` metadata (gRPC),
   looked up in ``security.tokens_file``; a known token's principal wins over the certificate's, as
   a SASL principal does over the certificate on Kafka's ``SASL_SSL`` listeners. An unknown token is
   an ``AuthenticationError`` (HTTP 401, gRPC UNAUTHENTICATED). Without a tokens file, bearer
   authentication is off and the header is ignored (it may be meant for a proxy); so are other
   ``Authorization`` schemes.
3. Otherwise the certificate's principal (mTLS), else ``User:ANONYMOUS``.
4. **Required authentication.** With ``security.require_authentication``, a request that ends up
   ``User:ANONYMOUS`` is an ``AuthenticationError`` too, and so is a Kafka connection without a
   client certificate (``connection_principal``: the Kafka port has no SASL).

The tokens file is YAML, one token per line mapped to its principal (quote tokens YAML would read as
numbers)::

    "3c1f0e4b9d...": "User:alice"
    "9a77c2d1e0...": "User:billing-service"

Tokens are kept as SHA-256 digests and compared in constant time (``hmac.compare_digest`` against every
entry, no early exit), and never logged. ``refresh_tokens`` re-reads the file when it changed (the
server calls it periodically); a file that no longer reads keeps the tokens in force and logs why.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import yaml

from ingest.security.principals import ANONYMOUS, rfc2253_name
from ingest.wire import AUTHORIZATION_HEADER, FORWARDED_CLIENT_CERT_HEADER, FORWARDED_FOR_HEADER
from subscriptions.errors import ApiError, Errors

__all__ = [
    "ANONYMOUS",
    "AuthenticationError",
    "Authenticator",
    "BearerTokens",
    "bearer_token",
    "forwarded_address",
    "forwarded_client_subject",
    "is_principal",
    "load_tokens",
    "parse_proxy_addresses",
]

log = logging.getLogger(__name__)

_PRINCIPAL: Final = re.compile(r"[^:\s]+:\S.*")
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AuthenticationError(ApiError):
    """The request presented a credential that names no principal: SASL_AUTHENTICATION_FAILED (58),
    answered 401 / UNAUTHENTICATED (``errors.AUTHENTICATION_ANSWER``)."""

    error = Errors.SASL_AUTHENTICATION_FAILED


def is_principal(text: object) -> bool:
    """A Kafka principal string, ``<type>:<name>`` (``User:alice``)."""
    return isinstance(text, str) and _PRINCIPAL.fullmatch(text) is not None


def load_tokens(path: str | os.PathLike[str]) -> dict[str, str]:
    """The token -> principal mapping of a tokens file; ValueError listing every problem (never a
    token: a problem names the line's principal or position)."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a mapping of bearer tokens to principals")
    problems = []
    for position, (token, principal) in enumerate(document.items(), 1):
        if not isinstance(token, str) or not token.strip():
            problems.append(f"{path}: entry {position}: the token must be a non-empty string (quote it)")
        if not is_principal(principal):
            problems.append(f"{path}: entry {position}: {principal!r} is not a principal like User:alice")
    if problems:
        raise ValueError("\n".join(problems))
    return {str(token): str(principal) for token, principal in document.items()}


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class BearerTokens:
    """Principals by bearer token, kept as digests and looked up in constant time."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._entries = tuple((_digest(token), principal) for token, principal in tokens.items())

    def __len__(self) -> int:
        return len(self._entries)

    def principal(self, token: str) -> str | None:
        """The principal ``token`` stands for, or None; the time taken does not depend on ``token``."""
        digest = _digest(token)
        found = None
        for known, principal in self._entries:  # every entry, no early exit
            if hmac.compare_digest(known, digest):
                found = principal
        return found


def parse_proxy_addresses(entries: Iterable[str]) -> tuple[_Network, ...]:
    """Trusted proxy addresses: each one address (bare, ``/32`` or ``/128``); ValueError naming an
    entry that is not, or that is a wider network (in a cluster that is every pod, F7)."""
    networks = []
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not an address") from None
        if network.num_addresses != 1:
            raise ValueError(
                f"{network} is a network of {network.num_addresses} addresses: list each proxy's own "
                "address (/32 or /128), or name the proxies' certificates in "
                "security.trusted_proxy_principals"
            )
        networks.append(network)
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
    return address


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address, networks: Iterable[_Network]) -> bool:
    return any(address in network for network in networks)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value; None for no header or another
    scheme; AuthenticationError for ``Bearer`` without a token."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    if not token.strip():
        raise AuthenticationError("the Authorization header carries no bearer token")
    return token.strip()


def _split_unquoted(text: str, separator: str) -> list[str]:
    """Split at ``separator`` outside double quotes (backslash escapes inside them)."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def forwarded_client_subject(xfcc: str | None) -> str | None:
    """The ``Subject`` of the last element of an ``x-forwarded-client-cert`` header (Envoy's format:
    elements separated by ``,``, ``key=value`` pairs by ``;``, values optionally double-quoted, as
    Envoy quotes a subject verbatim) in Kafka's form (``principals.rfc2253_name``); None without one;
    AuthenticationError for a subject that is not a distinguished name."""
    if not xfcc:
        return None
    last = _split_unquoted(xfcc, ",")[-1]
    for pair in _split_unquoted(last, ";"):
        key, _, value = pair.strip().partition("=")
        if key.lower() == "subject":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]  # verbatim: the escapes in it are the name's own
            if not value:
                return None
            try:
                return rfc2253_name(value)
            except ValueError as exc:
                problem = f"x-forwarded-client-cert: the Subject is not a distinguished name: {exc}"
                raise AuthenticationError(problem) from None
    return None


def forwarded_address(xff: str | None, trusted: Iterable[_Network]) -> str | None:
    """The client address of an ``x-forwarded-for`` header: the rightmost entry that is not a trusted
    proxy (entries left of it were written by whoever sent the request, and could be anything); the
    leftmost if every entry is trusted; None if there is none or an entry is not an address."""
    networks = tuple(trusted)
    chosen = None
    for entry in reversed((xff or "").split(",")):
        address = _address(entry)
        if address is None:
            return chosen
        chosen = str(address)
        if not _trusted(address, networks):
            return chosen
    return chosen


class Authenticator:
    """Principal and source address of a request (see the module docstring)."""

    def __init__(
        self,
        tokens_file: str | None = None,
        trusted_proxies: Iterable[str] = (),
        *,
        trusted_proxy_principals: Iterable[str] = (),
        require_authentication: bool = False,
        trusted_forwarders: Iterable[str] = (),
    ) -> None:
        self.tokens_file = tokens_file
        self.trusted_proxies = parse_proxy_addresses(trusted_proxies)
        self.trusted_proxy_principals = frozenset(trusted_proxy_principals)
        self.require_authentication = require_authentication
        self.trusted_forwarders = frozenset(trusted_forwarders)
        """Principals of the forwarders (broker plugins, collectors) whose OTLP labels may name the
        principal of the client whose telemetry they forward (``attribution``)."""
        self._tokens: BearerTokens | None = None
        self._tokens_mtime_ns = -1
        if tokens_file is not None:
            self._tokens = BearerTokens(load_tokens(tokens_file))
            self._tokens_mtime_ns = Path(tokens_file).stat().st_mtime_ns

    def refresh_tokens(self) -> bool:
        """Re-read the tokens file if it changed since it was read; True when new tokens apply."""
        if self.tokens_file is None:
            return False
        try:
            mtime = Path(self.tokens_file).stat().st_mtime_ns
            if mtime == self._tokens_mtime_ns:
                return False
            tokens = BearerTokens(load_tokens(self.tokens_file))
        except (OSError, ValueError) as exc:
            log.warning("tokens file not reloaded, the previous tokens stay in force: %s", exc)
            return False
        self._tokens, self._tokens_mtime_ns = tokens, mtime
        log.info("tokens file reloaded: %d tokens", len(tokens))
        return True

    def is_trusted_proxy(self, address: str | None, certificate_principal: str) -> bool:
        """Whether a peer at ``address`` with a certificate naming ``certificate_principal`` is a
        trusted proxy: it matches each of ``trusted_proxies`` and ``trusted_proxy_principals`` that is
        set, and at least one is."""
        if not (self.trusted_proxies or self.trusted_proxy_principals):
            return False
        if self.trusted_proxy_principals and certificate_principal not in self.trusted_proxy_principals:
            return False
        if not self.trusted_proxies:
            return True
        parsed = _address(address) if address else None
        return parsed is not None and _trusted(parsed, self.trusted_proxies)

    def connection_principal(self, certificate_principal: str) -> str:
        """The principal of a connection that can only authenticate by certificate (the Kafka port,
        no SASL); AuthenticationError without one when authentication is required."""
        if self.require_authentication and certificate_principal == ANONYMOUS:
            raise AuthenticationError(
                "security.require_authentication is set and the connection presented no client "
                "certificate (the Kafka port has no SASL)"
            )
        return certificate_principal

    def authenticate(
        self, headers: Mapping[str, str], address: str | None, port: int | None, certificate_principal: str
    ) -> tuple[str, str | None, int | None]:
        """(principal, source address, source port) of a request whose lower-cased ``headers``
        arrived from ``address:port`` over a connection authenticated as ``certificate_principal``."""
        principal = certificate_principal
        if self.is_trusted_proxy(address, certificate_principal):
            subject = forwarded_client_subject(headers.get(FORWARDED_CLIENT_CERT_HEADER))
            principal = "User:" + subject if subject else ANONYMOUS
            forwarded = forwarded_address(headers.get(FORWARDED_FOR_HEADER), self.trusted_proxies)
            if forwarded is not None:
                address, port = forwarded, None
        if self._tokens is not None:
            token = bearer_token(headers.get(AUTHORIZATION_HEADER))
            if token is not None:
                named = self._tokens.principal(token)
                if named is None:
                    raise AuthenticationError("unknown bearer token")
                principal = named
        if self.require_authentication and principal == ANONYMOUS:
            raise AuthenticationError(
                "authentication is required: present a client certificate or a bearer token"
            )
        return principal, address, port
