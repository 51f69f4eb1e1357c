"""Kafka's wire format as the listener speaks it: frames, request and response headers, and the API
versions the listener implements, all through the ``kio`` package's schemas and serialisers.

- A frame is a 4-byte big-endian size and that many bytes. A request starts with its header: api key
  (int16), api version (int16), correlation id (int32), client id (nullable string), then, in the
  flexible versions of an API, tagged fields (request header v2; v1 otherwise). The body follows.
- A response is the correlation id (response header v0) plus tagged fields in flexible versions
  (v1), except that ApiVersions always answers with header v0 so that a client can read the answer to
  a version it had to guess.
- ``SUPPORTED_VERSIONS`` is exactly what is implemented and what ApiVersions advertises.
- Bodies are read leniently: bytes after the last field are ignored (librdkafka's all-topics Metadata
  v12 request carries some).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import cache
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity

__all__ = [
    "ALTER_CLIENT_QUOTAS",
    "API_VERSIONS",
    "DESCRIBE_CLIENT_QUOTAS",
    "DESCRIBE_CLUSTER",
    "FRAME_SIZE",
    "GET_TELEMETRY_SUBSCRIPTIONS",
    "METADATA",
    "PUSH_TELEMETRY",
    "SUPPORTED_VERSIONS",
    "FrameError",
    "RequestHeader",
    "build",
    "encode_response",
    "parse_request",
    "peek_header",
    "response_schema",
]

METADATA: Final = 3
API_VERSIONS: Final = 18
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_CLUSTER: Final = 60
GET_TELEMETRY_SUBSCRIPTIONS: Final = 71
PUSH_TELEMETRY: Final = 72

SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = MappingProxyType(
    {
        METADATA: (0, 12),
        API_VERSIONS: (0, 3),
        DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ALTER_CLIENT_QUOTAS: (0, 1),
        DESCRIBE_CLUSTER: (0, 1),
        GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
        PUSH_TELEMETRY: (0, 0),
    }
)
"""api key -> (min, max) version: what the listener answers, and all it advertises."""

FRAME_SIZE: Final = struct.Struct(">i")
_HEADER_START: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_MIN_HEADER_BYTES: Final = _HEADER_START.size + 2  # + the client id's length


class FrameError(ValueError):
    """A request that cannot be read: the connection is closed, as a broker closes it."""


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request, read before anything else is known."""
    if len(frame) < _MIN_HEADER_BYTES:
        raise FrameError(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER_START.unpack_from(frame)
    return api_key, api_version, correlation_id


@cache
def _request_codec(api_key: int, api_version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    schema = load_request_schema(api_key, api_version)
    return entity_reader(schema.__header_schema__), entity_reader(schema)


def parse_request(frame: bytes, api_key: int, api_version: int) -> tuple[RequestHeader, Any]:
    """The header and body of a request of a supported API version; FrameError when they do not
    parse. Bytes after the body are ignored."""
    header_reader, body_reader = _request_codec(api_key, api_version)
    try:
        header, offset = header_reader(frame, 0)
        body, _ = body_reader(frame, offset)
    except Exception as exc:  # kio's DecodeError family, and whatever a hostile frame provokes
        raise FrameError(f"a malformed {api_key}v{api_version} request: {exc!r}") from exc
    return RequestHeader(api_key, api_version, header.correlation_id, header.client_id), body


@cache
def response_schema(api_key: int, api_version: int) -> type[Entity]:
    return load_response_schema(api_key, api_version)


@cache
def _response_codec(api_key: int, api_version: int) -> tuple[Callable[..., Any], Callable[..., Any], Any]:
    schema = response_schema(api_key, api_version)
    header_schema = schema.__header_schema__  # type: ignore[attr-defined]
    return entity_writer(header_schema), entity_writer(schema), header_schema


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Entity) -> bytes:
    """The size-prefixed response frame: header (v0 or v1, as the schema says) and body."""
    write_header, write_body, header_schema = _response_codec(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_schema(correlation_id=correlation_id))
    write_body(buffer, body)
    frame = buffer.getbuffer()
    FRAME_SIZE.pack_into(frame, 0, len(frame) - 4)
    data = bytes(frame)
    frame.release()
    return data


@cache
def _field_names(schema: type[Entity]) -> frozenset[str]:
    return frozenset(f.name for f in fields(schema))


def build(schema: type[Entity], **values: Any) -> Any:
    """An entity of ``schema`` from the values it has fields for (one call serves every version of a
    message, whose fields differ); fields not given take their defaults."""
    names = _field_names(schema)
    return schema(**{k: v for k, v in values.items() if k in names})
