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
- Before kio reads a body, every length in it (strings, bytes, arrays, tagged fields) is checked
  against the bytes the frame has left (``check_lengths``): kio's native reader reserves memory for an
  array's declared length before reading it, so a 29-byte frame declaring 2**32 topics would otherwise
  abort the process.
- The same walk bounds what a request may hold, each bound checked as soon as its length is read, so
  a refused request costs the walk up to that length and no more:

  | what | at most | why |
  |---|---|---|
  | a string | 32,767 bytes (``MAX_STRING_BYTES``) | Kafka's generated readers refuse longer ones |
  | Metadata topics | 10,000 (``MAX_METADATA_TOPICS``) | more than a telemetry client asks about |
  | DescribeClientQuotas components | 3 | one per entity type (user, client-id, ip) |
  | AlterClientQuotas entries | 1,000 | a bulk change; more takes several requests |
  | AlterClientQuotas entity parts, ops per entry | 3, 64 | one per entity type; a few quota keys |
  | any other array | 10,000 (``MAX_ARRAY_ITEMS``) | |
  | tagged fields of one struct | 64 (``MAX_TAGGED_FIELDS``) | Kafka's schemas define a handful |

  A request over any of them raises ``FrameError`` (the listener closes the connection). The walk is
  linear in the frame's size (every array item, string and tagged field takes at least one byte of
  it); ``check_lengths`` returns the number of steps it took (``FrameError.work`` when it refuses).
"""

from __future__ import annotations

import io
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import cache
from types import MappingProxyType
from typing import Any, Final, NamedTuple, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.protocol import Entity

__all__ = [
    "ALTER_CLIENT_QUOTAS",
    "ALTER_CONFIGS",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "API_KEY",
    "API_VERSIONS",
    "DESCRIBE_CLIENT_QUOTAS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_USER_SCRAM_CREDENTIALS",
    "FRAME_SIZE",
    "GET_TELEMETRY_SUBSCRIPTIONS",
    "INCREMENTAL_ALTER_CONFIGS",
    "LIST_CONFIG_RESOURCES",
    "MAX_ARRAY_ITEMS",
    "MAX_METADATA_TOPICS",
    "MAX_STRING_BYTES",
    "MAX_TAGGED_FIELDS",
    "METADATA",
    "PUSH_TELEMETRY",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SUPPORTED_VERSIONS",
    "FrameError",
    "RequestHeader",
    "build",
    "check_lengths",
    "encode_response",
    "nested",
    "parse_request",
    "peek_header",
    "response_schema",
]

METADATA: Final = 3
DESCRIBE_CONFIGS: Final = 32
ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
SASL_HANDSHAKE: Final = 17
API_VERSIONS: Final = 18
SASL_AUTHENTICATE: Final = 36
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
DESCRIBE_CLUSTER: Final = 60
GET_TELEMETRY_SUBSCRIPTIONS: Final = 71
PUSH_TELEMETRY: Final = 72
LIST_CONFIG_RESOURCES: Final = 74

SUPPORTED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = MappingProxyType(
    {
        METADATA: (0, 13),
        DESCRIBE_CONFIGS: (1, 4),
        ALTER_CONFIGS: (0, 2),
        INCREMENTAL_ALTER_CONFIGS: (0, 1),
        SASL_HANDSHAKE: (0, 1),
        API_VERSIONS: (0, 4),
        SASL_AUTHENTICATE: (0, 2),
        DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ALTER_CLIENT_QUOTAS: (0, 1),
        DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        DESCRIBE_CLUSTER: (0, 2),
        GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
        PUSH_TELEMETRY: (0, 0),
        LIST_CONFIG_RESOURCES: (0, 1),
    }
)
"""api key -> (min, max) version: what the listener answers, and all it advertises."""

FRAME_SIZE: Final = struct.Struct(">i")
API_KEY: Final = struct.Struct(">h")
"""The first field of a request: what a listener peeks at to choose the frame's size limit."""
_HEADER_START: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_MIN_HEADER_BYTES: Final = _HEADER_START.size + 2  # + the client id's length


