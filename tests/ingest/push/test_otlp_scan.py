"""The wire pre-scan: counts an OTLP payload's structure before parsing, stops at the first limit (F2)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push.codec import InvalidPayloadError, PayloadError, decompress
from ingest.push.otlp_scan import (
    MAX_NESTING,
    Structure,
    StructureLimitError,
    scan_metrics,
    strip_zero_padding,
)
from tests.support.otlp import partly_invalid_payload
from tests.support.paths import LIBRDKAFKA_FIXTURES
from tests.support.process import run_isolated

FIXTURES = LIBRDKAFKA_FIXTURES
COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def field(number: int, body: bytes) -> bytes:
    """A length-delimited field."""
    return bytes([number << 3 | 2]) + varint(len(body)) + body


def payload(points: bytes) -> bytes:
    """One resource, one scope, one gauge metric holding ``points`` (NumberDataPoint fields)."""
    metric = field(1, b"m") + field(5, points)
    return field(1, field(2, field(2, metric)))


def point(attributes: int = 0, value: bytes = b"v", extra: bytes = b"") -> bytes:
    """A number point with ``attributes`` attributes (key "k", string value ``value``) and ``extra``
    fields."""
    attribute = field(1, b"k") + field(2, field(1, value))
    return field(1, b"\x19" + bytes(8) + b"".join(field(7, attribute) for _ in range(attributes)) + extra)


def counted(data: MetricsData) -> Structure:
    """The structure as the parsed message has it (for the kinds the scan names)."""
    scopes = [s for r in data.resource_metrics for s in r.scope_metrics]
    metrics = [m for s in scopes for m in s.metrics]
    points = sum(len(getattr(m, m.WhichOneof("data") or "gauge").data_points) for m in metrics)
    return Structure(len(data.resource_metrics), len(scopes), len(metrics), points, 0)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("librdkafka-*.bin")), ids=lambda p: p.name)
def test_real_librdkafka_payloads_pass_and_are_counted_as_parsed(path: Path) -> None:
    codec = COMPRESSION[path.stem.split("-")[3]]
    raw = decompress(path.read_bytes(), codec, 1 << 20)
    structure = scan_metrics(raw, DEFAULT_LIMITS)
    assert structure._replace(elements=0) == counted(MetricsData.FromString(raw))
    assert structure.data_points >= 10
    assert structure.elements <= len(raw) // 2  # every element takes at least two bytes


def test_F2_62_MiB_of_empty_resource_metrics_is_refused_after_the_limit_with_constant_memory() -> None:
    """The peak is traced in a fresh interpreter: tracemalloc counts every thread's allocations."""
    refused = run_isolated(_scan_a_62_MiB_bomb)
    assert isinstance(refused, dict)
    assert refused["limit"] == "max_resource_metrics"
    assert "limits.max_resource_metrics (1000)" in refused["message"]
    assert refused["visited"] <= DEFAULT_LIMITS.max_resource_metrics  # O(limit), not O(elements)
    assert refused["peak"] < 64 * 1024  # nothing proportional to the 62 MiB input
    assert refused["error"] == "TELEMETRY_TOO_LARGE"


