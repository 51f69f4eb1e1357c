"""Kafka error codes used by the subscription core, and its error hierarchy.

Error codes travel in responses (as in Kafka), so the request path returns them as values; only
configuration (subscription validation) raises::

    SubscriptionError          carries .error (an Errors member), Kafka's message and a .detail
    ├── InvalidRequestError    INVALID_REQUEST (42): empty name, unknown key, interval out of range
    └── InvalidConfigError     INVALID_CONFIG (40): a value that does not parse, a bad match pattern

``Errors.keeps_client_telemetry`` says how real clients react to a code (docs/rules.md TEL-25, PD-12): on
INVALID_REQUEST, INVALID_RECORD or UNSUPPORTED_VERSION a Kafka client turns telemetry off for the life
of the process, so transient problems must never be answered with those.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = [
    "AUTHENTICATION_FAILED",
    "Errors",
    "InvalidConfigError",
    "InvalidRequestError",
    "SubscriptionError",
    "error_name",
]

AUTHENTICATION_FAILED: Final = 58
"""Kafka's SASL_AUTHENTICATION_FAILED: the code an unknown bearer token is answered and counted with
(``ingest.security``); not an ``Errors`` member, since the subscription core never answers it."""


class Errors(IntEnum):
    """The Kafka error codes the telemetry APIs and their admin surface answer with (spec A.1)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41  # admin only: a config-log change lost the race for its offset; retriable
    INVALID_REQUEST = 42
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
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


class SubscriptionError(ValueError):
    """A subscription (config resource of type ``client-metrics``) was rejected."""

    error: Errors = Errors.INVALID_REQUEST

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


def error_name(code: int) -> str:
    """The name of a Kafka error code this sink answers with (``UNKNOWN_<code>`` for any other)."""
    if code == AUTHENTICATION_FAILED:
        return "SASL_AUTHENTICATION_FAILED"
    try:
        return Errors(code).name
    except ValueError:
        return f"UNKNOWN_{code}"