class FrameError(ValueError):
    """A request that cannot be read: the connection is closed, as a broker closes it."""

    work: int = 0
    """The steps ``check_lengths`` took before refusing the request (0: refused before it ran)."""


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
def _request_codec(
    api_key: int, api_version: int
) -> tuple[type[Entity], Callable[..., Any], Callable[..., Any]]:
    """The request schema and its header and body readers, looked up once per API version."""
    schema = load_request_schema(api_key, api_version)
    return schema, entity_reader(schema.__header_schema__), entity_reader(schema)


def parse_request(frame: bytes, api_key: int, api_version: int) -> tuple[RequestHeader, Any]:
    """The header and body of a request of a supported API version; FrameError when they do not
    parse. Bytes after the body are ignored."""
    schema, header_reader, body_reader = _request_codec(api_key, api_version)
    try:
        header, offset = header_reader(frame, 0)  # from 0: what it read is where the body starts
    except Exception as exc:
        raise FrameError(f"a malformed {api_key}v{api_version} request header: {exc!r}") from exc
    check_lengths(schema, frame, offset)
    try:
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


def nested(schema: type[Any], name: str) -> type[Any]:
    """A nested entity of a message's version, e.g. ``MetadataResponseBroker`` of Metadata v12."""
    return getattr(sys.modules[schema.__module__], name)  # type: ignore[no-any-return]


def build(schema: type[Entity], **values: Any) -> Any:
    """An entity of ``schema`` from the values it has fields for (one call serves every version of a
    message, whose fields differ); fields not given take their defaults."""
    names = _field_names(schema)
    return schema(**{k: v for k, v in values.items() if k in names})


# -- lengths before kio ---------------------------------------------------------------------------

_FIXED_SIZES: Final = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_STRING: Final = 0
_BYTES: Final = 1
_ARRAY: Final = 2

MAX_STRING_BYTES: Final = 32_767
MAX_METADATA_TOPICS: Final = 10_000
MAX_ARRAY_ITEMS: Final = 10_000
MAX_TAGGED_FIELDS: Final = 64
_MAX_ITEMS: Final[Mapping[tuple[str, str], int]] = MappingProxyType(
    {
        ("MetadataRequest", "topics"): MAX_METADATA_TOPICS,
        ("DescribeClientQuotasRequest", "components"): 3,
        ("AlterClientQuotasRequest", "entries"): 1_000,
        ("EntryData", "entity"): 3,
        ("EntryData", "ops"): 64,
    }
)
"""(entity, array field) -> the most items a request may hold there (every version of the API);
``MAX_ARRAY_ITEMS`` for any other array."""


class _Cursor:
    """Where the check is in the frame, and how many steps it took; every step fails with FrameError
    past the frame's end."""

    __slots__ = ("at", "frame", "steps")

    def __init__(self, frame: bytes, at: int) -> None:
        self.frame = frame
        self.at = at
        self.steps = 0

    def skip(self, size: int) -> None:
        self.steps += 1
        if size < 0 or self.at + size > len(self.frame):
            raise FrameError(f"a length of {size} with {len(self.frame) - self.at} bytes left in the request")
        self.at += size

    def unsigned_varint(self) -> int:
        self.steps += 1
        value = shift = 0
        while True:
            if self.at >= len(self.frame) or shift > 28:
                raise FrameError("a malformed varint in the request")
            byte = self.frame[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, kind: int, flexible: bool, nullable: bool, maximum: int) -> int:
        """A string's, bytes' or array's length (-1: null); FrameError if the frame cannot hold it, if
        it is over ``maximum``, or for a null where the schema has none."""
        if flexible:
            length = self.unsigned_varint() - 1
        else:
            codec = _INT16 if kind == _STRING else _INT32
            if self.at + codec.size > len(self.frame):
                raise FrameError("the request ends inside a length")
            (length,) = codec.unpack_from(self.frame, self.at)
            self.at += codec.size
        if length < -1 or length > len(self.frame) - self.at:  # an item takes at least one byte
            raise FrameError(
                f"a length of {length} with {len(self.frame) - self.at} bytes left in the request"
            )
        if length == -1 and not nullable:
            raise FrameError("a null length where the schema has no null")
        if length > maximum:
            raise FrameError(f"a length of {length} where at most {maximum} are read")
        return length


