"""The bounded cost of a JSON request body: its values counted at C speed before ``json.loads`` runs.

``json_elements`` counts the commas, ``{`` and ``[`` of a JSON text, an upper bound on its values
(members and array items) and containers, at C speed and without parsing. ``small_json`` parses the
small bodies of the KIP-714 HTTP requests and the admin HTTP API, which hold a few fields, only when
that count is at most ``MAX_JSON_BODY_VALUES`` (or the admin API's own bound); an OTLP JSON export is
bounded the same way by ``limits.max_json_elements`` (``ingest.push.json_bodies``).
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["MAX_JSON_BODY_VALUES", "json_elements", "small_json"]


def json_elements(text: bytes) -> int:
    """An upper bound on the values and containers of a JSON text: its commas, ``{`` and ``[``."""
    return text.count(b",") + text.count(b"{") + text.count(b"[")


MAX_JSON_BODY_VALUES: Final = 1024
"""The JSON bodies of the KIP-714 requests hold a few fields: more values than this (counted at C speed
before parsing: ``json_elements``) are refused 400 without being parsed."""


def small_json(raw: bytes, max_values: int = MAX_JSON_BODY_VALUES) -> Any:
    """A KIP-714 or admin request's JSON body, parsed only if it holds at most ``max_values`` values;
    ``ValueError`` saying why not."""
    if json_elements(raw) > max_values:
        raise ValueError(f"the body holds more than {max_values} JSON values")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("the body is nested too deep") from None
    except ValueError as exc:  # not JSON, not UTF-8, an integer of more than 4,300 digits...
        raise ValueError(f"the body is not JSON: {exc}") from exc
