"""The quota engine's errors: one tree, each error a client can be answered with carrying its Kafka
error code (``error_code``, Kafka's number: this package imports nothing else of the repository, so
the codes are numbers here and ``subscriptions.errors.Errors`` names them; a test checks they agree)::

    QuotaError                          (an error of the quota engine)
    ├── QuotaEntityError                INVALID_REQUEST (42): an AlterClientQuotas entry Kafka rejects
    ├── ThrottlingQuotaExceededError    THROTTLING_QUOTA_EXCEEDED (89): a mutation over its quota
    ├── QuotaConfigError                INVALID_CONFIG (40): the ``quotas:`` configuration
    └── QuotaCallbackError              INVALID_CONFIG (40): ``client.quota.callback.class`` names no
                                        usable callback

Not in the tree, as in Kafka, because no client is answered with them: ``sensor.QuotaViolationError``
(a sensor over its bound, which the managers turn into a throttle time) and the connection quotas'
``TooManyConnectionsError`` / ``ConnectionThrottledError`` (the listener closes or delays the
connection; Kafka's acceptor does the same with its own exceptions).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["QuotaError"]

INVALID_CONFIG = 40
INVALID_REQUEST = 42
THROTTLING_QUOTA_EXCEEDED = 89


class QuotaError(Exception):
    """An error of the quota engine; ``error_code`` is the Kafka error code a client is answered with."""

    error_code: ClassVar[int] = INVALID_REQUEST
