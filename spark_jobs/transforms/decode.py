"""Decoding bronze ``telemetry_pushes`` into silver ``metric_points`` rows: ``decode_batches``, which the
decode job runs as ``DataFrame.mapInArrow(decode_batches, DECODED_SCHEMA)``. This module owns the
mapping of OTLP ``MetricsData`` onto the ``metric_points`` columns (documented in ``spark_jobs.tables``),
the data-model checks and per-push bounds that send a push to ``decode_quarantine`` instead, the string
form of attribute values and the series key ``attributes_key``. Pure pyarrow and opentelemetry-proto: no
Spark.

An output row is either a data point (``quarantine_reason`` and ``payload`` null) or a push that did not
decode (``quarantine_reason`` and ``payload`` set, the push's own columns and ``date`` of
``received_at``, every other column null). A push is decoded whole or quarantined whole.

One push can never fail a decode run. Each push is held to ``PushBounds`` before its points are
expanded, and any exception while decoding it quarantines that push alone; the rest of its batch decodes:

- ``max_payload_bytes`` (64 MiB): the payload's length, before parsing. Reason: ``payload of N bytes
  over the max_payload_bytes bound (67108864)``.
- ``max_text_bytes`` (64 KiB): each push text column (push id, client instance id, principal, client
  id, software name and version, quota entity), before parsing. Reason: ``client_id of N bytes over the
  max_text_bytes bound (65536)``.
- ``max_data_points`` (200,000): data points, counted on the wire format before parsing (payloads of
  more than 400 KB: a smaller one cannot hold more), the count stopping at the bound. Reason: ``at least
  200001 data points over the max_data_points bound (200000)``.
- ``max_metric_fields`` (1,000,000): the other protobuf fields of the resources, scopes, metrics and
  metric data (empty metrics cost parsing memory too), counted alongside. Reason: ``at least 1000001
  fields around the data points over the max_metric_fields bound (1000000)``.
- ``max_repeated_bytes`` (1 GiB): the push, resource and metric text copied into each point row, summed
  over the rows, from the parsed push before its points are expanded. Reason: ``N bytes of text
  repeated into its rows over the max_repeated_bytes bound (1073741824)``.

The sink itself accepts at most 100,000 data points per payload (``limits.max_data_points``), so the
defaults quarantine nothing it accepts today. Other reasons: ``no payload``; ``not OTLP MetricsData:
...`` (the payload does not parse, or the wire count cannot read it: truncated, or protobuf groups);
``attributes are not OTLP KeyValues: ...``; ``metric <name>: ...`` (a point breaks the data model, or a
value its column cannot hold); ``decode failed: <exception type>: <message>`` (anything else: a
``RecursionError``, a ``MemoryError``, ...).

Output batches hold at most ``max_rows`` rows (``MAX_BATCH_ROWS``) and about ``max_bytes`` bytes
(``MAX_BATCH_BYTES``) of text (one row may go over on its own): the pushes of an input batch are decoded
in rounds, a round ends before a push that would take it over ``max_rows`` points or ``max_bytes``
payload bytes, and its rows are cut into output batches by rows and by the estimated text each row
holds (the push columns, resource and metric text, attributes). The Arrow output must hold plain strings
(Spark takes no dictionary-encoded columns), so text repeated into each row is copied per row, but only
one output batch's worth at a time, and at most ``max_repeated_bytes`` per push.

How it keeps up (see ``benchmarks/rollup/decode_micro.py``):

- payloads are parsed with a view of ``MetricsData`` that declares every ``KeyValue`` field ``bytes``
  (the same wire format), so parsing leaves attributes serialized. A point's attributes, as the tuple of
  those bytes, key the round's table of distinct attribute sets; each distinct serialized key-value is
  parsed (and so validated) with the real ``KeyValue`` once per call;
- the points of a push are gathered per kind and read one field at a time with list comprehensions;
- what repeats per metric, per resource, per attribute set or per push is converted to Arrow once per
  distinct value and expanded with ``take``, per output batch; timestamps and dates come from Arrow
  kernels.
"""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from spark_jobs.errors import SparkJobError
from spark_jobs.tables import METRIC_POINTS_SCHEMA

__all__ = [
    "BRONZE_COLUMNS",
    "DECODED_SCHEMA",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_ROWS",
    "PUSH_BOUNDS",
    "PUSH_TEXT_COLUMNS",
    "PushBounds",
    "attributes_key",
    "decode_batches",
]

