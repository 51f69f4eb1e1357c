"""JSON bodies bounded before they are parsed (``ingest.json_limits``): the C-speed count of values and
the small bodies of the KIP-714 and admin HTTP requests."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from ingest.json_limits import MAX_JSON_BODY_VALUES, json_elements, small_json
from tests.support.otlp import resource_payload

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


def _nodes(tree: object) -> int:
    """The values and containers of a parsed JSON tree, the tree itself included."""
    if isinstance(tree, dict):
        return 1 + sum(_nodes(child) for child in tree.values())
    if isinstance(tree, list):
        return 1 + sum(_nodes(child) for child in tree)
    return 1


def test_json_elements_bound_every_value_and_container() -> None:
    message = ExportMetricsServiceRequest.FromString(resource_payload())
    text = json_format.MessageToJson(message).encode()
    assert _nodes(json.loads(text)) <= json_elements(text) + 1


@given(_JSON)
def test_json_elements_bound_the_values_of_any_json_text(tree: object) -> None:
    text = json.dumps(tree).encode()
    assert _nodes(tree) <= json_elements(text) + 1


def test_a_small_body_is_parsed() -> None:
    assert small_json(b'{"a": [1, 2]}') == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("body", "max_values", "message"),
    [
        (b"[" + b"0," * MAX_JSON_BODY_VALUES + b"0]", MAX_JSON_BODY_VALUES, "more than 1024 JSON values"),
        (b'{"a": 1, "b": 2}', 1, "more than 1 JSON values"),
        (b"[" * 100_000 + b"]" * 100_000, 10**6, "nested too deep"),
        (b'{"a": ', MAX_JSON_BODY_VALUES, "not JSON"),
        (b"\xff", MAX_JSON_BODY_VALUES, "not JSON"),
    ],
)
def test_a_body_over_its_bound_or_not_json_is_a_value_error_saying_why(
    body: bytes, max_values: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        small_json(body, max_values)