def _scan_a_62_MiB_bomb() -> dict[str, object]:
    """The refusal of 62 MiB of empty resource metrics and the memory traced meanwhile (``run_isolated``)."""
    bomb = b"\x0a\x00" * (31 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(StructureLimitError) as refused:
            scan_metrics(bomb, DEFAULT_LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    error = refused.value
    return {
        "limit": error.limit,
        "message": str(error),
        "visited": error.visited,
        "peak": peak,
        "error": error.error.name,
    }


LIMITED = RequestLimits(
    max_resource_metrics=3,
    max_scope_metrics=4,
    max_metrics=5,
    max_data_points=6,
    max_elements=40,
    max_attributes_per_point=2,
    max_attribute_value_bytes=8,
)


def resources(n: int) -> bytes:
    return field(1, b"") * n


def scopes(n: int) -> bytes:
    return field(1, field(2, b"") * n)


def metrics(n: int) -> bytes:
    return field(1, field(2, field(2, field(1, b"m")) * n))


def points(n: int) -> bytes:
    return payload(point() * n)


def elements(n: int) -> bytes:  # n messages: resource, scope, metric, gauge, then empty exemplars
    return payload(field(1, field(5, b"") * (n - 5)))


def attributes(n: int) -> bytes:
    return payload(point(n))


def value_bytes(n: int) -> bytes:
    return payload(point(1, b"x" * n))


@pytest.mark.parametrize(
    ("build", "limit", "at_most"),
    [
        (resources, "max_resource_metrics", 3),
        (scopes, "max_scope_metrics", 4),
        (metrics, "max_metrics", 5),
        (points, "max_data_points", 6),
        (elements, "max_elements", 40),
        (attributes, "max_attributes_per_point", 2),
        (value_bytes, "max_attribute_value_bytes", 8),
    ],
)
def test_floods_up_to_each_limit_pass_and_one_more_is_refused_naming_it(
    build: object, limit: str, at_most: int
) -> None:
    assert callable(build)
    at_limit = build(at_most)
    MetricsData.FromString(at_limit)  # a valid payload
    scan_metrics(at_limit, LIMITED)
    with pytest.raises(StructureLimitError) as refused:
        scan_metrics(build(at_most + 1), LIMITED)
    assert refused.value.limit == limit
    assert f"limits.{limit} ({at_most})" in str(refused.value)


def test_attributes_are_limited_per_list_not_per_payload() -> None:
    scanned = scan_metrics(payload(point(2) * 3), LIMITED)  # six attributes, two per point
    assert scanned.data_points == 3
    with pytest.raises(StructureLimitError) as refused:
        scan_metrics(payload(point(3)), LIMITED)  # three on one point
    assert refused.value.limit == "max_attributes_per_point"


def nested(depth: int) -> bytes:
    """An attribute whose value is ``depth`` arrays nested in one another."""
    value = b""
    for _ in range(depth):
        value = field(5, field(1, value))  # AnyValue.array_value -> ArrayValue.values
    return payload(point(extra=field(7, field(1, b"k") + field(2, value))))


def test_nesting_beyond_the_parsers_own_limit_is_not_otlp_and_the_parser_agrees() -> None:
    shallow = nested(40)
    MetricsData.FromString(shallow)
    scan_metrics(shallow, DEFAULT_LIMITS)
    deep = nested(MAX_NESTING // 2)  # two messages a level
    with pytest.raises(InvalidPayloadError, match="nested more than"):
        scan_metrics(deep, DEFAULT_LIMITS)
    with pytest.raises(DecodeError):
        MetricsData.FromString(deep)


@pytest.mark.parametrize(
    "malformed",
    [b"\x0a", b"\x0a\x05ab", b"\x08", b"\x09\x00", b"\x00\x00", b"\x0a" + b"\xff" * 10 + b"\x01"],
)
def test_malformed_wire_data_is_invalid_record_as_the_parser_says(malformed: bytes) -> None:
    with pytest.raises(InvalidPayloadError):
        scan_metrics(malformed, DEFAULT_LIMITS)
    with pytest.raises(DecodeError):
        MetricsData.FromString(malformed)


def test_groups_are_refused_as_not_otlp() -> None:
    with pytest.raises(InvalidPayloadError, match="groups are not OTLP"):
        scan_metrics(b"\x0b\x0c", DEFAULT_LIMITS)  # upb would keep it as an unknown field


def check_scan(data: bytes, limits: RequestLimits) -> None:
    """The fuzzing property: the scan terminates with accept or refuse, never anything else; it
    visits at most one element per two bytes; what it calls malformed the parser refuses too
    (groups and nesting aside: the scan counts every message level against MAX_NESTING, upb counts
    its own way and may accept a little deeper)."""
    visited = 0
    try:
        visited = scan_metrics(data, limits).elements
    except StructureLimitError as refused:
        visited = refused.visited
    except InvalidPayloadError as malformed:
        if "groups" not in str(malformed) and "nested" not in str(malformed):
            with pytest.raises(DecodeError):
                MetricsData.FromString(data)
    except PayloadError as other:  # pragma: no cover - the property fails
        raise AssertionError(f"unexpected {other!r}") from other
    assert visited <= len(data) // 2


@given(st.binary(max_size=512))
def test_fuzz_random_bytes_are_accepted_or_refused_and_never_crash(data: bytes) -> None:
    check_scan(data, LIMITED)


VALID = partly_invalid_payload() + payload(point(3) * 2) + nested(5)


@given(
    st.integers(0, len(VALID)),
    st.integers(0, len(VALID)),
    st.binary(max_size=16),
    st.sampled_from([LIMITED, DEFAULT_LIMITS]),
)
def test_fuzz_truncated_and_spliced_payloads_are_accepted_or_refused(
    cut: int, splice_at: int, inserted: bytes, limits: RequestLimits
) -> None:
    check_scan(VALID[:cut], limits)
    check_scan(VALID[:splice_at] + inserted + VALID[splice_at:], limits)


@given(st.integers(1, 150), st.sampled_from([5, 6, 1]))
def test_fuzz_nesting_of_any_depth_terminates(depth: int, kind: int) -> None:
    value = b""
    for _ in range(depth):  # arrays, kvlists or a KeyValue chain through kvlist values
        value = field(kind, field(1, value)) if kind != 1 else field(6, field(1, field(2, value)))
    check_scan(payload(point(extra=field(7, field(1, b"k") + field(2, value)))), DEFAULT_LIMITS)


_TEXT = st.text(max_size=8)
_ATTRIBUTES = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=AnyValue(string_value=v)), _TEXT, _TEXT), max_size=3
)
_POINTS = st.lists(
    st.builds(
        lambda t, v, a: NumberDataPoint(time_unix_nano=t, as_double=v, attributes=a),
        st.integers(0, 2**64 - 1),
        st.floats(allow_nan=False),
        _ATTRIBUTES,
    ),
    max_size=3,
)
_METRICS = st.lists(
    st.builds(lambda n, p: Metric(name=n, gauge=Gauge(data_points=p)), _TEXT, _POINTS), max_size=3
)
_SCOPES = st.lists(
    st.builds(lambda n, m: ScopeMetrics(scope=InstrumentationScope(name=n), metrics=m), _TEXT, _METRICS),
    max_size=2,
)
RESOURCE_METRICS = st.lists(
    st.builds(
        lambda a, s: ResourceMetrics(resource=Resource(attributes=a), scope_metrics=s), _ATTRIBUTES, _SCOPES
    ),
    max_size=3,
)


