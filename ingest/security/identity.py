"""Who is asking: the ``ClientContext`` of a request, from what the transport can vouch for.

- Principal: a bearer token's principal (``security.tokens_file``), else the subject of the client's
  TLS certificate under mTLS, written from the certificate's DER as Kafka writes it on every
  transport (``principals``: ``User:CN=producer-7,O=Acme``), else ``User:ANONYMOUS``. A client can
  never choose its principal through a header; only a trusted fronting proxy is believed
  (``x-forwarded-client-cert``, ``x-forwarded-for``). The rules are ``authentication``'s
  ``Authenticator``; an unknown token, or no principal when one is required, raises its
  ``AuthenticationError``.
- Client id, software name and version: request headers (gRPC metadata or HTTP headers), the
  equivalents of Kafka's request header and ApiVersions request: ``x-kafka-client-id``,
  ``x-kafka-client-software-name``, ``x-kafka-client-software-version``. Software name and version
  are ``unknown`` when a client does not send them, as a Kafka broker records clients that send no
  ApiVersions info. Binary gRPC metadata (``-bin`` keys, e.g. ``grpc-trace-bin``) is never read.
- Client text is checked here, at the edge, before anything keeps it (``check_client_text``; the
  Kafka listener applies the same rule to its request header and ApiVersions strings): the client id,
  software name and version and the principal must be text, with no invalid UTF-8 (HTTP header bytes
  arrive decoded with ``surrogateescape``, so a byte such as ``0xff`` shows as a lone surrogate) and
  no control characters, and the client id is at most ``limits.max_client_id_chars`` characters, the
  software name and version at most ``limits.max_software_chars``. Anything else raises
  ``ClientTextError`` naming the header, which the transports answer INVALID_REQUEST (a KIP-714 RPC)
  or 400 / INVALID_ARGUMENT (OTLP): the request is refused before it reaches a quota, a metric label
  or a batch of the exporter, so it can only fail itself.
- Source address and port: the connection's peer (or what a trusted proxy forwards), the address
  written as Java writes it (TEL-6).
- The client of an OTLP push, per client its export carries (``attribution``: forwarders name the
  clients whose telemetry they forward in resource labels), by ``forwarded_client``: the request's
  client headers first, then the client's labels; a principal from the labels only when the sender
  is one of ``security.trusted_forwarders`` (else it is ignored, and counted). Its client instance,
  in order: the ``x-kafka-client-instance-id`` header; the labels' instance id; else a stable UUID
  derived (UUIDv5) from the principal, client id, source address and the resource's ``service.name``
  and ``service.instance.id``. Ids are read as UUIDs or in Kafka's 22-character base64 form.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.security.attribution import Labels
from ingest.security.authentication import Authenticator
from ingest.security.principals import ANONYMOUS, certificate_principal, pem_certificate_principal
from ingest.wire import (
    CLIENT_ID_HEADER,
    SOFTWARE_NAME_HEADER,
    SOFTWARE_VERSION_HEADER,
    parse_instance_id,
)
from subscriptions import ClientContext

__all__ = [
    "ANONYMOUS",
    "OPEN",
    "ClientTextError",
    "check_client_text",
    "forwarded_client",
    "grpc_client_context",
    "http_client_context",
    "java_host_address",
    "otlp_instance_id",
    "parse_grpc_peer",
    "principal_from_auth_context",
]

OPEN: Final = Authenticator()
"""No tokens file, no trusted proxy: the certificate's principal or ``User:ANONYMOUS``."""
UNKNOWN_SOFTWARE: Final = "unknown"
"""The software name and version of a client that sent none (as a Kafka broker records it)."""
_OTLP_INSTANCE_NAMESPACE: Final = uuid.UUID("6f0c1f5e-2b1d-5c43-9a57-7d3e1b0a9c14")
_NOT_TEXT: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters (C0, DEL, C1) and lone surrogates (invalid UTF-8 decoded with
``surrogateescape``, or a string no UTF-8 can carry)."""


class ClientTextError(ValueError):
    """Client text that is not valid text or is over its limit; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


