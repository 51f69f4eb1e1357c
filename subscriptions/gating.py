"""Get and Push gate rules: pure functions over millisecond timestamps (docs/rules.md TEL-14, TEL-17, PD-1,
PD-7, PD-9).

Each gate returns a decision value: the wait in ms, 0 meaning "allowed now" (a positive wait is the
throttle time a too-early request is answered with, PD-7). A timestamp that was never set is
``NEVER``, far enough in the past that any clock passes the interval check: a new instance's first
Get is always allowed whatever the clock reads (PD-9), where Kafka compares against epoch 0.
"""

from __future__ import annotations

from typing import Final

from subscriptions.errors import Errors

__all__ = ["NEVER", "early_get_allowed", "get_wait_ms", "push_wait_ms"]

NEVER: Final = -(1 << 62)
"""The timestamp of something that never happened."""

_EARLY_GET_AFTER: Final = frozenset({Errors.UNKNOWN_SUBSCRIPTION_ID, Errors.UNSUPPORTED_COMPRESSION_TYPE})


def get_wait_ms(last_get_ms: int, last_push_ms: int, push_interval_ms: int, now_ms: int) -> int:
    """TEL-14: a Get is allowed once ``push_interval_ms`` has passed since the last Get or Push."""
    wait = max(last_get_ms, last_push_ms) + push_interval_ms - now_ms
    return wait if wait > 0 else 0


def push_wait_ms(last_get_ms: int, last_push_ms: int, push_interval_ms: int, now_ms: int) -> int:
    """TEL-17: the first Push after a Get is always allowed; later ones once per interval."""
    if last_get_ms > last_push_ms:
        return 0
    wait = last_push_ms + push_interval_ms - now_ms
    return wait if wait > 0 else 0


def early_get_allowed(last_error: int) -> bool:
    """PD-1: after a Push answered with UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE the
    next Get is allowed at once (the KIP's intent; Kafka's code never allows it, DIV-1). Such an
    early Get does not move ``last_get``, so the interval still paces the next Push."""
    return last_error in _EARLY_GET_AFTER