BRONZE_COLUMNS: Final[tuple[str, ...]] = (
    "push_id",
    "received_at",
    "client_instance_id",
    "principal",
    "client_id",
    "client_software_name",
    "client_software_version",
    "quota_entity",
    "payload",
)
"""The ``telemetry_pushes`` columns ``decode_batches`` reads."""

DECODED_SCHEMA: Final[pa.Schema] = pa.schema(
    [field.with_nullable(True) for field in METRIC_POINTS_SCHEMA]
    + [pa.field("quarantine_reason", pa.string()), pa.field("payload", pa.binary())]
)
"""``metric_points`` (every column nullable), then the quarantine reason and payload of a failed push."""

MAX_BATCH_ROWS: Final = 65_536
"""The most rows of an output batch."""
MAX_BATCH_BYTES: Final = 64 << 20
"""About the most bytes of text an output batch holds, and the payload bytes of one decode round."""


@dataclass(frozen=True, slots=True)
class PushBounds:
    """What one push may cost the decode (see the module docstring); a push over one is quarantined."""

    max_payload_bytes: int = 64 << 20
    max_text_bytes: int = 64 << 10
    max_data_points: int = 200_000
    max_metric_fields: int = 1_000_000
    max_repeated_bytes: int = 1 << 30


PUSH_BOUNDS: Final = PushBounds()
"""The bounds the decode job applies."""

_PUSH_COLUMNS: Final = tuple(name for name in BRONZE_COLUMNS if name != "payload")
"""Copied from the push to each of its rows."""
PUSH_TEXT_COLUMNS: Final = tuple(name for name in _PUSH_COLUMNS if name != "received_at")
"""The push columns held to ``max_text_bytes``."""
_ROW_BYTES: Final = 128
"""What a row costs besides its text, for cutting output batches by bytes."""
_TS: Final = pa.timestamp("us", tz="UTC")
_MAP: Final = pa.map_(pa.string(), pa.string())
_NANOS_PER_MICRO: Final = pa.scalar(1000, pa.uint64())
_NULL_TS: Final = pa.scalar(None, _TS)
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_MAX_CACHED_KEY_VALUES: Final = 1 << 18
_MAX_CACHED_KEY_VALUE_BYTES: Final = 64 << 20
_MAX_REASON_CHARS: Final = 1000
_CANONICAL_JSON: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
"""``json.dumps(..., sort_keys=True, separators=(",", ":"))`` without making an encoder per call."""
_TEMPORALITIES: Final = {
    metrics_pb2.AGGREGATION_TEMPORALITY_DELTA: "delta",
    metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE: "cumulative",
}
_GROUP_OF_KIND: Final = {
    "sum": "number",
    "gauge": "number",
    "histogram": "histogram",
    "exponential_histogram": "exponential_histogram",
    "summary": "summary",
}
"""Each metric kind's point type."""
_HEADER_COLUMNS: Final = (
    "metric_name",
    "metric_unit",
    "metric_description",
    "metric_kind",
    "temporality",
    "is_monotonic",
    "scope_name",
    "scope_version",
)
"""What a point has from its metric and scope: its metric's header."""
_COMMON_COLUMNS: Final = ("header_index", "source_index", "attribute_index", "time", "start_time", "flags")
"""Gathered for every point: indices into the round's headers, sources and attribute sets; point fields."""
_GROUP_COLUMNS: Final = {
    "number": ("value",),
    "histogram": ("count", "sum", "min", "max", "explicit_bounds", "bucket_counts"),
    "exponential_histogram": (
        "count",
        "sum",
        "min",
        "max",
        "scale",
        "zero_count",
        "zero_threshold",
        "positive_offset",
        "positive_bucket_counts",
        "negative_offset",
        "negative_bucket_counts",
    ),
    "summary": ("count", "sum", "quantiles"),
}
"""The point columns of each point type (the others are null for its rows)."""
_WALKED: Final = ({1}, {2}, {2}, {5, 7, 9, 10, 11})
"""What the wire count walks into, per level (``MetricsData``, ``ResourceMetrics``, ``ScopeMetrics``,
``Metric``): ``resource_metrics``, ``scope_metrics``, ``metrics`` and the metric's data (``gauge``,
``sum``, ``histogram``, ``exponential_histogram``, ``summary``), whose field 1 is ``data_points``."""
_POINTS_LEVEL: Final = len(_WALKED)


