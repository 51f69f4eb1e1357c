"""Authentication: bearer tokens from a secrets file, and a trusted fronting proxy's word.

``Authenticator.authenticate`` turns what a transport can vouch for (the request headers, the
connection's peer address and port, the principal of its verified TLS client certificate) into the
principal and source address of the request:

1. **Trusted proxy.** Only when the peer address lies inside one of ``security.trusted_proxies``
   (CIDRs) are the proxy's forwarded headers believed, and then the proxy's own certificate is not the
   client's: the principal is ``User:<Subject>`` of the *first* element of
   ``x-forwarded-client-cert`` (Envoy's XFCC, set by an edge proxy with ``SANITIZE_SET``), or
   ``User:ANONYMOUS`` without one; the source address is the rightmost ``x-forwarded-for`` entry
   that is not itself a trusted proxy, and the source port is unknown (no standard header carries
   it). From any other peer these headers are ignored: a client can never choose its principal.
2. **Bearer token.** ``Authorization: Bearer <token>`` (HTTP) or ``authorization`` metadata (gRPC),
   looked up in ``security.tokens_file``; a known token's principal wins over the certificate's, as
   a SASL principal does over the certificate on Kafka's ``SASL_SSL`` listeners. An unknown token is
   an ``AuthenticationError`` (HTTP 401, gRPC UNAUTHENTICATED). Without a tokens file, bearer
   authentication is off and the header is ignored (it may be meant for a proxy); so are other
   ``Authorization`` schemes.
3. Otherwise the certificate's principal (mTLS), else ``User:ANONYMOUS``.

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

__all__ = [
    "ANONYMOUS",
    "AUTHORIZATION_HEADER",
    "FORWARDED_CLIENT_CERT_HEADER",
    "FORWARDED_FOR_HEADER",
    "AuthenticationError",
    "Authenticator",
    "BearerTokens",
    "bearer_token",
    "forwarded_address",
    "forwarded_client_subject",
    "is_principal",
    "load_tokens",
    "parse_networks",
]

log = logging.getLogger(__name__)

ANONYMOUS: Final = "User:ANONYMOUS"
AUTHORIZATION_HEADER: Final = "authorization"
FORWARDED_CLIENT_CERT_HEADER: Final = "x-forwarded-client-cert"
FORWARDED_FOR_HEADER: Final = "x-forwarded-for"
_PRINCIPAL: Final = re.compile(r"[^:\s]+:\S.*")
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AuthenticationError(Exception):
    """The request presented a credential that names no principal: 401 / UNAUTHENTICATED."""


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


def parse_networks(cidrs: Iterable[str]) -> tuple[_Network, ...]:
    """CIDRs (host bits allowed, a bare address is a /32 or /128); ValueError for a bad one."""
    return tuple(ipaddress.ip_network(cidr.strip(), strict=False) for cidr in cidrs)


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
    """The ``Subject`` of the first element of an ``x-forwarded-client-cert`` header (Envoy's format:
    elements separated by ``,``, ``key=value`` pairs by ``;``, values optionally double-quoted)."""
    if not xfcc:
        return None
    first = _split_unquoted(xfcc, ",")[0]
    for pair in _split_unquoted(first, ";"):
        key, _, value = pair.strip().partition("=")
        if key.lower() == "subject":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            return value or None
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

    def __init__(self, tokens_file: str | None = None, trusted_proxies: Iterable[str] = ()) -> None:
        self.tokens_file = tokens_file
        self.trusted_proxies = parse_networks(trusted_proxies)
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

    def is_trusted_proxy(self, address: str | None) -> bool:
        if not self.trusted_proxies:
            return False
        parsed = _address(address) if address else None
        return parsed is not None and _trusted(parsed, self.trusted_proxies)

    def authenticate(
        self, headers: Mapping[str, str], address: str | None, port: int | None, certificate_principal: str
    ) -> tuple[str, str | None, int | None]:
        """(principal, source address, source port) of a request whose lower-cased ``headers``
        arrived from ``address:port`` over a connection authenticated as ``certificate_principal``."""
        principal = certificate_principal
        if self.is_trusted_proxy(address):
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
        return principal, address, port
