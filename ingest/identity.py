"""Who is asking: the ``ClientContext`` of a request, from what the transport can vouch for.

- Principal: a bearer token's principal (``security.tokens_file``), else the subject of the client's
  TLS certificate under mTLS (``User:<subject>``), else ``User:ANONYMOUS``. A client can never choose
  its principal through a header; only a fronting proxy inside ``security.trusted_proxies`` is
  believed (``x-forwarded-client-cert``, ``x-forwarded-for``). The rules are ``security``'s
  ``Authenticator``; an unknown token raises its ``AuthenticationError``.
- Client id, software name and version: request headers (gRPC metadata or HTTP headers), the
  equivalents of Kafka's request header and ApiVersions request: ``x-kafka-client-id``,
  ``x-kafka-client-software-name``, ``x-kafka-client-software-version``. Software name and version
  are ``unknown`` when a client does not send them, as a Kafka broker records clients that send no
  ApiVersions info.
- Source address and port: the connection's peer (or what a trusted proxy forwards), the address
  written as Java writes it (TEL-6).
- The client instance of an OTLP push (which has no GetTelemetrySubscriptions to assign one), in
  order: the ``x-kafka-client-instance-id`` header; the resource attribute ``client_instance_id`` of
  the first resource; else a stable UUID derived (UUIDv5) from the principal, client id, source address
  and the resource's ``service.name`` and ``service.instance.id``. Ids are written as UUIDs or in
  Kafka's 22-character base64 form.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import uuid
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

from ingest.security import ANONYMOUS, Authenticator
from subscriptions import ClientContext

__all__ = [
    "ANONYMOUS",
    "CLIENT_ID_HEADER",
    "INSTANCE_ID_ATTRIBUTE",
    "INSTANCE_ID_HEADER",
    "OPEN",
    "SOFTWARE_NAME_HEADER",
    "SOFTWARE_VERSION_HEADER",
    "grpc_client_context",
    "http_client_context",
    "java_host_address",
    "otlp_instance_id",
    "parse_grpc_peer",
    "parse_instance_id",
    "principal_from_auth_context",
    "principal_from_peercert",
]

OPEN: Final = Authenticator()
"""No tokens file, no trusted proxy: the certificate's principal or ``User:ANONYMOUS``."""
CLIENT_ID_HEADER: Final = "x-kafka-client-id"
SOFTWARE_NAME_HEADER: Final = "x-kafka-client-software-name"
SOFTWARE_VERSION_HEADER: Final = "x-kafka-client-software-version"
INSTANCE_ID_HEADER: Final = "x-kafka-client-instance-id"
INSTANCE_ID_ATTRIBUTE: Final = "client_instance_id"
_OTLP_INSTANCE_NAMESPACE: Final = uuid.UUID("6f0c1f5e-2b1d-5c43-9a57-7d3e1b0a9c14")
_SHORT_NAMES: Final = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
}


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
    """gRPC: ``User:<certificate subject>`` when the peer presented a verified certificate."""
    subjects = list(auth_context.get("x509_subject") or [])
    if subjects:
        return "User:" + subjects[0].decode("utf-8", "replace")
    return ANONYMOUS


def principal_from_peercert(peercert: Mapping[str, Any] | None) -> str:
    """HTTP: ``User:<subject>`` from an ``ssl`` peer certificate (``CN=..,O=..``), else anonymous."""
    subject = (peercert or {}).get("subject") or ()
    parts = [f"{_SHORT_NAMES.get(key, key)}={value}" for rdn in subject for key, value in rdn]
    return "User:" + ",".join(parts) if parts else ANONYMOUS


def _context(
    headers: Mapping[str, str],
    address: str | None,
    port: int | None,
    certificate_principal: str,
    authenticator: Authenticator,
) -> ClientContext:
    principal, address, port = authenticator.authenticate(headers, address, port, certificate_principal)
    return ClientContext(
        client_id=headers.get(CLIENT_ID_HEADER),
        client_software_name=headers.get(SOFTWARE_NAME_HEADER, "unknown"),
        client_software_version=headers.get(SOFTWARE_VERSION_HEADER, "unknown"),
        client_source_address=java_host_address(address) if address else None,
        client_source_port=port,
        principal=principal,
    )


def grpc_client_context(
    metadata: Iterable[tuple[str, str | bytes]],
    peer: str,
    auth_context: Mapping[str, Iterable[bytes]] | None = None,
    authenticator: Authenticator = OPEN,
) -> ClientContext:
    """The client context of one gRPC request; AuthenticationError for an unknown bearer token."""
    headers = {key.lower(): value.decode() if isinstance(value, bytes) else value for key, value in metadata}
    address, port = parse_grpc_peer(peer)
    return _context(headers, address, port, principal_from_auth_context(auth_context or {}), authenticator)


def http_client_context(
    headers: Mapping[str, str],
    peername: tuple[Any, ...] | None,
    peercert: Mapping[str, Any] | None = None,
    authenticator: Authenticator = OPEN,
) -> ClientContext:
    """The client context of one HTTP request (``peername`` as the socket reports it);
    AuthenticationError for an unknown bearer token."""
    lowered = {key.lower(): value for key, value in headers.items()}
    address = java_host_address(str(peername[0])) if peername else None
    port = int(peername[1]) if peername and len(peername) > 1 else None
    return _context(lowered, address, port, principal_from_peercert(peercert), authenticator)


def parse_instance_id(value: str | None) -> uuid.UUID | None:
    """A UUID (dashes optional) or Kafka's base64 form; None or empty means none; ValueError else."""
    if not value:
        return None
    if len(value) == 22:
        try:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(value + "=="))
        except (binascii.Error, ValueError):
            pass
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValueError(f"client_instance_id {value!r} is not a UUID") from None


def otlp_instance_id(
    header: str | None, resource_attributes: Mapping[str, str], client: ClientContext
) -> uuid.UUID:
    """The client instance of an OTLP push (see the module docstring); ValueError for a bad header."""
    from_header = parse_instance_id(header)
    if from_header is not None:
        return from_header
    try:
        from_resource = parse_instance_id(resource_attributes.get(INSTANCE_ID_ATTRIBUTE))
    except ValueError:
        from_resource = None  # a foreign client's attribute: derive one instead of refusing the push
    if from_resource is not None:
        return from_resource
    parts = (
        client.principal,
        client.client_id or "",
        client.client_source_address or "",
        resource_attributes.get("service.name", ""),
        resource_attributes.get("service.instance.id", ""),
    )
    return uuid.uuid5(_OTLP_INSTANCE_NAMESPACE, "\0".join(parts))
