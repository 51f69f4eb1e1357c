"""The error table: every Kafka code has an answer on every transport, and retries are right; every
exception a client is answered with carries its code and is drawn in an errors module's tree."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest

import ingest
import subscriptions
from ingest import errors as ingest_errors
from ingest.errors import (
    AUTHENTICATION_ANSWER,
    OTLP_ANSWERS,
    admin_http_status,
    otlp_answer,
    retry_after_seconds,
)
from ingest.security.authentication import AuthenticationError
from subscriptions import Errors
from subscriptions import errors as subscription_errors
from subscriptions.errors import ApiError


def test_every_kafka_code_has_an_otlp_answer() -> None:
    assert set(OTLP_ANSWERS) == set(Errors)


@pytest.mark.parametrize("error", list(Errors))
def test_PD_12_only_transient_outcomes_are_retryable(error: Errors) -> None:
    answer = otlp_answer(error)
    transient = {Errors.THROTTLING_QUOTA_EXCEEDED, Errors.UNKNOWN_SERVER_ERROR, Errors.NOT_CONTROLLER}
    assert answer.retryable is (error in transient)
    if answer.retryable:  # what OTLP clients retry (with retry info / Retry-After)
        assert answer.grpc_status in {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE}
        assert answer.http_status in {429, 503}
    elif error is not Errors.NONE:
        assert 400 <= answer.http_status < 500  # a protocol error is never a 500


def test_PD_12_too_large_is_413_or_resource_exhausted_and_not_retried() -> None:
    assert otlp_answer(Errors.TELEMETRY_TOO_LARGE) == (grpc.StatusCode.RESOURCE_EXHAUSTED, 413, False)


@pytest.mark.parametrize(
    ("throttle_ms", "seconds"), [(1, 1), (999, 1), (1000, 1), (1001, 2), (29_000, 29), (0, 1)]
)
def test_PD_7_retry_after_is_whole_seconds_rounded_up(throttle_ms: int, seconds: int) -> None:
    assert retry_after_seconds(throttle_ms) == seconds


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (Errors.NONE, 200),
        (Errors.INVALID_REQUEST, 400),
        (Errors.INVALID_CONFIG, 400),
        (Errors.CLUSTER_AUTHORIZATION_FAILED, 403),
        (Errors.NOT_CONTROLLER, 409),
        (Errors.THROTTLING_QUOTA_EXCEEDED, 429),
        (Errors.UNKNOWN_SERVER_ERROR, 500),
        (Errors.TELEMETRY_TOO_LARGE, 500),
    ],
)
def test_TEL_23_admin_http_statuses(error: Errors, status: int) -> None:
    assert admin_http_status(error) == status


def test_an_unknown_token_is_sasl_authentication_failed_answered_unauthenticated() -> None:
    assert AuthenticationError.error is Errors.SASL_AUTHENTICATION_FAILED
    assert otlp_answer(AuthenticationError.error) is AUTHENTICATION_ANSWER
    assert AUTHENTICATION_ANSWER == (grpc.StatusCode.UNAUTHENTICATED, 401, False)


def _api_errors() -> set[type[ApiError]]:
    """Every ApiError class the sink's packages define (all their modules imported)."""
    for package in (ingest, subscriptions):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    found: set[type[ApiError]] = set()
    pending = [ApiError]
    while pending:
        for sub in pending.pop().__subclasses__():
            found.add(sub)
            pending.append(sub)
    return found


def test_every_api_error_carries_a_kafka_code_and_is_drawn_in_an_errors_tree() -> None:
    trees = f"{subscription_errors.__doc__}{ingest_errors.__doc__}"
    classes = _api_errors()
    assert AuthenticationError in classes
    for cls in classes:
        assert isinstance(cls.error, Errors), cls
        assert cls.error in OTLP_ANSWERS, cls
        if not cls.__name__.startswith("_"):  # private ones are answered where they are defined
            assert cls.__name__ in trees, f"{cls.__module__}.{cls.__name__} is not in an errors tree"
