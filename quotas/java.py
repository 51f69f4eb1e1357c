"""Java numeric and text semantics that Kafka's quota arithmetic depends on (docs/rules.md C-3, C-4, QUO-4).

Quota decisions compare IEEE doubles computed exactly as Kafka computes them, and throttle times are
rounded with Java's ``Math.round``; these helpers keep those rules in one place.
"""

from __future__ import annotations

import math
from typing import Final
from urllib.parse import quote

__all__ = ["DOUBLE_MAX", "INT_MAX", "LONG_MAX", "double_to_int", "java_round", "sanitize"]

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1
DOUBLE_MAX: Final = 1.7976931348623157e308  # Double.MAX_VALUE


def java_round(x: float) -> int:
    """``Math.round(double)``: nearest integer, ties toward +infinity; saturating; NaN -> 0 (C-3)."""
    if math.isnan(x):
        return 0
    if x >= LONG_MAX:
        return LONG_MAX
    if x <= -(2**63):
        return -(2**63)
    r = math.floor(x)
    return r + 1 if x - r >= 0.5 else r


def double_to_int(x: float) -> int:
    """A double narrowed to a Java int: truncated toward zero and saturated (C-4)."""
    if math.isnan(x):
        return 0
    if x >= INT_MAX:
        return INT_MAX
    if x <= -(2**31):
        return -(2**31)
    return int(x)


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode as Java's ``URLEncoder`` (UTF-8), with space as
    ``%20`` and ``*`` as ``%2A``; letters, digits, ``.``, ``-`` and ``_`` are kept (QUO-4)."""
    # Java's UTF-8 encoder writes "?" for a lone surrogate; so does Python's "replace"
    return quote(name.encode("utf-8", "replace"), safe="").replace("~", "%7E")