@given(RESOURCE_METRICS, st.integers(1, 4096), st.booleans())
def test_raw_forwarders_any_metrics_payload_followed_by_zero_bytes_strips_back_to_it(
    resource_metrics: list[ResourceMetrics], padding: int, export_request: bool
) -> None:
    """A ByteBuffer's whole array() posted: the parser refuses the zeros (field number 0), the strip
    gives back the payload byte for byte."""
    message = (ExportMetricsServiceRequest if export_request else MetricsData)(
        resource_metrics=resource_metrics
    )
    wire = message.SerializeToString()
    padded = wire + bytes(padding)
    with pytest.raises(DecodeError):
        type(message).FromString(padded)
    stripped = strip_zero_padding(padded)
    assert stripped == wire
    assert type(message).FromString(stripped) == message


@given(RESOURCE_METRICS)
def test_raw_forwarders_a_payload_without_padding_gives_none(resource_metrics: list[ResourceMetrics]) -> None:
    assert strip_zero_padding(MetricsData(resource_metrics=resource_metrics).SerializeToString()) is None


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("librdkafka-*.bin")), ids=lambda p: p.name)
def test_raw_forwarders_a_padded_librdkafka_push_strips_to_the_push(path: Path) -> None:
    raw = decompress(path.read_bytes(), COMPRESSION[path.stem.split("-")[3]], 1 << 20)
    assert strip_zero_padding(raw + bytes(8192 - len(raw) % 8192)) == raw
    assert strip_zero_padding(raw) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (bytes(16), b""),  # an empty MetricsData in a zeroed buffer
        (field(1, b"") + bytes(3), field(1, b"")),
        (field(1, b"\x00\x00") + b"\x00", field(1, b"\x00\x00")),  # zeros inside a field are its own
        (b"", None),
        (field(1, b"") + b"\x00\x01", None),  # not only zeros after the fields
        (field(1, b"") + b"\x00" + field(1, b"") + b"\x00", None),
        (field(2, b"") + b"\x00", None),  # not resource_metrics
        (b"\x08\x01\x00", None),  # field 1 but a varint
        (b"\x0a\x05ab\x00\x00", None),  # the field overruns the body
        (b"\x0a\x80\x80", None),  # a truncated length
        (b"\x0a" + b"\xff" * 10 + b"\x01\x00", None),  # an overlong length
    ],
)
def test_raw_forwarders_only_zeros_after_well_formed_resource_metrics_are_stripped(
    body: bytes, expected: bytes | None
) -> None:
    assert strip_zero_padding(body) == expected


