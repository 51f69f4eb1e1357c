"""OTLP JSON bodies: bounded before conversion (F2, F20), on the HTTP receiver and on their own."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from exporters import InMemoryExporter
from ingest.json_limits import json_elements
from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push.codec import InvalidPayloadError, PayloadError
from ingest.push.json_bodies import otlp_json_to_protobuf
from ingest.push.otlp_scan import StructureLimitError
from ingest.wire import OTLP_METRICS_PATH
from tests.support.clock import FakeClock
from tests.support.otlp import resource_payload
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import serve_both

JSON = {"Content-Type": "application/json"}


def as_json(payload: bytes) -> bytes:
    return json_format.MessageToJson(ExportMetricsServiceRequest.FromString(payload)).encode()


def test_a_valid_body_converts_to_the_same_protobuf() -> None:
    assert otlp_json_to_protobuf(as_json(resource_payload()), DEFAULT_LIMITS) == resource_payload()


def test_F2_a_huge_array_is_refused_before_it_is_parsed() -> None:
    bomb = b'{"resourceMetrics":[' + b"{}," * 1_000_000 + b"{}]}"
    with pytest.raises(StructureLimitError) as refused:
        otlp_json_to_protobuf(bomb, DEFAULT_LIMITS)
    assert refused.value.limit == "max_json_elements"
    assert refused.value.visited == 0  # counted at C speed, nothing parsed


def _values(tree: object) -> int:
    """The values and containers of a parsed JSON tree."""
    values, stack = 0, [tree]
    while stack:
        node = stack.pop()
        values += 1
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        stack.extend(children)
    return values


_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_KEYS = st.sampled_from(
    ["resourceMetrics", "resource", "attributes", "key", "value", "stringValue", "arrayValue", "values",
     "kvlistValue", "scopeMetrics", "metrics", "name", "gauge", "dataPoints", "asInt", "timeUnixNano", "x"]
)  # fmt: skip
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=40,
)
_SMALL = RequestLimits(max_json_elements=60, max_json_depth=6)


@given(tree=_TREES, limits=st.sampled_from([_SMALL, DEFAULT_LIMITS]))
def test_fuzz_any_json_converts_or_is_refused_with_a_payload_error_and_is_counted_before_parsing(
    tree: object, limits: RequestLimits
) -> None:
    """Every JSON tree, OTLP-shaped or not: protobuf bytes, or a PayloadError (an OTLP answer), never
    anything else; and the C-speed count before ``json.loads`` bounds the values it would build, so the
    conversion's work grows with the body, never faster."""
    text = json.dumps(tree).encode()
    assert _values(tree) <= json_elements(text) + 1 <= len(text) + 1
    try:
        converted = otlp_json_to_protobuf(text, limits)
    except PayloadError:
        return
    assert ExportMetricsServiceRequest.FromString(converted).ByteSize() == len(converted)


@given(st.binary(max_size=200))
def test_fuzz_short_bodies_convert_only_when_a_json_object_and_else_say_they_are_not_otlp_json(
    text: bytes,
) -> None:
    """Any body too short for a structural limit: what is not a JSON object is ``InvalidPayloadError``
    (INVALID_RECORD) saying so; an object converts to the protobuf bytes of an export or is refused the
    same way; never another exception."""
    try:
        is_object = isinstance(json.loads(text), dict)
    except ValueError:  # not JSON, not UTF-8
        is_object = False
    if not is_object:
        with pytest.raises(InvalidPayloadError, match=r"^not OTLP JSON: "):
            otlp_json_to_protobuf(text, DEFAULT_LIMITS)
        return
    with contextlib.suppress(InvalidPayloadError):  # an object OTLP cannot read
        converted = otlp_json_to_protobuf(text, DEFAULT_LIMITS)
        assert ExportMetricsServiceRequest.FromString(converted).ByteSize() == len(converted)


@pytest.mark.parametrize("depth", [DEFAULT_LIMITS.max_json_depth + 1, 100_000])
def test_F20_deep_nesting_is_invalid_and_names_the_limit(depth: int) -> None:
    value = '{"arrayValue":{"values":[' * depth + "]}}" * depth
    body = ('{"resourceMetrics":[{"resource":{"attributes":[{"key":"k","value":' + value + "}]}}]}").encode()
    with pytest.raises(InvalidPayloadError, match=r"limits\.max_json_depth \(64\)"):
        otlp_json_to_protobuf(body, RequestLimits(max_json_elements=10**6))


@pytest.mark.integration
async def test_F2_json_bombs_are_413_and_deep_bodies_400_never_an_error_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter = InMemoryExporter()
    bomb = gzip.compress(b'{"resourceMetrics":[' + b"{}," * 3_000_000 + b"{}]}")
    deep = b"[" * 100_000 + b"]" * 100_000
    async with serve_both(kafka_pipeline(FakeClock(), exporter)) as endpoints:
        with caplog.at_level(logging.INFO):
            too_large = await endpoints.http.post(
                OTLP_METRICS_PATH, content=bomb, headers={**JSON, "Content-Encoding": "gzip"}
            )
            too_deep = await endpoints.http.post(OTLP_METRICS_PATH, content=deep, headers=JSON)
        fine = await endpoints.http.post(OTLP_METRICS_PATH, content=as_json(resource_payload()), headers=JSON)
    assert too_large.status_code == 413
    assert "Retry-After" not in too_large.headers
    assert json.loads(too_large.text)["code"] == 8  # RESOURCE_EXHAUSTED
    assert "limits.max_json_elements" in json.loads(too_large.text)["message"]
    assert too_deep.status_code == 400
    assert "max_json_depth" in json.loads(too_deep.text)["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert fine.status_code == 200
    assert len(exporter.pushes) == 1