def _key_values_as_bytes(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in message.field:
            if field.type_name == "." + KeyValue.DESCRIPTOR.full_name:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                field.ClearField("type_name")
        _key_values_as_bytes(message.nested_type)


def _metrics_data_view() -> type[Message]:
    """``MetricsData`` with every ``KeyValue`` field declared ``bytes``, in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: FileDescriptor) -> None:
        if file.name in added:
            return
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        _key_values_as_bytes(proto.message_type)
        pool.Add(proto)
        added.add(file.name)

    add(metrics_pb2.DESCRIPTOR)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(metrics_pb2.MetricsData.DESCRIPTOR.full_name)
    )


_METRICS_DATA: Final = _metrics_data_view()


def attributes_key(attrs: Mapping[str, str]) -> str:
    """The series key of a point's attributes: canonical JSON, sorted keys, compact (``{}`` for none)."""
    return _CANONICAL_JSON.encode(attrs if isinstance(attrs, dict) else dict(attrs))


def _value_string(value: AnyValue) -> str:
    """An attribute value as written in ``metric_points``."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind is None:
        return ""
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return b64encode(value.bytes_value).decode("ascii")
    return _CANONICAL_JSON.encode(_json_value(value))


def _json_value(value: AnyValue) -> object:
    """An array or key-value list element as a JSON value (unset: null)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_json_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _json_value(item.value) for item in value.kvlist_value.values}
    if kind == "bytes_value":
        return b64encode(value.bytes_value).decode("ascii")
    return None if kind is None else getattr(value, kind)


class _InvalidPushError(SparkJobError):
    """The push does not decode; the message is the quarantine reason."""


class _InvalidPointError(SparkJobError):
    """Point number ``index`` of the points being read breaks the data model."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index


def _check_max(values: list[int], limit: int, what: str) -> None:
    top = max(values, default=0)
    if top > limit:
        raise _InvalidPointError(values.index(top), f"{what} {top} out of range")


def _check_counts(counts: list[int], *bucket_counts: list[list[int]]) -> None:
    _check_max(counts, _INT64_MAX, "count")
    for buckets in bucket_counts:
        _check_max([max(point, default=0) for point in buckets], _INT64_MAX, "bucket count")


def _optional(points: list[Any], field: str) -> list[float | None]:
    return [getattr(point, field) if point.HasField(field) else None for point in points]


def _number_columns(points: list[Any]) -> dict[str, list[Any]]:
    values: list[float | None] = [point.as_double or float(point.as_int) for point in points]
    if 0.0 in values:  # zero in either field, or neither set: ask which
        for i, value in enumerate(values):
            if not value:
                point = points[i]
                kind = point.WhichOneof("value")
                values[i] = None if kind is None else float(getattr(point, kind))
    return {"value": values}


def _histogram_columns(points: list[Any]) -> dict[str, list[Any]]:
    bounds = [point.explicit_bounds[:] for point in points]
    buckets = [point.bucket_counts[:] for point in points]
    for i, (point_bounds, point_buckets) in enumerate(zip(bounds, buckets, strict=True)):
        if point_buckets and len(point_buckets) != len(point_bounds) + 1:
            raise _InvalidPointError(
                i, f"histogram point with {len(point_bounds)} bounds and {len(point_buckets)} bucket counts"
            )
    counts = [point.count for point in points]
    _check_counts(counts, buckets)
    return {
        "count": counts,
        "sum": _optional(points, "sum"),
        "min": _optional(points, "min"),
        "max": _optional(points, "max"),
        "explicit_bounds": bounds,
        "bucket_counts": buckets,
    }


def _exponential_histogram_columns(points: list[Any]) -> dict[str, list[Any]]:
    positive = [point.positive for point in points]
    negative = [point.negative for point in points]
    positive_counts = [buckets.bucket_counts[:] for buckets in positive]
    negative_counts = [buckets.bucket_counts[:] for buckets in negative]
    counts = [point.count for point in points]
    zero_counts = [point.zero_count for point in points]
    _check_counts(counts, positive_counts, negative_counts)
    _check_max(zero_counts, _INT64_MAX, "zero count")
    return {
        "count": counts,
        "sum": _optional(points, "sum"),
        "min": _optional(points, "min"),
        "max": _optional(points, "max"),
        "scale": [point.scale for point in points],
        "zero_count": zero_counts,
        "zero_threshold": [point.zero_threshold for point in points],
        "positive_offset": [buckets.offset for buckets in positive],
        "positive_bucket_counts": positive_counts,
        "negative_offset": [buckets.offset for buckets in negative],
        "negative_bucket_counts": negative_counts,
    }


def _summary_columns(points: list[Any]) -> dict[str, list[Any]]:
    counts = [point.count for point in points]
    _check_counts(counts)
    return {
        "count": counts,
        "sum": [point.sum for point in points],
        "quantiles": [[(q.quantile, q.value) for q in point.quantile_values] for point in points],
    }


_GROUP_DECODERS: Final = {
    "number": _number_columns,
    "histogram": _histogram_columns,
    "exponential_histogram": _exponential_histogram_columns,
    "summary": _summary_columns,
}


def _timestamps(nanos: pa.Array) -> pa.Array:
    """Unsigned nanoseconds since the epoch as ``timestamp[us, UTC]``."""
    return pc.divide(nanos, _NANOS_PER_MICRO).cast(pa.int64()).cast(_TS)


def _utc_dates(timestamps: pa.Array) -> pa.Array:
    """``YYYY-MM-DD`` of each timestamp, formatted once per distinct day."""
    days = timestamps.cast(_TS).cast(pa.date32()).dictionary_encode()
    return days.dictionary.cast(pa.string()).take(days.indices)


def _over(what: str, bound: str, limit: int) -> _InvalidPushError:
    return _InvalidPushError(f"{what} over the {bound} bound ({limit})")


def _reason(exc: Exception) -> str:
    """The quarantine reason of a push whose decode raised ``exc``."""
    if isinstance(exc, _InvalidPushError):
        return str(exc)
    detail = (
        f"decode failed: {type(exc).__name__}: {exc}" if str(exc) else f"decode failed: {type(exc).__name__}"
    )
    return detail[:_MAX_REASON_CHARS]


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[pos:end]`` and the position after it."""
    value = shift = 0
    while pos < end and shift < 64:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _InvalidPushError("not OTLP MetricsData: truncated or overlong varint")