@given(st.binary(max_size=256))
def test_fuzz_a_strip_is_a_prefix_followed_only_by_zeros(body: bytes) -> None:
    stripped = strip_zero_padding(body)
    if stripped is not None:
        rest = body[len(stripped) :]
        assert body.startswith(stripped)
        assert rest
        assert rest == bytes(len(rest))


def test_raw_forwarders_stripping_copies_only_the_result() -> None:
    """8 MiB of resource metrics then 8 MiB of zeros: no memory but the stripped payload's (traced in a
    fresh interpreter: tracemalloc counts every thread's allocations)."""
    stripped = run_isolated(_strip_8_MiB_of_zeros)
    assert isinstance(stripped, dict)
    assert stripped["stripped_bytes"] == stripped["wire_bytes"] > 0
    assert stripped["peak"] < stripped["wire_bytes"] + 64 * 1024


def _strip_8_MiB_of_zeros() -> dict[str, object]:
    """What stripping 8 MiB of zeros after 8 MiB of metrics kept, and its traced peak (``run_isolated``)."""
    wire = field(1, field(2, b"x" * (1 << 20))) * 8
    padded = wire + bytes(len(wire))
    tracemalloc.start()
    try:
        stripped = strip_zero_padding(padded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stripped is not None
    assert stripped == wire
    return {"stripped_bytes": len(stripped), "wire_bytes": len(wire), "peak": peak}


def test_raw_forwarders_stripping_stops_past_max_resource_metrics_as_the_scan_would() -> None:
    """20 MiB of empty resource metrics then a zero: refused after the limit, not walked to the end."""
    assert strip_zero_padding(resources(1000) + b"\x00") == resources(1000)
    with pytest.raises(StructureLimitError) as refused:
        strip_zero_padding(resources(10 * 1024 * 1024) + b"\x00")
    assert refused.value.limit == "max_resource_metrics"
    assert refused.value.visited == DEFAULT_LIMITS.max_resource_metrics
    assert (
        str(refused.value) == "more than limits.max_resource_metrics (1000) resource metrics in one payload"
    )
    assert strip_zero_padding(resources(3) + b"\x00", max_resource_metrics=3) == resources(3)
    with pytest.raises(StructureLimitError):
        strip_zero_padding(resources(4) + b"\x00", max_resource_metrics=3)
