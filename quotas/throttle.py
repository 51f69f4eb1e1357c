"""Throttle-time maths in one place (Kafka's ``QuotaUtils``; docs/rules.md STAT-8, TB-3).

Every manager asks these functions, never computes a throttle itself.
"""

from __future__ import annotations

from quotas.java import java_round

__all__ = ["bounded_throttle_time_ms", "throttle_time_ms", "token_bucket_throttle_time_ms"]


def throttle_time_ms(value: float, bound: float, window_ms: int) -> int:
    """How long to wait until a rate of ``value`` over ``window_ms`` falls back to ``bound``.

    ``round((value - bound) / bound * window_ms)`` with Java rounding: waiting X more ms brings
    ``value * W / (W + X)`` down to ``bound``. ``window_ms`` is the rate's window at the same instant
    (STAT-5). With bound 0 and value > 0 the quotient is +infinity, which rounds to ``2**63-1``.
    """
    difference = value - bound
    try:
        throttle = difference / bound * window_ms
    except ZeroDivisionError:
        throttle = float("inf") if difference > 0 else float("-inf") if difference < 0 else float("nan")
    return java_round(throttle)


def bounded_throttle_time_ms(value: float, bound: float, window_ms: int, max_ms: int) -> int:
    """``min(throttle_time_ms(...), max_ms)``: the request and connection quotas' variant."""
    return min(throttle_time_ms(value, bound, window_ms), max_ms)


def token_bucket_throttle_time_ms(tokens: float, quota: float) -> int:
    """Time for a bucket at ``tokens`` (< 0) to refill to 0 at ``quota``/s: ``round(-tokens / quota
    * 1000)`` (TB-3)."""
    try:
        throttle = -tokens / quota * 1000
    except ZeroDivisionError:
        throttle = float("inf") if tokens < 0 else float("nan")
    return java_round(throttle)
