"""Who is asking: the ``ClientContext`` of a request, from what the transport can vouch for.

- Principal: the subject of the client's TLS certificate under mTLS (``User:<subject>``), else
  ``User:ANONYMOUS``. A client can never choose its principal through a header. (Bearer tokens and
  a trusted fronting proxy come with the rest of the front end.)
- Client id, software name and version: request metadata, the gRPC equivalents of Kafka's request
  header and ApiVersions request: ``x-kafka-client-id``, ``x-kafka-client-software-name``,
  ``x-kafka-client-software-version``. Software name and version are ``unknown`` when a client sends
  other metadata but not them, as a Kafka broker records clients that send no ApiVersions info.
- Source address and port: the connection's peer, as the transport reports it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Final

from subscriptions import ClientContext

__all__ = [
    "ANONYMOUS",
    "CLIENT_ID_HEADER",
    "SOFTWARE_NAME_HEADER",
    "SOFTWARE_VERSION_HEADER",
    "client_context",
    "parse_grpc_peer",
    "principal_from_auth_context",
]

ANONYMOUS: Final = "User:ANONYMOUS"
CLIENT_ID_HEADER: Final = "x-kafka-client-id"
SOFTWARE_NAME_HEADER: Final = "x-kafka-client-software-name"
SOFTWARE_VERSION_HEADER: Final = "x-kafka-client-software-version"


def parse_grpc_peer(peer: str) -> tuple[str | None, int | None]:
    """``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` -> (address, port); anything else -> (None, None).

    IPv6 addresses are written out in full, as Java's ``InetAddress.getHostAddress`` does (TEL-6)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None, None
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None, None
    text = (
        address.exploded
        if address.version == 4
        else ":".join(f"{int(g, 16):x}" for g in address.exploded.split(":"))
    )
    return text, int(port) if port.isdigit() else None


def principal_from_auth_context(auth_context: Mapping[str, Iterable[bytes]]) -> str:
    """``User:<certificate subject>`` when the peer presented a verified certificate, else anonymous."""
    subjects = list(auth_context.get("x509_subject") or [])
    if subjects:
        return "User:" + subjects[0].decode("utf-8", "replace")
    return ANONYMOUS


def client_context(
    metadata: Iterable[tuple[str, str | bytes]],
    peer: str,
    auth_context: Mapping[str, Iterable[bytes]] | None = None,
) -> ClientContext:
    """The client context of one gRPC request."""
    headers = {key.lower(): value.decode() if isinstance(value, bytes) else value for key, value in metadata}
    address, port = parse_grpc_peer(peer)
    return ClientContext(
        client_id=headers.get(CLIENT_ID_HEADER),
        client_software_name=headers.get(SOFTWARE_NAME_HEADER, "unknown"),
        client_software_version=headers.get(SOFTWARE_VERSION_HEADER, "unknown"),
        client_source_address=address,
        client_source_port=port,
        principal=principal_from_auth_context(auth_context or {}),
    )