def check_client_text(field: str, value: str, max_chars: int | None = None) -> str:
    """``value`` if it is valid text (no invalid UTF-8, no control character) of at most ``max_chars``
    characters; else ``ClientTextError`` naming ``field`` (the message never echoes the value)."""
    if max_chars is not None and len(value) > max_chars:
        raise ClientTextError(field, f"is {len(value)} characters long, over the limit of {max_chars}")
    bad = _NOT_TEXT.search(value)
    if bad is not None:
        code = ord(bad.group())
        if 0xDC80 <= code <= 0xDCFF:  # what ``surrogateescape`` makes of a byte that is not UTF-8
            what = f"invalid UTF-8 (byte 0x{code - 0xDC00:02x})"
        elif code >= 0xD800:
            what = "a lone surrogate"
        else:
            what = f"the control character U+{code:04X}"
        raise ClientTextError(field, f"is not valid text: {what} at character {bad.start()}")
    return value


@lru_cache(maxsize=8192)  # every request asks, of a few addresses
def java_host_address(host: str) -> str | None:
    """An IP address as Java's ``InetAddress.getHostAddress`` writes it (TEL-6): dotted IPv4, or all
    eight IPv6 groups without leading zeros (``0:0:0:0:0:0:0:1``); None if it is not an address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if address.version == 4:
        return str(address)
    return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))


@lru_cache(maxsize=8192)  # one peer string per connection, asked on each of its requests
def parse_grpc_peer(peer: str) -> tuple[str | None, int | None]:
    """``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` -> (address, port); anything else -> (None, None)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None, None
    host, _, port = rest.rpartition(":")
    address = java_host_address(host.strip("[]"))
    if address is None:
        return None, None
    return address, int(port) if port.isdigit() else None


def principal_from_auth_context(auth_context: Mapping[str, Iterable[bytes]]) -> str:
    """gRPC: the principal of the verified certificate grpc-core hands over (``x509_pem_cert``), as
    ``principals`` writes it on every transport, else ``User:ANONYMOUS``."""
    certificates = list(auth_context.get("x509_pem_cert") or [])
    return pem_certificate_principal(certificates[0]) if certificates else ANONYMOUS


def _header_text(
    headers: Mapping[str, str], header: str, max_chars: int, default: str | None = UNKNOWN_SOFTWARE
) -> str | None:
    """A header's checked text, or ``default`` (ours, not the client's: never checked) without one."""
    value = headers.get(header)
    return default if value is None else check_client_text(header, value, max_chars)


def _context(
    headers: Mapping[str, str],
    address: str | None,
    port: int | None,
    certificate_principal: str,
    authenticator: Authenticator,
    *,
    limits: RequestLimits,
) -> ClientContext:
    principal, address, port = authenticator.authenticate(headers, address, port, certificate_principal)
    return ClientContext(
        client_id=_header_text(headers, CLIENT_ID_HEADER, limits.max_client_id_chars, None),
        client_software_name=_header_text(headers, SOFTWARE_NAME_HEADER, limits.max_software_chars),
        client_software_version=_header_text(headers, SOFTWARE_VERSION_HEADER, limits.max_software_chars),
        client_source_address=java_host_address(address) if address else None,
        client_source_port=port,
        principal=check_client_text("principal", principal),
    )


def grpc_client_context(
    metadata: Iterable[tuple[str, str | bytes]],
    peer: str,
    auth_context: Mapping[str, Iterable[bytes]] | None = None,
    authenticator: Authenticator = OPEN,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> ClientContext:
    """The client context of one gRPC request; AuthenticationError for an unknown bearer token,
    ClientTextError for client text that breaks the rules (module docstring)."""
    headers = {
        key.lower(): value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
        for key, value in metadata
        if not key.lower().endswith("-bin")  # binary metadata: none of it is ours
    }
    address, port = parse_grpc_peer(peer)
    principal = principal_from_auth_context(auth_context or {})
    return _context(headers, address, port, principal, authenticator, limits=limits)


def http_client_context(
    headers: Mapping[str, str],
    peername: tuple[Any, ...] | None,
    peer_certificate: bytes | None = None,
    authenticator: Authenticator = OPEN,
    limits: RequestLimits = DEFAULT_LIMITS,
) -> ClientContext:
    """The client context of one HTTP request (``peername`` as the socket reports it,
    ``peer_certificate`` the DER of the client's verified certificate); AuthenticationError for an
    unknown bearer token or a missing required one, ClientTextError for client text that breaks the
    rules (module docstring)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    address = java_host_address(str(peername[0])) if peername else None
    port = int(peername[1]) if peername and len(peername) > 1 else None
    principal = certificate_principal(peer_certificate)
    return _context(lowered, address, port, principal, authenticator, limits=limits)


def forwarded_client(
    client: ClientContext, labels: Labels, *, trusted_forwarder: bool, limits: RequestLimits = DEFAULT_LIMITS
) -> tuple[ClientContext, bool]:
    """The client whose telemetry ``labels`` describe (``attribution``), as forwarded by ``client``
    (the request's sender), and whether a principal the labels asserted was ignored (the sender is
    not a trusted forwarder). The request's own client headers come first, then the labels; a label
    principal is believed only from a trusted forwarder (a bare name, as KIP-714's ``principal``
    label is often written, is a ``User:``). ClientTextError for label text no row can hold."""
    principal, ignored = client.principal, False
    if labels.principal:
        if trusted_forwarder:
            asserted = labels.principal if ":" in labels.principal else f"User:{labels.principal}"
            principal = check_client_text("principal", asserted)
        else:
            ignored = True
    software_name, software_version = client.client_software_name, client.client_software_version
    if software_name in (None, UNKNOWN_SOFTWARE) and labels.client_software_name:
        software_name = check_client_text(
            "client_software_name", labels.client_software_name, limits.max_software_chars
        )
    if software_version in (None, UNKNOWN_SOFTWARE) and labels.client_software_version:
        software_version = check_client_text(
            "client_software_version", labels.client_software_version, limits.max_software_chars
        )
    client_id = client.client_id
    if client_id is None and labels.client_id is not None:
        client_id = check_client_text("client_id", labels.client_id, limits.max_client_id_chars)
    address, port = client.client_source_address, client.client_source_port
    if labels.client_source_address:
        address = check_client_text(
            "client_source_address", labels.client_source_address, limits.max_software_chars
        )
        port = _port(labels.client_source_port)
    forwarded = client._replace(
        client_id=client_id,
        client_software_name=software_name,
        client_software_version=software_version,
        client_source_address=address,
        client_source_port=port,
        principal=principal,
    )
    return forwarded, ignored


def _port(text: str | None) -> int | None:
    """A label's port, if it is one."""
    if text is None or not text.isdigit():
        return None
    port = int(text)
    return port if port <= 65535 else None


def otlp_instance_id(header: str | None, labels: Labels, client: ClientContext) -> uuid.UUID:
    """The client instance of (one client's part of) an OTLP push (see the module docstring);
    ValueError for a bad header."""
    from_header = parse_instance_id(header)
    if from_header is not None:
        return from_header
    try:
        from_labels = parse_instance_id(labels.client_instance_id)
    except ValueError:
        from_labels = None  # a foreign client's attribute: derive one instead of refusing the push
    if from_labels is not None and from_labels.int != 0:
        return from_labels
    # the transports refused bad text already; a context built elsewhere is refused here, by name
    parts = (
        check_client_text("principal", client.principal),
        check_client_text("client_id", client.client_id or ""),
        client.client_source_address or "",
        labels.service_name or "",
        labels.service_instance_id or "",
    )
    return uuid.uuid5(_OTLP_INSTANCE_NAMESPACE, "\0".join(parts))
