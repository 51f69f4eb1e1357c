"""A.1 error codes and TEL-25: which codes keep a Kafka client sending telemetry."""

from __future__ import annotations

import pytest

from subscriptions import Errors


def test_A_1_error_codes_are_kafkas() -> None:
    assert {e.name: int(e) for e in Errors} == {
        "NONE": 0,
        "UNKNOWN_SERVER_ERROR": -1,
        "CLUSTER_AUTHORIZATION_FAILED": 31,
        "UNSUPPORTED_VERSION": 35,
        "INVALID_CONFIG": 40,
        "NOT_CONTROLLER": 41,
        "INVALID_REQUEST": 42,
        "UNSUPPORTED_COMPRESSION_TYPE": 76,
        "INVALID_RECORD": 87,
        "THROTTLING_QUOTA_EXCEEDED": 89,
        "UNKNOWN_SUBSCRIPTION_ID": 117,
        "TELEMETRY_TOO_LARGE": 118,
    }


@pytest.mark.parametrize(
    ("error", "keeps"),
    [
        (Errors.NONE, True),
        (Errors.THROTTLING_QUOTA_EXCEEDED, True),  # retry after the interval
        (Errors.TELEMETRY_TOO_LARGE, True),
        (Errors.UNKNOWN_SUBSCRIPTION_ID, True),  # re-Get at once
        (Errors.UNSUPPORTED_COMPRESSION_TYPE, True),
        (Errors.INVALID_REQUEST, False),  # telemetry disabled for the life of the process
        (Errors.INVALID_RECORD, False),
        (Errors.UNSUPPORTED_VERSION, False),
        (Errors.UNKNOWN_SERVER_ERROR, False),
    ],
)
def test_TEL_25_client_reactions(error: Errors, keeps: bool) -> None:
    assert error.keeps_client_telemetry is keeps