class _WireCount:
    """Counts a serialized ``MetricsData``'s data points, and the other fields of its resources, scopes,
    metrics and metric data, on the wire format and without parsing it; raises ``_InvalidPushError`` as
    soon as a count goes over its bound, or the wire format cannot be read. So a push that parsing would
    blow up (millions of empty points or metrics in a big payload) costs at most the bounds' steps.

    The sink's own scan (``ingest.push.otlp_scan``) is not reused: the Spark side never imports the front end
    (an import contract), and it bounds what the sink accepted, with looser bounds of its own."""

    def __init__(self, payload: bytes, bounds: PushBounds) -> None:
        self.payload = payload
        self.max_points = bounds.max_data_points
        self.max_fields = bounds.max_metric_fields
        self.points = 0
        self.fields = 0

    def walk(self, pos: int, end: int, level: int = 0) -> None:
        buf = self.payload
        while pos < end:
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = _varint(buf, pos, end)
            wire = tag & 7
            if wire == 2:
                length = buf[pos] if pos < end else 0x80
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = _varint(buf, pos, end)
                stop = pos + length
                if stop > end:
                    raise _InvalidPushError("not OTLP MetricsData: truncated")
                if level == _POINTS_LEVEL and tag >> 3 == 1:
                    self.points += 1
                    if self.points > self.max_points:
                        raise _over(f"at least {self.points} data points", "max_data_points", self.max_points)
                else:
                    self._field()
                    if level < _POINTS_LEVEL and tag >> 3 in _WALKED[level]:
                        self.walk(pos, stop, level + 1)
                pos = stop
                continue
            self._field()
            if wire == 0:
                pos = _varint(buf, pos, end)[1]
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise _InvalidPushError(f"not OTLP MetricsData: wire type {wire}")
            if pos > end:
                raise _InvalidPushError("not OTLP MetricsData: truncated")

    def _field(self) -> None:
        self.fields += 1
        if self.fields > self.max_fields:
            raise _over(
                f"at least {self.fields} fields around the data points", "max_metric_fields", self.max_fields
            )


def _parse(payload: bytes, bounds: PushBounds) -> Any:
    """The payload as ``MetricsData`` (the view), counted first when it is big enough to go over a
    count bound (every counted field takes at least 2 bytes)."""
    if len(payload) > 2 * min(bounds.max_data_points, bounds.max_metric_fields):
        _WireCount(payload, bounds).walk(0, len(payload))
    try:
        return _METRICS_DATA.FromString(payload)
    except DecodeError as exc:
        raise _InvalidPushError(f"not OTLP MetricsData: {exc}") from exc


def _text_bytes(*texts: object) -> int:
    """The UTF-8 bytes of the strings among ``texts``."""
    return sum(len(text.encode()) for text in texts if isinstance(text, str))


