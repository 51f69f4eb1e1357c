"""OTLP JSON exports turned into protobuf with bounded cost.

OTLP JSON (``POST /v1/metrics``, ``application/json``): ``json_format`` converts a parsed JSON tree
to a message at about 15 to 25 microseconds per JSON value (it reflects on descriptors for every
member), so the conversion is bounded before it starts:

1. ``max_json_elements``: the commas, ``{`` and ``[`` of the body, counted at C speed
   (``ingest.json_limits.json_elements``), are an upper bound on its values (members and array
   items) and containers; over it: ``StructureLimitError`` (TELEMETRY_TOO_LARGE, 413), before
   anything is parsed. At the default (100,000) the conversion takes at most about 2.5 s of a
   decoder process and ``json.loads`` builds at most that many objects.
2. ``json.loads`` (C; its own recursion guard turns a body nested about a thousand deep into
   ``RecursionError``, refused here);
3. ``json_format.ParseDict`` with ``max_recursion_depth`` = ``max_json_depth``.

Nesting deeper than either, or a body that is not OTLP JSON, is ``InvalidPayloadError`` (INVALID_RECORD,
400). The protobuf bytes then go through the same structural scan (``otlp_scan``) as any payload.

The small JSON bodies of the KIP-714 and admin HTTP requests are bounded the same way, in
``ingest.json_limits``.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from ingest.json_limits import json_elements
from ingest.limits import RequestLimits
from ingest.push.codec import InvalidPayloadError
from ingest.push.otlp_scan import StructureLimitError

__all__ = ["otlp_json_to_protobuf"]


def _too_deep(limits: RequestLimits) -> InvalidPayloadError:
    return InvalidPayloadError(
        f"not OTLP JSON: nested deeper than limits.max_json_depth ({limits.max_json_depth})"
    )


def otlp_json_to_protobuf(text: bytes, limits: RequestLimits) -> bytes:
    """The ``ExportMetricsServiceRequest`` (``MetricsData``) bytes of an OTLP JSON body."""
    elements = json_elements(text)
    if elements > limits.max_json_elements:
        raise StructureLimitError(
            "max_json_elements",
            f"more than limits.max_json_elements ({limits.max_json_elements}) JSON values in one body",
            0,
        )
    try:
        tree = json.loads(text)
    except RecursionError:
        raise _too_deep(limits) from None
    except ValueError as exc:  # not JSON, not UTF-8, an integer of more than 4,300 digits...
        raise InvalidPayloadError(f"not OTLP JSON: {exc}") from exc
    if not isinstance(tree, dict):
        raise InvalidPayloadError(f"not OTLP JSON: the body is a JSON {type(tree).__name__}, not an object")
    try:
        message = json_format.ParseDict(
            tree, ExportMetricsServiceRequest(), max_recursion_depth=limits.max_json_depth
        )
    except (json_format.ParseError, RecursionError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, RecursionError) or "too deep" in str(exc):
            raise _too_deep(limits) from None
        raise InvalidPayloadError(f"not OTLP JSON: {exc}") from exc
    return message.SerializeToString()
