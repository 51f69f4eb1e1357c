"""The structure of an OTLP metrics payload, counted on the wire before it is parsed.

``scan_metrics(payload, limits)`` walks the protobuf wire format of a ``MetricsData`` (or an
``ExportMetricsServiceRequest``: the same field 1, repeated ``ResourceMetrics``) reading only tags and
lengths: it never builds a message, and it stops at the first limit exceeded. A payload of millions of
empty elements therefore costs at most a few thousand steps to refuse, where parsing it would cost
gigabytes (upb takes about 65 bytes per message, so 20 MiB of two-byte messages would be ~650 MiB).
Its work is linear in the payload (every step consumes at least one byte) and its memory is constant
(a stack of at most ``MAX_NESTING`` frames); the nesting is walked with that explicit stack, never
by recursion.

What it bounds (``limits.RequestLimits``; over one: ``StructureLimitError``, a
``codec.PayloadTooLargeError``, answered TELEMETRY_TOO_LARGE / 413 / RESOURCE_EXHAUSTED, its message
naming the limit):

- ``max_resource_metrics``, ``max_scope_metrics``, ``max_metrics``: each kind in the whole payload;
- ``max_data_points``: gauge, sum, histogram, exponential histogram and summary points together;
- ``max_attributes_per_point``: the ``KeyValue`` entries of any one list: a point's, an exemplar's, a
  resource's or a scope's attributes, a metric's metadata, a ``kvlist_value``;
- ``max_attribute_value_bytes``: any ``KeyValue.key`` and any ``string_value`` / ``bytes_value``, at
  any nesting;
- ``max_elements``: every message in the payload, of every kind (exemplars, quantiles, buckets and
  array values included). This is the memory bound: what the parser allocates for a payload that
  passes is at most about 50 bytes times this (measured 36 to 50 MiB at the default 1,000,000, parsed
  in 20 to 30 ms) plus 8 times the payload's bytes (a packed varint becomes a 64-bit integer).

Nesting deeper than ``MAX_NESTING`` (upb's own recursion limit), a truncated or overrunning length or
varint, field number 0, and the group wire types that proto3 has no use for are refused as not OTLP
(``codec.InvalidPayloadError``, INVALID_RECORD): the protobuf parser refuses the first four too.
Everything else (UTF-8, field types) is left to the parser.

``strip_zero_padding(payload)`` undoes a raw forwarder's padding: a plugin that posts a
``ByteBuffer``'s whole ``array()`` sends the payload followed by zero bytes, which the parser refuses
(a 0x00 is a tag of field number 0). It walks only the top-level fields (tags and lengths, no nesting)
and returns the payload without the zeros, or None when there are none or what precedes them is not a
sequence of field-1 messages; more than ``max_resource_metrics`` of them is refused as the scan would
(``StructureLimitError``), so the walk is bounded like the scan's, not by the payload's size.

Pure Python on purpose: it takes about 0.5 us a message (25 us for a librdkafka push, 0.45 s at the
limits), in a decoder process for any payload over 4 KiB (``decoding``). Compiled with mypyc it was
only 3 times faster, which did not pay for a second build of the module.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push.codec import InvalidPayloadError, PayloadTooLargeError

__all__ = ["MAX_NESTING", "Structure", "StructureLimitError", "scan_metrics", "strip_zero_padding"]

MAX_NESTING: Final = 100
"""Message nesting refused beyond this (upb refuses deeper payloads too)."""

# Message types (indexes into _CHILDREN and _KIND).
_DATA: Final = 0  # MetricsData / ExportMetricsServiceRequest
_RESOURCE_METRICS: Final = 1
_RESOURCE: Final = 2
_SCOPE_METRICS: Final = 3
_SCOPE: Final = 4
_METRIC: Final = 5
_NUMBER_DATA: Final = 6  # Gauge, Sum
_HISTOGRAM: Final = 7
_EXPONENTIAL_HISTOGRAM: Final = 8
_SUMMARY: Final = 9
_NUMBER_POINT: Final = 10
_HISTOGRAM_POINT: Final = 11
_EXPONENTIAL_POINT: Final = 12
_SUMMARY_POINT: Final = 13
_EXEMPLAR: Final = 14
_KEY_VALUE: Final = 15
_ANY_VALUE: Final = 16
_ARRAY_VALUE: Final = 17
_KEY_VALUE_LIST: Final = 18
_LEAF: Final = 19  # a message with no message fields: Buckets, ValueAtQuantile, EntityRef
_TEXT: Final = -1  # not a message: a string or bytes field bounded by max_attribute_value_bytes

_CHILDREN: Final[tuple[dict[int, int], ...]] = (
    {1: _RESOURCE_METRICS},
    {1: _RESOURCE, 2: _SCOPE_METRICS},
    {1: _KEY_VALUE, 3: _LEAF},
    {1: _SCOPE, 2: _METRIC},
    {3: _KEY_VALUE},
    {
        5: _NUMBER_DATA,
        7: _NUMBER_DATA,
        9: _HISTOGRAM,
        10: _EXPONENTIAL_HISTOGRAM,
        11: _SUMMARY,
        12: _KEY_VALUE,
    },
    {1: _NUMBER_POINT},
    {1: _HISTOGRAM_POINT},
    {1: _EXPONENTIAL_POINT},
    {1: _SUMMARY_POINT},
    {7: _KEY_VALUE, 5: _EXEMPLAR},
    {9: _KEY_VALUE, 8: _EXEMPLAR},
    {1: _KEY_VALUE, 8: _LEAF, 9: _LEAF, 11: _EXEMPLAR},
    {7: _KEY_VALUE, 6: _LEAF},
    {7: _KEY_VALUE},
    {1: _TEXT, 2: _ANY_VALUE},
    {1: _TEXT, 7: _TEXT, 5: _ARRAY_VALUE, 6: _KEY_VALUE_LIST},
    {1: _ANY_VALUE},
    {1: _KEY_VALUE},
    {},
)
"""For each message type: its message (and bounded text) fields, by field number."""

# What each message counts as (indexes into the counters): every message is also an element.
_COUNTED_RESOURCE_METRICS: Final = 0
_COUNTED_SCOPE_METRICS: Final = 1
_COUNTED_METRICS: Final = 2
_COUNTED_DATA_POINTS: Final = 3
_COUNTED_ELEMENTS: Final = 4
_KIND: Final = (
    _COUNTED_ELEMENTS,
    _COUNTED_RESOURCE_METRICS,
    _COUNTED_ELEMENTS,
    _COUNTED_SCOPE_METRICS,
    _COUNTED_ELEMENTS,
    _COUNTED_METRICS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_DATA_POINTS,
    _COUNTED_DATA_POINTS,
    _COUNTED_DATA_POINTS,
    _COUNTED_DATA_POINTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
    _COUNTED_ELEMENTS,
)
_COUNTED: Final = (
    ("max_resource_metrics", "resource metrics"),
    ("max_scope_metrics", "scope metrics"),
    ("max_metrics", "metrics"),
    ("max_data_points", "data points"),
    ("max_elements", "messages"),
)
_WIRE_VARINT: Final = 0
_WIRE_LENGTH: Final = 2
_RESOURCE_METRICS_TAG: Final = 1 << 3 | _WIRE_LENGTH
"""The one top-level field of MetricsData and ExportMetricsServiceRequest: 1, length-delimited."""
_FIXED_WIDTH: Final = {1: 8, 5: 4}
"""The fixed-width wire types (fixed64, fixed32) and their sizes."""


class Structure(NamedTuple):
    """What a payload holds, as counted by ``scan_metrics``."""

    resource_metrics: int
    scope_metrics: int
    metrics: int
    data_points: int
    elements: int
    """Every message, of every kind (the other counts included)."""


class StructureLimitError(PayloadTooLargeError):
    """The payload holds more than a limit allows (TELEMETRY_TOO_LARGE); ``limit`` names it and
    ``visited`` is how many elements were counted before the scan stopped."""

    def __init__(self, limit: str, message: str, visited: int) -> None:
        super().__init__(limit, message, visited)  # the arguments, so that it pickles (decoder processes)
        self.limit = limit
        self.visited = visited

    def __str__(self) -> str:
        return str(self.args[1])


def _malformed(reason: str, position: int) -> InvalidPayloadError:
    return InvalidPayloadError(f"the payload is not OTLP MetricsData: {reason} at byte {position}")


def scan_metrics(payload: bytes, limits: RequestLimits) -> Structure:
    """Count ``payload``'s structure against ``limits`` without parsing it (see the module)."""
    counts = [0, 0, 0, 0, 0]
    maxima = (
        limits.max_resource_metrics,
        limits.max_scope_metrics,
        limits.max_metrics,
        limits.max_data_points,
        limits.max_elements,
    )
    max_attributes = limits.max_attributes_per_point
    max_text = limits.max_attribute_value_bytes
    max_elements = limits.max_elements
    data = payload
    types = [_DATA]  # the stack of open messages: type, end, KeyValue entries seen
    ends = [len(data)]
    attributes = [0]
    children = _CHILDREN[_DATA]
    end = len(data)
    position = 0
    while True:
        if position >= end:
            types.pop()
            ends.pop()
            attributes.pop()
            if not types:
                return Structure(*counts)
            children = _CHILDREN[types[-1]]
            end = ends[-1]
            continue
        # the tag (a varint; varints are read inline, as the length below: this loop runs once per
        # message of every payload, and a call per varint would cost more than the reading)
        byte = data[position]
        position += 1
        tag = byte & 0x7F
        shift = 7
        while byte & 0x80:
            if position >= end or shift > 63:
                raise _malformed("a truncated or overlong tag", position)
            byte = data[position]
            position += 1
            tag |= (byte & 0x7F) << shift
            shift += 7
        wire = tag & 7
        field = tag >> 3
        if field == 0:
            raise _malformed("field number 0", position)
        if wire == _WIRE_LENGTH:
            if position >= end:
                raise _malformed("a truncated length", position)
            length = data[position]
            position += 1
            if length & 0x80:  # a length of more than one byte
                length &= 0x7F
                shift = 7
                while True:
                    if position >= end or shift > 63:
                        raise _malformed("a truncated or overlong length", position)
                    byte = data[position]
                    position += 1
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    if not byte & 0x80:
                        break
            if length > end - position:
                raise _malformed(f"a field {field} of {length} bytes overruns its message", position)
            child = children.get(field)
            if child is None:
                position += length
            elif child == _TEXT:
                if length > max_text:
                    raise StructureLimitError(
                        "max_attribute_value_bytes",
                        f"an attribute key or value of {length} bytes is over "
                        f"limits.max_attribute_value_bytes ({max_text})",
                        counts[_COUNTED_ELEMENTS],
                    )
                position += length
            else:
                kind = _KIND[child]
                if kind != _COUNTED_ELEMENTS:
                    counts[kind] += 1
                    if counts[kind] > maxima[kind]:
                        name, what = _COUNTED[kind]
                        raise StructureLimitError(
                            name,
                            f"more than limits.{name} ({maxima[kind]}) {what} in one payload",
                            counts[_COUNTED_ELEMENTS],
                        )
                counts[_COUNTED_ELEMENTS] += 1
                if counts[_COUNTED_ELEMENTS] > max_elements:
                    raise StructureLimitError(
                        "max_elements",
                        f"more than limits.max_elements ({max_elements}) messages in one payload",
                        counts[_COUNTED_ELEMENTS] - 1,
                    )
                if child == _KEY_VALUE:
                    attributes[-1] += 1
                    if attributes[-1] > max_attributes:
                        raise StructureLimitError(
                            "max_attributes_per_point",
                            f"more than limits.max_attributes_per_point ({max_attributes}) "
                            "attributes in one list",
                            counts[_COUNTED_ELEMENTS],
                        )
                if child == _LEAF:  # nothing inside to count
                    position += length
                    continue
                if len(types) >= MAX_NESTING:
                    raise _malformed(f"messages nested more than {MAX_NESTING} deep", position)
                end = position + length
                types.append(child)
                ends.append(end)
                attributes.append(0)
                children = _CHILDREN[child]
        elif wire == _WIRE_VARINT:
            start = position
            while True:
                if position >= end or position - start >= 10:
                    raise _malformed("a truncated or overlong varint", position)
                byte = data[position]
                position += 1
                if not byte & 0x80:
                    break
        elif wire in _FIXED_WIDTH:
            position += _FIXED_WIDTH[wire]
            if position > end:
                raise _malformed("a truncated fixed-width field", end)
        else:
            raise _malformed(f"wire type {wire} (groups are not OTLP)", position)


def strip_zero_padding(
    payload: bytes, *, max_resource_metrics: int = DEFAULT_LIMITS.max_resource_metrics
) -> bytes | None:
    """``payload`` without the 0x00 bytes that follow its top-level ``resource_metrics`` fields, or
    None when nothing follows them or they are not well-formed (see the module). All zeros is an
    empty MetricsData: ``b""``. Linear in the payload and at most ``max_resource_metrics`` + 1 steps
    (more fields: ``StructureLimitError``, as ``scan_metrics`` would say); the only copy is the result."""
    size = len(payload)
    if not size or payload[-1]:
        return None
    position = fields = 0
    while position < size:
        tag = payload[position]
        if tag == 0:  # padding from here: all of it zeros, or not padding at all
            if payload.count(0, position) != size - position:
                return None
            return payload[:position]
        if tag != _RESOURCE_METRICS_TAG:
            return None
        fields += 1
        if fields > max_resource_metrics:
            raise StructureLimitError(
                "max_resource_metrics",
                f"more than limits.max_resource_metrics ({max_resource_metrics}) resource metrics "
                "in one payload",
                fields - 1,
            )
        position += 1
        length = shift = 0
        while True:
            if position >= size or shift > 63:
                return None
            byte = payload[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        position += length
    return None
