"""Decoding bronze ``telemetry_pushes`` into silver ``metric_points`` rows: ``decode_batches``, which the
decode job runs as ``DataFrame.mapInArrow(decode_batches, DECODED_SCHEMA)``. This module owns the
mapping of OTLP ``MetricsData`` onto the ``metric_points`` columns (documented in ``spark_jobs.tables``),
the data-model checks that send a push to ``decode_quarantine`` instead, the string form of attribute
values and the series key ``attributes_key``. Pure pyarrow and opentelemetry-proto: no Spark.

An output row is either a data point (``quarantine_reason`` and ``payload`` null) or a push that did not
decode (``quarantine_reason`` and ``payload`` set, the push's own columns and ``date`` of
``received_at``, every other column null). A push is decoded whole or quarantined whole.

How it keeps up (see ``benchmarks/rollup/decode_micro.py``):

- payloads are parsed with a view of ``MetricsData`` that declares every ``KeyValue`` field ``bytes``
  (the same wire format), so parsing leaves attributes serialized. A point's attributes, as the tuple of
  those bytes, key the output batch's table of distinct attribute sets; each distinct serialized
  key-value is parsed (and so validated) with the real ``KeyValue`` once per call;
- the points of a push are gathered per kind and read one field at a time with list comprehensions;
- what repeats per metric, per resource, per attribute set or per push is converted to Arrow once per
  distinct value and expanded with ``take``; timestamps and dates come from Arrow kernels.
"""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from spark_jobs.tables import METRIC_POINTS_SCHEMA

__all__ = ["BRONZE_COLUMNS", "DECODED_SCHEMA", "MAX_BATCH_ROWS", "attributes_key", "decode_batches"]

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

_PUSH_COLUMNS: Final = tuple(name for name in BRONZE_COLUMNS if name != "payload")
"""Copied from the push to each of its rows."""
_TS: Final = pa.timestamp("us", tz="UTC")
_MAP: Final = pa.map_(pa.string(), pa.string())
_NANOS_PER_MICRO: Final = pa.scalar(1000, pa.uint64())
_NULL_TS: Final = pa.scalar(None, _TS)
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_MAX_CACHED_KEY_VALUES: Final = 1 << 18
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
"""Gathered for every point: indices into the batch's headers, sources and attribute sets; point fields."""
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


class _InvalidPushError(Exception):
    """The push does not decode; the message is the quarantine reason."""


class _InvalidPointError(Exception):
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


def _push_columns(pushes: Mapping[str, pa.Array], rows: pa.Array) -> dict[str, pa.Array]:
    return {name: pushes[name].take(rows).cast(DECODED_SCHEMA.field(name).type) for name in _PUSH_COLUMNS}


def _slices(batch: pa.RecordBatch, max_rows: int) -> Iterator[pa.RecordBatch]:
    for offset in range(0, batch.num_rows, max_rows):
        yield batch.slice(offset, max_rows)


class _Index(dict[tuple[Any, ...], int]):
    """Distinct values -> their number, in order of first use: ``index[value]`` adds a new value."""

    def __missing__(self, key: tuple[Any, ...]) -> int:
        index = self[key] = len(self)
        return index


class _AttributeSets(dict[tuple[bytes, ...], int]):
    """Distinct serialized attribute lists -> their number, with their values as dicts in ``converted``:
    ``sets[serialized]`` converts a new one (and raises ``DecodeError`` if it is not made of OTLP
    ``KeyValue``s)."""

    def __init__(self, key_values: dict[bytes, tuple[str, str]]) -> None:
        super().__init__()
        self.key_values = key_values
        """Serialized key-value -> (key, value string): shared by every batch of a call."""
        self.converted: list[dict[str, str]] = []

    def __missing__(self, serialized: tuple[bytes, ...]) -> int:
        cache = self.key_values
        attrs: dict[str, str] = {}
        for key_value in serialized:
            item = cache.get(key_value)
            if item is None:
                parsed = KeyValue.FromString(key_value)
                item = cache[key_value] = (parsed.key, _value_string(parsed.value))
            attrs[item[0]] = item[1]  # a repeated key: the last wins
        index = self[serialized] = len(self.converted)
        self.converted.append(attrs)
        return index


