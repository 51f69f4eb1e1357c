"""TEL-14, TEL-17, PD-1, PD-7, PD-9: the gate rules as case tables."""

from __future__ import annotations

import pytest

from subscriptions import Errors
from subscriptions.gating import NEVER, early_get_allowed, get_wait_ms, push_wait_ms

T = 1_700_000_000_000
I = 30_000  # noqa: E741


@pytest.mark.parametrize(
    ("last_get", "last_push", "now", "wait"),
    [
        (NEVER, NEVER, T, 0),  # PD-9: a new instance's first Get is always allowed
        (NEVER, NEVER, 0, 0),  # ... whatever the clock reads (Kafka: not before t=interval)
        (T, NEVER, T + 1, I - 1),
        (T, NEVER, T + I - 1, 1),
        (T, NEVER, T + I, 0),  # exactly one interval
        (T, T + 30002, T + 45000, 15002),  # max(last_get, last_push) counts
        (T, T + 30002, T + 60002, 0),
        (T + 5, T, T + I + 4, 1),
    ],
)
def test_TEL_14_get_rate_rule(last_get: int, last_push: int, now: int, wait: int) -> None:
    assert get_wait_ms(last_get, last_push, I, now) == wait


@pytest.mark.parametrize(
    ("last_get", "last_push", "now", "wait"),
    [
        (T, NEVER, T + 2, 0),  # first push after a Get
        (T, NEVER, T + 10 * I, 0),
        (T + 1000, T, T + 1001, 0),  # a Get after the last push allows one push at once
        (T, T + 2, T + 3, I - 1),
        (T, T + 2, T + 30001, 1),
        (T, T + 2, T + 30002, 0),
        (NEVER, NEVER, T, 0),  # an instance created by a Push (another broker's client)
        (NEVER, NEVER, 0, 0),
        (T, T, T + 1, I - 1),  # last_get == last_push: not "after"
    ],
)
def test_TEL_17_push_rate_rule(last_get: int, last_push: int, now: int, wait: int) -> None:
    assert push_wait_ms(last_get, last_push, I, now) == wait


@pytest.mark.parametrize("wait", [1, 2, I])
def test_PD_7_a_refused_request_waits_at_least_1ms(wait: int) -> None:
    assert get_wait_ms(T, NEVER, I, T + I - wait) == wait >= 1
    assert push_wait_ms(T, T, I, T + I - wait) == wait >= 1


@pytest.mark.parametrize(
    ("last_error", "allowed"),
    [
        (Errors.UNKNOWN_SUBSCRIPTION_ID, True),
        (Errors.UNSUPPORTED_COMPRESSION_TYPE, True),
        (Errors.NONE, False),
        (Errors.THROTTLING_QUOTA_EXCEEDED, False),
        (Errors.TELEMETRY_TOO_LARGE, False),
        (Errors.INVALID_RECORD, False),
        (Errors.INVALID_REQUEST, False),
    ],
)
def test_PD_1_errors_that_allow_an_early_get(last_error: Errors, allowed: bool) -> None:
    assert early_get_allowed(last_error) is allowed