class _Push:
    """One parsed push, gathered and not yet converted: its resources' serialized attributes and, per
    point type, its points with runs of (metric header, resource number, points). Raises
    ``_InvalidPushError`` when the text it would repeat into its rows goes over ``max_repeated_bytes``,
    before any point is converted."""

    def __init__(self, data: Any, text_bytes: int, payload_bytes: int, bounds: PushBounds) -> None:
        self.resources: list[tuple[bytes, ...]] = []
        self.points: dict[str, list[Any]] = {group: [] for group in _GROUP_COLUMNS}
        self.runs: dict[str, list[tuple[tuple[Any, ...], int, int]]] = {group: [] for group in _GROUP_COLUMNS}
        self.size = 0
        for resource_metrics in data.resource_metrics:
            resource = len(self.resources)
            self.resources.append(tuple(resource_metrics.resource.attributes[:]))
            for scope_metrics in resource_metrics.scope_metrics:
                scope = scope_metrics.scope
                scope_name, scope_version = scope.name, scope.version
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    if kind is None:
                        continue
                    body = getattr(metric, kind)
                    data_points = body.data_points[:]  # a list: faster to build than iterating
                    if not data_points:
                        continue
                    if kind == "sum":
                        temporality = _TEMPORALITIES.get(body.aggregation_temporality)
                        monotonic = body.is_monotonic
                    elif kind in ("histogram", "exponential_histogram"):
                        temporality, monotonic = _TEMPORALITIES.get(body.aggregation_temporality), None
                    else:
                        temporality = monotonic = None
                    header = (
                        metric.name,
                        metric.unit,
                        metric.description,
                        kind,
                        temporality,
                        monotonic,
                        scope_name,
                        scope_version,
                    )
                    group = _GROUP_OF_KIND[kind]
                    self.points[group] += data_points
                    self.runs[group].append((header, resource, len(data_points)))
                    self.size += len(data_points)
        # what a row repeats (resource, scope and metric text) is part of the payload: count it only
        # when the points times the payload could go over
        if self.size * (text_bytes + payload_bytes) > bounds.max_repeated_bytes:
            resource_bytes = [text_bytes + sum(map(len, attributes)) for attributes in self.resources]
            repeated = sum(
                count * (resource_bytes[resource] + _text_bytes(*header))
                for runs in self.runs.values()
                for header, resource, count in runs
            )
            if repeated > bounds.max_repeated_bytes:
                raise _over(
                    f"{repeated} bytes of text repeated into its rows",
                    "max_repeated_bytes",
                    bounds.max_repeated_bytes,
                )


def _metric_name(runs: list[tuple[tuple[Any, ...], int, int]], index: int) -> str:
    """The name of the metric of point number ``index`` of a point type's ``runs``."""
    for header, _, count in runs:
        if index < count:
            name: str = header[0]
            return name
        index -= count
    raise IndexError(index)


class _Headers(dict[tuple[Any, ...], int]):
    """Distinct metric headers (values of the ``_HEADER_COLUMNS``) -> their number, in order of first
    use, with each one's text bytes in ``sizes``: ``headers[header]`` adds a new one."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __missing__(self, header: tuple[Any, ...]) -> int:
        index = self[header] = len(self.sizes)
        self.sizes.append(_text_bytes(*header))
        return index


class _KeyValues(dict[bytes, tuple[str, str]]):
    """Serialized key-value -> (key, value string), shared by the rounds of a call, with the bytes it
    holds in ``size``; ``trim`` empties it once it holds too many or too much."""

    size = 0

    def trim(self) -> None:
        if len(self) > _MAX_CACHED_KEY_VALUES or self.size > _MAX_CACHED_KEY_VALUE_BYTES:
            self.clear()
            self.size = 0


class _AttributeSets(dict[tuple[bytes, ...], int]):
    """Distinct serialized attribute lists -> their number, with their values as dicts in ``converted``
    and their serialized bytes in ``sizes``: ``sets[serialized]`` converts a new one (and raises
    ``DecodeError`` if it is not made of OTLP ``KeyValue``s)."""

    def __init__(self, key_values: _KeyValues) -> None:
        super().__init__()
        self.key_values = key_values
        self.converted: list[dict[str, str]] = []
        self.sizes: list[int] = []

    def __missing__(self, serialized: tuple[bytes, ...]) -> int:
        cache = self.key_values
        attrs: dict[str, str] = {}
        for key_value in serialized:
            item = cache.get(key_value)
            if item is None:
                parsed = KeyValue.FromString(key_value)
                item = cache[key_value] = (parsed.key, _value_string(parsed.value))
                cache.size += len(key_value) + len(item[0]) + len(item[1])
            attrs[item[0]] = item[1]  # a repeated key: the last wins
        index = self[serialized] = len(self.converted)
        self.converted.append(attrs)
        self.sizes.append(sum(map(len, serialized)))
        return index


def _cuts(row_bytes: pa.Array, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive slices of at most ``max_rows`` rows and ``max_bytes`` bytes (or
    one row), covering every row (``row_bytes``: each row's bytes)."""
    if len(row_bytes) <= max_rows and (pc.sum(row_bytes).as_py() or 0) <= max_bytes:
        return [(0, len(row_bytes))] if len(row_bytes) else []
    cuts = []
    start = total = 0
    for i, size in enumerate(row_bytes.to_pylist()):
        if i > start and (i - start >= max_rows or total + size > max_bytes):
            cuts.append((start, i))
            start, total = i, 0
        total += size
    cuts.append((start, len(row_bytes)))
    return cuts