class _Rows:
    """The data point rows of one output batch, from pushes of one input batch: per point, columns of
    Python values by point type, with indices into the batch's distinct metric headers, sources (a
    resource of a push) and attribute sets."""

    def __init__(self, pushes: Mapping[str, pa.Array], key_values: dict[bytes, tuple[str, str]]) -> None:
        self.pushes = pushes
        self.size = 0
        self.headers = _Index()
        """Values of the ``_HEADER_COLUMNS``."""
        self.sources: list[tuple[int, int]] = []
        """(resource index, push row)."""
        self.resources = _AttributeSets(key_values)
        self.attributes = _AttributeSets(key_values)
        self.columns: dict[str, dict[str, list[Any]]] = {
            group: {name: [] for name in (*_COMMON_COLUMNS, *names)}
            for group, names in _GROUP_COLUMNS.items()
        }

    def add_push(self, row: int, payload: bytes | None) -> None:
        """Add the points of the push in input row ``row``, or raise ``_InvalidPushError`` and add none."""
        if payload is None:
            raise _InvalidPushError("no payload")
        try:
            data: Any = _METRICS_DATA.FromString(payload)
        except DecodeError as exc:
            raise _InvalidPushError(f"not OTLP MetricsData: {exc}") from exc
        try:
            decoded = self._decode(data, row)
        except DecodeError as exc:
            raise _InvalidPushError(f"attributes are not OTLP KeyValues: {exc}") from exc
        for group, columns in decoded:
            target = self.columns[group]
            for name, values in columns.items():
                target[name].extend(values)
            self.size += len(columns["time"])

    def _decode(self, data: Any, row: int) -> list[tuple[str, dict[str, list[Any]]]]:
        """The columns of a push's points by point type."""
        headers = self.headers
        # per point type: the points, and each one's header and source index
        points: dict[str, tuple[list[Any], list[int], list[int]]] = {
            group: ([], [], []) for group in _GROUP_COLUMNS
        }
        for resource_metrics in data.resource_metrics:
            source = len(self.sources)
            self.sources.append((self.resources[tuple(resource_metrics.resource.attributes[:])], row))
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
                    header = headers[
                        (
                            metric.name,
                            metric.unit,
                            metric.description,
                            kind,
                            temporality,
                            monotonic,
                            scope_name,
                            scope_version,
                        )
                    ]
                    group_points, point_headers, point_sources = points[_GROUP_OF_KIND[kind]]
                    group_points += data_points
                    point_headers += [header] * len(data_points)
                    point_sources += [source] * len(data_points)
        decoded: list[tuple[str, dict[str, list[Any]]]] = []
        for group, (group_points, point_headers, point_sources) in points.items():
            if not group_points:
                continue
            try:
                columns = _GROUP_DECODERS[group](group_points)
                columns.update(self._common_columns(group_points))
            except _InvalidPointError as exc:
                name = list(headers)[point_headers[exc.index]][0]
                raise _InvalidPushError(f"metric {name}: {exc}") from None
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

    def batches(self, max_rows: int) -> Iterator[pa.RecordBatch]:
        """The rows added so far, in ``DECODED_SCHEMA`` batches of at most ``max_rows``."""
        if self.size:
            yield from _slices(self._batch(), max_rows)

    def _batch(self) -> pa.RecordBatch:
        """Every row added, the point types one after the other."""
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
        source_index = column("source_index", pa.int32())
        out = _push_columns(self.pushes, pa.array(rows, pa.int32()).take(source_index))
        resource_index = pa.array(resources, pa.int32()).take(source_index)
        out["resource_attributes"] = pa.array(self.resources.converted, _MAP).take(resource_index)
        header_index = column("header_index", pa.int32())
        for name, values in zip(_HEADER_COLUMNS, zip(*self.headers, strict=True), strict=True):
            out[name] = pa.array(values, DECODED_SCHEMA.field(name).type).take(header_index)
        attribute_index = column("attribute_index", pa.int32())
        attributes = self.attributes.converted
        out["attributes"] = pa.array(attributes, _MAP).take(attribute_index)
        keys = pa.array([attributes_key(attrs) for attrs in attributes], pa.string())
        out["attributes_key"] = keys.take(attribute_index)
        start_nanos = column("start_time", pa.uint64())
        out["start_time"] = pc.if_else(pc.equal(start_nanos, 0), _NULL_TS, _timestamps(start_nanos))
        out["time"] = _timestamps(column("time", pa.uint64()))
        out["date"] = _utc_dates(out["time"])
        return pa.RecordBatch.from_arrays(
            [
                out[field.name] if field.name in out else column(field.name, field.type)
                for field in DECODED_SCHEMA
            ],
            schema=DECODED_SCHEMA,
        )


def _quarantine_batch(pushes: Mapping[str, pa.Array], rows: list[int], reasons: list[str]) -> pa.RecordBatch:
    indices = pa.array(rows, pa.int32())
    out = _push_columns(pushes, indices)
    out["date"] = _utc_dates(out["received_at"])
    out["quarantine_reason"] = pa.array(reasons, pa.string())
    out["payload"] = pushes["payload"].take(indices).cast(pa.binary())
    return pa.RecordBatch.from_arrays(
        [
            out[field.name] if field.name in out else pa.nulls(len(rows), field.type)
            for field in DECODED_SCHEMA
        ],
        schema=DECODED_SCHEMA,
    )


def decode_batches(
    batches: Iterable[pa.RecordBatch], *, max_rows: int = MAX_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Decode bronze pushes (batches with the ``BRONZE_COLUMNS``, in any order, others ignored) into
    ``DECODED_SCHEMA`` batches of at most ``max_rows`` rows: the data points of the pushes that decode,
    then one row per push that does not."""
    key_values: dict[bytes, tuple[str, str]] = {}
    for batch in batches:
        if len(key_values) > _MAX_CACHED_KEY_VALUES:
            key_values.clear()
        pushes = {name: batch.column(name) for name in BRONZE_COLUMNS}
        rows = _Rows(pushes, key_values)
        quarantined: list[int] = []
        reasons: list[str] = []
        for row, payload in enumerate(pushes["payload"].to_pylist()):
            try:
                rows.add_push(row, payload)
            except _InvalidPushError as exc:
                quarantined.append(row)
                reasons.append(str(exc))
                continue
            if rows.size >= max_rows:
                yield from rows.batches(max_rows)
                rows = _Rows(pushes, key_values)
        yield from rows.batches(max_rows)
        if quarantined:
            yield from _slices(_quarantine_batch(pushes, quarantined, reasons), max_rows)