def _primitive(cursor: _Cursor, kafka_type: str, flexible: bool, nullable: bool) -> None:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        cursor.skip(size)
    elif kafka_type == "string":
        cursor.skip(max(cursor.length(_STRING, flexible, nullable, MAX_STRING_BYTES), 0))
    elif kafka_type in ("bytes", "records"):
        cursor.skip(max(cursor.length(_BYTES, flexible, nullable, len(cursor.frame)), 0))
    else:
        raise FrameError(f"a field of kafka type {kafka_type} is not checked")


_Step = tuple[str, Any, bool, int]
"""("primitive" | "primitives" | "entity" | "entities", type, nullable, most items of an array)"""


@cache
def _steps(schema: type[Entity]) -> tuple[_Step, ...]:
    """The untagged fields of an entity in wire order, classified once."""
    steps: list[_Step] = []
    for field in fields(schema):
        if "tag" in field.metadata:
            continue  # in the tagged section
        kind = classify_field(field)
        nullable = _nullable(field)
        most = _MAX_ITEMS.get((schema.__name__, field.name), MAX_ARRAY_ITEMS)
        if isinstance(kind, EntityTupleField):
            steps.append(("entities", kind.type_, nullable, most))
        elif isinstance(kind, EntityField):
            steps.append(("entity", kind.type_, nullable, 0))
        elif isinstance(kind, PrimitiveTupleField):
            steps.append(("primitives", field.metadata["kafka_type"], nullable, most))
        else:
            steps.append(("primitive", field.metadata["kafka_type"], nullable, 0))
    return tuple(steps)


def _nullable(field: Any) -> bool:
    """Whether the schema lets the field be null: an optional type (``X | None``; for an array,
    ``tuple[X, ...] | None``, while ``tuple[X | None, ...]`` has nullable items, not a nullable array)."""
    if get_origin(field.type) is tuple:
        return False
    return bool(is_optional(field))


def _entity(cursor: _Cursor, schema: type[Entity]) -> None:
    cursor.steps += 1
    flexible = bool(schema.__flexible__)
    for step, kind, nullable, most in _steps(schema):
        if step == "primitive":
            _primitive(cursor, kind, flexible, nullable)
        elif step == "entity":
            if nullable:  # a nullable struct: an int8 marker, -1 for null
                cursor.skip(1)
                if cursor.frame[cursor.at - 1] == 0xFF:
                    continue
            _entity(cursor, kind)
        else:
            for _ in range(max(cursor.length(_ARRAY, flexible, nullable, most), 0)):
                if step == "entities":
                    _entity(cursor, kind)
                else:
                    _primitive(cursor, kind, flexible, False)
    if flexible:  # the tagged fields: a count, then (tag, size, bytes) each
        count = cursor.unsigned_varint()
        if count > MAX_TAGGED_FIELDS:
            raise FrameError(f"{count} tagged fields where at most {MAX_TAGGED_FIELDS} are read")
        for _ in range(count):
            cursor.unsigned_varint()
            cursor.skip(cursor.unsigned_varint())


def check_lengths(schema: type[Entity], frame: bytes, offset: int) -> int:
    """FrameError unless every length in the body at ``offset`` fits in the frame and within the
    bounds above; the number of steps the walk took."""
    cursor = _Cursor(frame, offset)
    try:
        _entity(cursor, schema)
    except FrameError as exc:
        exc.work = cursor.steps
        raise
    return cursor.steps