class _Rows:
    """The data point rows of one decode round, from pushes of one input batch: per point, columns of
    Python values by point type, with indices into the round's distinct metric headers, sources (a
    resource of a push) and attribute sets."""

    def __init__(self, pushes: Mapping[str, pa.Array], text_bytes: pa.Array, key_values: _KeyValues) -> None:
        self.pushes = pushes
        self.text_bytes = text_bytes
        """Per input row, the bytes of its ``PUSH_TEXT_COLUMNS``."""
        self.key_values = key_values
        self.size = 0
        self.payload_bytes = 0
        self.added: list[int] = []
        """The input rows of the pushes added."""
        self.headers = _Headers()
        self.sources: list[tuple[int, int]] = []
        """(resource index, push row)."""
        self.resources = _AttributeSets(key_values)
        self.attributes = _AttributeSets(key_values)
        self.columns: dict[str, dict[str, list[Any]]] = {
            group: {name: [] for name in (*_COMMON_COLUMNS, *names)}
            for group, names in _GROUP_COLUMNS.items()
        }

    def add(self, push: _Push, row: int, payload_bytes: int) -> None:
        """Add the points of the push in input row ``row``, or raise and add none."""
        self.key_values.trim()
        try:
            decoded = self._decode(push, row)
        except DecodeError as exc:
            raise _InvalidPushError(f"attributes are not OTLP KeyValues: {exc}") from exc
        lengths = {group: len(self.columns[group]["time"]) for group, _ in decoded}
        try:
            for group, columns in decoded:
                target = self.columns[group]
                for name, values in columns.items():
                    target[name].extend(values)
        except BaseException:  # a MemoryError half way: the columns stay aligned
            for group, length in lengths.items():
                for values in self.columns[group].values():
                    del values[length:]
            raise
        self.size += push.size
        self.payload_bytes += payload_bytes
        self.added.append(row)

    def _decode(self, push: _Push, row: int) -> list[tuple[str, dict[str, list[Any]]]]:
        """The columns of a push's points by point type."""
        base = len(self.sources)
        self.sources += [(self.resources[attributes], row) for attributes in push.resources]
        headers = self.headers
        decoded: list[tuple[str, dict[str, list[Any]]]] = []
        for group, group_points in push.points.items():
            if not group_points:
                continue
            runs = push.runs[group]
            try:
                columns = _GROUP_DECODERS[group](group_points)
                columns.update(self._common_columns(group_points))
            except _InvalidPointError as exc:
                raise _InvalidPushError(f"metric {_metric_name(runs, exc.index)}: {exc}") from None
            point_headers: list[int] = []
            point_sources: list[int] = []
            for header, resource, count in runs:
                point_headers += [headers[header]] * count
                point_sources += [base + resource] * count
            columns["header_index"] = point_headers
            columns["source_index"] = point_sources
            decoded.append((group, columns))
        return decoded

    def _common_columns(self, points: list[Any]) -> dict[str, list[Any]]:
        times = [point.time_unix_nano for point in points]
        if 0 in times:
            raise _InvalidPointError(times.index(0), "data point with time_unix_nano 0")
        flags = [point.flags for point in points]
        _check_max(flags, _INT32_MAX, "flags")
        attributes = self.attributes
        return {
            "attribute_index": [attributes[tuple(point.attributes[:])] for point in points],
            "time": times,
            "start_time": [point.start_time_unix_nano for point in points],
            "flags": flags,
        }

    def batches(self, max_rows: int, max_bytes: int) -> Iterator[pa.RecordBatch]:
        """The rows added, in ``DECODED_SCHEMA`` batches of at most ``max_rows`` rows and about
        ``max_bytes`` bytes. Everything that can fail is done before this returns; the batches are made
        as they are taken."""
        if not self.size:
            return iter(())
        groups = [columns for columns in self.columns.values() if columns["time"]]

        def column(name: str, type_: pa.DataType) -> pa.Array:
            return pa.concat_arrays(
                [
                    pa.array(columns[name], type_)
                    if name in columns
                    else pa.nulls(len(columns["time"]), type_)
                    for columns in groups
                ]
            )

        resources, rows = zip(*self.sources, strict=True)
        source_rows = pa.array(rows, pa.int32())
        source_resources = pa.array(resources, pa.int32())
        index = {
            "source": column("source_index", pa.int32()),
            "header": column("header_index", pa.int32()),
            "attribute": column("attribute_index", pa.int32()),
        }
        shared: dict[str, dict[str, pa.Array]] = {
            "source": {
                "resource_attributes": pa.array(self.resources.converted, _MAP).take(source_resources)
            },
            "header": {
                name: pa.array(values, DECODED_SCHEMA.field(name).type)
                for name, values in zip(_HEADER_COLUMNS, zip(*self.headers, strict=True), strict=True)
            },
            "attribute": {
                "attributes": pa.array(self.attributes.converted, _MAP),
                "attributes_key": pa.array(
                    [attributes_key(attrs) for attrs in self.attributes.converted], pa.string()
                ),
            },
        }
        start_nanos = column("start_time", pa.uint64())
        own = {
            "start_time": pc.if_else(pc.equal(start_nanos, 0), _NULL_TS, _timestamps(start_nanos)),
            "time": _timestamps(column("time", pa.uint64())),
        }
        own["date"] = _utc_dates(own["time"])
        taken = {*own, *_PUSH_COLUMNS, *(name for arrays in shared.values() for name in arrays)}
        own.update({f.name: column(f.name, f.type) for f in DECODED_SCHEMA if f.name not in taken})
        source_bytes = pc.add(
            self.text_bytes.take(source_rows),
            pa.array(self.resources.sizes, pa.int64()).take(source_resources),
        )
        row_bytes = pc.add(
            pc.add(
                source_bytes.take(index["source"]),
                pa.array(self.headers.sizes, pa.int64()).take(index["header"]),
            ),
            pa.array(self.attributes.sizes, pa.int64()).take(index["attribute"]),
        )
        cuts = _cuts(pc.add(row_bytes, _ROW_BYTES), max_rows, max_bytes)

        def batch(start: int, stop: int) -> pa.RecordBatch:
            indices = {kind: array.slice(start, stop - start) for kind, array in index.items()}
            out = _push_columns(self.pushes, source_rows.take(indices["source"]))
            for kind, arrays in shared.items():
                for name, array in arrays.items():
                    out[name] = array.take(indices[kind])
            for name, array in own.items():
                out[name] = array.slice(start, stop - start)
            return pa.RecordBatch.from_arrays(
                [out[name] for name in DECODED_SCHEMA.names], schema=DECODED_SCHEMA
            )

        return (batch(start, stop) for start, stop in cuts)


