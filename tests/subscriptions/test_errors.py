"""A.1 error codes and TEL-25 (which codes keep a Kafka client sending telemetry); the exceptions that
carry a code (``ApiError``) and the denials, each built in one place."""

from __future__ import annotations

from uuid import UUID

import pytest

from subscriptions import Errors, kafka_uuid_string
from subscriptions.errors import (
    ApiError,
    AuthorizationError,
    ClusterAuthorizationError,
    InstanceOwnershipError,
    InvalidConfigError,
    InvalidRequestError,
    SubscriptionError,
    error_name,
)


def test_A_1_error_codes_are_kafkas() -> None:
    assert {e.name: int(e) for e in Errors} == {
        "NONE": 0,
        "UNKNOWN_SERVER_ERROR": -1,
        "CLUSTER_AUTHORIZATION_FAILED": 31,
        "UNSUPPORTED_SASL_MECHANISM": 33,
        "ILLEGAL_SASL_STATE": 34,
        "UNSUPPORTED_VERSION": 35,
        "INVALID_CONFIG": 40,
        "NOT_CONTROLLER": 41,
        "INVALID_REQUEST": 42,
        "SASL_AUTHENTICATION_FAILED": 58,
        "UNSUPPORTED_COMPRESSION_TYPE": 76,
        "INVALID_RECORD": 87,
        "THROTTLING_QUOTA_EXCEEDED": 89,
        "RESOURCE_NOT_FOUND": 91,
        "DUPLICATE_RESOURCE": 92,
        "UNACCEPTABLE_CREDENTIAL": 93,
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
        (Errors.SASL_AUTHENTICATION_FAILED, False),  # not a telemetry answer: the request failed
    ],
)
def test_TEL_25_client_reactions(error: Errors, keeps: bool) -> None:
    assert error.keeps_client_telemetry is keeps


@pytest.mark.parametrize(
    ("cls", "error"),
    [
        (SubscriptionError, Errors.INVALID_REQUEST),
        (InvalidRequestError, Errors.INVALID_REQUEST),
        (InvalidConfigError, Errors.INVALID_CONFIG),
        (AuthorizationError, Errors.CLUSTER_AUTHORIZATION_FAILED),
        (ClusterAuthorizationError, Errors.CLUSTER_AUTHORIZATION_FAILED),
        (InstanceOwnershipError, Errors.CLUSTER_AUTHORIZATION_FAILED),
    ],
)
def test_A_1_each_api_error_carries_its_kafka_code(cls: type[ApiError], error: Errors) -> None:
    assert issubclass(cls, ApiError)
    assert cls.error is error


def test_TEL_23_a_cluster_denial_has_one_message_naming_the_operation() -> None:
    for operation in ("ALTER_CONFIGS", "DESCRIBE_CONFIGS"):
        denied = ClusterAuthorizationError(operation)
        assert isinstance(denied, AuthorizationError)
        assert (denied.error, str(denied)) == (
            Errors.CLUSTER_AUTHORIZATION_FAILED,
            f"Cluster authorization failed ({operation})",
        )


def test_F8_an_instance_ownership_denial_names_the_instance_not_its_owner() -> None:
    instance_id = UUID(int=7)
    denied = InstanceOwnershipError(instance_id)
    assert isinstance(denied, AuthorizationError)
    assert denied.error is Errors.CLUSTER_AUTHORIZATION_FAILED
    assert str(denied) == f"client instance {kafka_uuid_string(instance_id)} belongs to another principal"


def test_error_names_are_kafkas_and_unknown_codes_are_named_by_number() -> None:
    assert error_name(58) == "SASL_AUTHENTICATION_FAILED"
    assert error_name(31) == "CLUSTER_AUTHORIZATION_FAILED"
    assert error_name(1234) == "UNKNOWN_1234"
