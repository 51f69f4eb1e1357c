"""How each outcome (a Kafka error code) is answered on each transport: the one error table.

- KIP-714 RPCs (the gRPC ``ClientTelemetry`` service, their HTTP JSON equivalents, the Kafka wire
  listener): the Kafka error code travels in the response, the transport says OK (gRPC ``OK``, HTTP
  200), as in Kafka. Protocol errors are never a transport failure.
- OTLP receivers (gRPC ``MetricsService/Export``, HTTP ``POST /v1/metrics``): OTLP clients only read
  transport statuses, so each code maps to one (``OTLP_ANSWERS``). Retryable answers carry the wait:
  gRPC ``RetryInfo``, HTTP ``Retry-After`` in whole seconds rounded up (PD-7); without it OTLP clients
  treat RESOURCE_EXHAUSTED as permanent, which is how a payload over a size or structure limit
  (TELEMETRY_TOO_LARGE) is answered: RESOURCE_EXHAUSTED / 413 with no wait, as the OTel Collector does.
- The admin API (HTTP): ``ADMIN_HTTP_STATUS``.
- An unknown bearer token (``ingest.security``), on every RPC: the request is not handled at all, and the
  transport says so (gRPC UNAUTHENTICATED, HTTP 401 with ``WWW-Authenticate: Bearer`` and a JSON body
  carrying Kafka's SASL_AUTHENTICATION_FAILED, 58: ``AUTHENTICATION_ANSWER``). Not a Kafka error in
  an OK response: a Kafka client turns its telemetry off for good on a code it does not expect
  (TEL-25), while a failed request makes it retry after five minutes, so a client recovers by itself
  once its token is fixed. OTLP clients do not retry 401/UNAUTHENTICATED, which is right for a
  credential that will not start working by itself.

Which code a failure gets is decided by how clients react (PD-12): nothing transient is ever
answered with a code that turns a client's telemetry off.

The exceptions that reach a client carry their code as ``error`` (``subscriptions.errors.ApiError``,
Kafka's ``ApiException``; that module draws the tree, denials included). The ingest side of it::

    ApiError                            (subscriptions.errors)
    ├── SubscriptionError, AuthorizationError, ...   (subscriptions.errors)
    ├── AuthenticationError             SASL_AUTHENTICATION_FAILED (58): ``ingest.security``,
    │                                   answered with ``AUTHENTICATION_ANSWER``
    ├── ConfigLogError                  UNKNOWN_SERVER_ERROR (-1): ``ingest.admin.config_log``
    │   └── ConfigConflictError         NOT_CONTROLLER (41)
    └── PayloadError                    INVALID_RECORD (87): ``ingest.push.codec``
        ├── InvalidPayloadError         INVALID_RECORD (87)
        └── PayloadTooLargeError        TELEMETRY_TOO_LARGE (118)
            └── StructureLimitError     TELEMETRY_TOO_LARGE (118): ``ingest.push.otlp_scan``

The quota engine imports nothing of the repository, so its tree (``quotas.errors.QuotaError``:
QuotaEntityError, ThrottlingQuotaExceededError, QuotaConfigError, QuotaCallbackError) carries the
code as its number, ``error_code``; the admin operations answer ``Errors(exc.error_code)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

import grpc

from subscriptions.errors import Errors, error_name

__all__ = [
    "ADMIN_HTTP_STATUS",
    "AUTHENTICATION_ANSWER",
    "AUTHENTICATION_FAILED",
    "OTLP_ANSWERS",
    "OtlpAnswer",
    "admin_http_status",
    "error_name",
    "otlp_answer",
    "retry_after_seconds",
]


class OtlpAnswer(NamedTuple):
    grpc_status: grpc.StatusCode
    http_status: int
    retryable: bool
    """True: the answer carries the wait (RetryInfo / Retry-After) and the client sends again."""


OTLP_ANSWERS: Final[Mapping[Errors, OtlpAnswer]] = MappingProxyType(
    {
        Errors.NONE: OtlpAnswer(grpc.StatusCode.OK, 200, False),
        Errors.THROTTLING_QUOTA_EXCEEDED: OtlpAnswer(grpc.StatusCode.RESOURCE_EXHAUSTED, 429, True),
        Errors.UNKNOWN_SERVER_ERROR: OtlpAnswer(grpc.StatusCode.UNAVAILABLE, 503, True),
        Errors.TELEMETRY_TOO_LARGE: OtlpAnswer(grpc.StatusCode.RESOURCE_EXHAUSTED, 413, False),
        Errors.INVALID_RECORD: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 400, False),
        Errors.INVALID_REQUEST: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 400, False),
        Errors.INVALID_CONFIG: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 400, False),
        Errors.NOT_CONTROLLER: OtlpAnswer(grpc.StatusCode.UNAVAILABLE, 503, True),  # admin only
        Errors.UNSUPPORTED_COMPRESSION_TYPE: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 415, False),
        Errors.UNKNOWN_SUBSCRIPTION_ID: OtlpAnswer(grpc.StatusCode.FAILED_PRECONDITION, 409, False),
        Errors.CLUSTER_AUTHORIZATION_FAILED: OtlpAnswer(grpc.StatusCode.PERMISSION_DENIED, 403, False),
        Errors.UNSUPPORTED_VERSION: OtlpAnswer(grpc.StatusCode.UNIMPLEMENTED, 404, False),
        Errors.SASL_AUTHENTICATION_FAILED: OtlpAnswer(grpc.StatusCode.UNAUTHENTICATED, 401, False),
        # the Kafka listener's SASL and SCRAM admin codes; no OTLP request is answered with them
        Errors.UNSUPPORTED_SASL_MECHANISM: OtlpAnswer(grpc.StatusCode.UNAUTHENTICATED, 401, False),
        Errors.ILLEGAL_SASL_STATE: OtlpAnswer(grpc.StatusCode.FAILED_PRECONDITION, 400, False),
        Errors.RESOURCE_NOT_FOUND: OtlpAnswer(grpc.StatusCode.NOT_FOUND, 404, False),
        Errors.DUPLICATE_RESOURCE: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 400, False),
        Errors.UNACCEPTABLE_CREDENTIAL: OtlpAnswer(grpc.StatusCode.INVALID_ARGUMENT, 400, False),
    }
)

AUTHENTICATION_FAILED: Final = Errors.SASL_AUTHENTICATION_FAILED
"""The code an unknown bearer token is answered and counted with."""
AUTHENTICATION_ANSWER: Final = OTLP_ANSWERS[AUTHENTICATION_FAILED]
"""How an unknown bearer token is answered, on every RPC."""

ADMIN_HTTP_STATUS: Final[Mapping[Errors, int]] = MappingProxyType(
    {
        Errors.NONE: 200,
        Errors.INVALID_REQUEST: 400,
        Errors.INVALID_CONFIG: 400,
        Errors.CLUSTER_AUTHORIZATION_FAILED: 403,
        Errors.NOT_CONTROLLER: 409,  # a config-log conflict: refresh and retry (ingest.admin.config_log)
        Errors.THROTTLING_QUOTA_EXCEEDED: 429,  # the mutation quota, with Retry-After
        Errors.UNKNOWN_SERVER_ERROR: 500,
        Errors.RESOURCE_NOT_FOUND: 404,
        Errors.DUPLICATE_RESOURCE: 400,
        Errors.UNACCEPTABLE_CREDENTIAL: 400,
        Errors.UNSUPPORTED_SASL_MECHANISM: 400,
    }
)


def otlp_answer(error: Errors) -> OtlpAnswer:
    return OTLP_ANSWERS[error]


def admin_http_status(error: Errors) -> int:
    """The HTTP status of an admin answer (codes the admin API does not produce are 500)."""
    return ADMIN_HTTP_STATUS.get(error, 500)


def retry_after_seconds(throttle_ms: int) -> int:
    """``Retry-After``: the throttle in whole seconds, rounded up, at least 1 (PD-7)."""
    return max(1, -(-throttle_ms // 1000))
