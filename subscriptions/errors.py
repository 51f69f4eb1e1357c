"""Kafka error codes (``Errors``), the exceptions that carry them, and the authorization denials.

Error codes travel in responses (as in Kafka), so the request path returns them as values. An
exception that reaches a client is an ``ApiError`` (Kafka's ``ApiException``): it carries its code as
``error`` (an ``Errors`` member) and its message, so a boundary answers any of them with one
``except ApiError as exc: ... exc.error, str(exc)``; how each code is answered on each transport is
``ingest.errors``' table. The tree::

    ApiError                          .error: the Errors member a client is answered with
    ├── SubscriptionError             subscription validation; .detail says why, beyond the message
    │   ├── InvalidRequestError       INVALID_REQUEST (42): empty name, unknown key, interval out of range
    │   └── InvalidConfigError        INVALID_CONFIG (40): a value that does not parse, a bad pattern
    ├── AuthorizationError            CLUSTER_AUTHORIZATION_FAILED (31): every denial, built here only
    │   ├── ClusterAuthorizationError an operation on the CLUSTER resource (admin API, Kafka admin RPCs)
    │   └── InstanceOwnershipError    an OTLP push naming another principal's client instance (F8)
    └── (in ingest) AuthenticationError, SASL_AUTHENTICATION_FAILED (58): ``ingest.security.authentication``

``Errors.keeps_client_telemetry`` says how real clients react to a code (docs/rules.md TEL-25, PD-12): on
INVALID_REQUEST, INVALID_RECORD or UNSUPPORTED_VERSION a Kafka client turns telemetry off for the life
of the process, so transient problems must never be answered with those.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar
from uuid import UUID

from subscriptions.subscription_id import kafka_uuid_string

__all__ = [
    "ApiError",
    "AuthorizationError",
    "ClusterAuthorizationError",
    "Errors",
    "InstanceOwnershipError",
    "InvalidConfigError",
    "InvalidRequestError",
    "SubscriptionError",
    "error_name",
]


class Errors(IntEnum):
    """The Kafka error codes the telemetry APIs and their admin surface answer with (spec A.1)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33  # SASL on the Kafka listener, and AlterUserScramCredentials
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41  # admin only: a config-log change lost the race for its offset; retriable
    INVALID_REQUEST = 42
    SASL_AUTHENTICATION_FAILED = 58  # an unknown bearer token: the request is not handled (ingest.errors)
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    RESOURCE_NOT_FOUND = 91  # the SCRAM admin APIs (KIP-554)
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118

    @property
    def keeps_client_telemetry(self) -> bool:
        """True when a Kafka client answered with this code keeps sending telemetry (TEL-25)."""
        return self in _CLIENT_KEEPS_TELEMETRY


_CLIENT_KEEPS_TELEMETRY = frozenset(
    {
        Errors.NONE,
        Errors.THROTTLING_QUOTA_EXCEEDED,
        Errors.UNKNOWN_SUBSCRIPTION_ID,
        Errors.UNSUPPORTED_COMPRESSION_TYPE,
        Errors.TELEMETRY_TOO_LARGE,
    }
)


class ApiError(Exception):
    """A failure a client is answered with (Kafka's ``ApiException``): ``error`` is its code, the
    exception's text its message."""

    error: ClassVar[Errors] = Errors.UNKNOWN_SERVER_ERROR


class SubscriptionError(ApiError, ValueError):
    """A subscription (config resource of type ``client-metrics``) was rejected."""

    error: ClassVar[Errors] = Errors.INVALID_REQUEST

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        """Why, beyond Kafka's message (e.g. which part of a pattern is wrong)."""


class InvalidRequestError(SubscriptionError):
    """INVALID_REQUEST (42): the request itself is wrong (TEL-2 steps 1, 2 and 4)."""

    error = Errors.INVALID_REQUEST


class InvalidConfigError(SubscriptionError):
    """INVALID_CONFIG (40): a value does not parse as its key's type, or a match pattern is bad."""

    error = Errors.INVALID_CONFIG


class AuthorizationError(ApiError):
    """A principal may not do what it asked: CLUSTER_AUTHORIZATION_FAILED (31), on every surface."""

    error = Errors.CLUSTER_AUTHORIZATION_FAILED


class ClusterAuthorizationError(AuthorizationError):
    """``operation`` (ALTER_CONFIGS, DESCRIBE_CONFIGS) on the CLUSTER resource was denied; the one
    message every admin surface answers a denial with: ``Cluster authorization failed (OPERATION)``."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"Cluster authorization failed ({operation})")
        self.operation = operation


class InstanceOwnershipError(AuthorizationError):
    """An OTLP push named a client instance id that belongs to another principal; the message does not
    name the owner."""

    def __init__(self, instance_id: UUID) -> None:
        super().__init__(f"client instance {kafka_uuid_string(instance_id)} belongs to another principal")
        self.instance_id = instance_id


def error_name(code: int) -> str:
    """The name of a Kafka error code this sink answers with (``UNKNOWN_<code>`` for any other)."""
    try:
        return Errors(code).name
    except ValueError:
        return f"UNKNOWN_{code}"