def _push_columns(pushes: Mapping[str, pa.Array], rows: pa.Array) -> dict[str, pa.Array]:
    return {name: pushes[name].take(rows).cast(DECODED_SCHEMA.field(name).type) for name in _PUSH_COLUMNS}


class _BatchDecoder:
    """Decodes one input batch: its pushes in rounds (``_Rows``), then one row per quarantined push."""

    def __init__(
        self,
        batch: pa.RecordBatch,
        key_values: _KeyValues,
        *,
        max_rows: int,
        max_bytes: int,
        bounds: PushBounds,
    ) -> None:
        self.pushes = {name: batch.column(name) for name in BRONZE_COLUMNS}
        self.key_values = key_values
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.bounds = bounds
        self.quarantined: dict[int, str] = {}
        """Input row -> quarantine reason."""
        self.text_bytes = pa.repeat(pa.scalar(0, pa.int64()), batch.num_rows)
        for name in PUSH_TEXT_COLUMNS:
            length = pc.fill_null(pc.binary_length(self.pushes[name]), 0)
            self.text_bytes = pc.add(self.text_bytes, length)
            self._refuse(length, f"{name} of {{}} bytes", "max_text_bytes")
        self.payload_bytes = pc.binary_length(self.pushes["payload"])
        for row in pc.indices_nonzero(pc.is_null(self.payload_bytes)).to_pylist():
            self.quarantined[row] = "no payload"
        self._refuse(self.payload_bytes, "payload of {} bytes", "max_payload_bytes")

    def _refuse(self, sizes: pa.Array, what: str, bound: str) -> None:
        """Quarantine the rows whose size is over ``bound`` (the first reason of a row stands)."""
        limit = getattr(self.bounds, bound)
        for row in pc.indices_nonzero(pc.fill_null(pc.greater(sizes, limit), False)).to_pylist():
            if row not in self.quarantined:
                self.quarantined[row] = str(_over(what.format(sizes[row].as_py()), bound, limit))

    def run(self) -> Iterator[pa.RecordBatch]:
        rows = self._rows()
        for row in range(len(self.pushes["payload"])):
            push = self._gather(row)
            if push is None:
                continue
            payload_bytes = self.payload_bytes[row].as_py()
            if rows.size and (
                rows.size + push.size > self.max_rows or rows.payload_bytes + payload_bytes > self.max_bytes
            ):
                yield from self._flush(rows)
                rows = self._rows()
            self._add(rows, row, push)
        yield from self._flush(rows)
        yield from self._quarantine_batches()

    def _rows(self) -> _Rows:
        return _Rows(self.pushes, self.text_bytes, self.key_values)

    def _gather(self, row: int) -> _Push | None:
        """The push in input row ``row``, parsed and held to the bounds, or None once quarantined."""
        if row in self.quarantined:
            return None
        try:
            data = _parse(self.pushes["payload"][row].as_py(), self.bounds)
            return _Push(data, self.text_bytes[row].as_py(), self.payload_bytes[row].as_py(), self.bounds)
        except Exception as exc:  # whatever it is, it is this push's
            self.quarantined[row] = _reason(exc)
            return None

    def _add(self, rows: _Rows, row: int, push: _Push) -> bool:
        try:
            rows.add(push, row, self.payload_bytes[row].as_py())
        except Exception as exc:  # whatever it is, it is this push's
            self.quarantined[row] = _reason(exc)
            return False
        return True

    def _flush(self, rows: _Rows) -> Iterator[pa.RecordBatch]:
        """The round's output batches; when they cannot be made, each push's alone (quarantining any
        that cannot be made on its own)."""
        try:
            batches = rows.batches(self.max_rows, self.max_bytes)
        except Exception as exc:  # found out below which push it is
            if len(rows.added) == 1:
                self.quarantined[rows.added[0]] = _reason(exc)
                return
            for row in rows.added:
                alone = self._rows()
                push = self._gather(row)
                if push is not None and self._add(alone, row, push):
                    yield from self._flush(alone)
            return
        yield from batches

    def _quarantine_batches(self) -> Iterator[pa.RecordBatch]:
        """One row per quarantined push, in batches cut like the points'."""
        if not self.quarantined:
            return
        rows = sorted(self.quarantined)
        indices = pa.array(rows, pa.int32())
        row_bytes = pc.add(
            pc.add(self.text_bytes.take(indices), pc.fill_null(self.payload_bytes.take(indices), 0)),
            _ROW_BYTES,
        )
        for start, stop in _cuts(row_bytes, self.max_rows, self.max_bytes):
            taken = indices.slice(start, stop - start)
            out = _push_columns(self.pushes, taken)
            out["date"] = _utc_dates(out["received_at"])
            out["quarantine_reason"] = pa.array(
                [self.quarantined[row] for row in rows[start:stop]], pa.string()
            )
            out["payload"] = self.pushes["payload"].take(taken).cast(pa.binary())
            yield pa.RecordBatch.from_arrays(
                [
                    out[field.name] if field.name in out else pa.nulls(stop - start, field.type)
                    for field in DECODED_SCHEMA
                ],
                schema=DECODED_SCHEMA,
            )


def decode_batches(
    batches: Iterable[pa.RecordBatch],
    *,
    max_rows: int = MAX_BATCH_ROWS,
    max_bytes: int = MAX_BATCH_BYTES,
    bounds: PushBounds = PUSH_BOUNDS,
) -> Iterator[pa.RecordBatch]:
    """Decode bronze pushes (batches with the ``BRONZE_COLUMNS``, in any order, others ignored) into
    ``DECODED_SCHEMA`` batches of at most ``max_rows`` rows and about ``max_bytes`` bytes: the data
    points of the pushes that decode, then one row per push that does not (over one of the ``bounds``,
    or failing in any way). Never raises for what a push holds."""
    key_values = _KeyValues()
    for batch in batches:
        decoder = _BatchDecoder(batch, key_values, max_rows=max_rows, max_bytes=max_bytes, bounds=bounds)
        yield from decoder.run()
