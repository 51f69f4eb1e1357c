"""The admin surface of subscriptions: alter, describe and list ``client-metrics`` resources (TEL-23).

Altering needs ALTER_CONFIGS on the cluster, describing and listing need DESCRIBE_CONFIGS; without
them the answer is CLUSTER_AUTHORIZATION_FAILED (31). Who may do what is decided by a small
``ClusterAuthorizer`` plugin; the default allows everyone. Results carry a Kafka error code and
message instead of raising, so every transport can answer with them as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from subscriptions.errors import ClusterAuthorizationError, Errors, SubscriptionError
from subscriptions.model import PropertyValue
from subscriptions.store import SubscriptionStore

__all__ = ["AdminResult", "AllowAllAuthorizer", "ClientMetricsAdmin", "ClusterAuthorizer"]

log = logging.getLogger(__name__)

Operation = Literal["ALTER_CONFIGS", "DESCRIBE_CONFIGS"]
T = TypeVar("T")


class ClusterAuthorizer(Protocol):
    """Decides whether ``principal`` may perform ``operation`` on the CLUSTER resource."""

    def authorize(self, principal: str, operation: Operation) -> bool: ...


class AllowAllAuthorizer:
    """Every principal may do everything (no authorizer configured, as in Kafka)."""

    def authorize(self, principal: str, operation: Operation) -> bool:
        return True


class AdminResult(NamedTuple, Generic[T]):
    error: Errors
    message: str | None
    value: T | None = None
    throttle_time_ms: int = 0
    """The mutation-quota throttle (KIP-599) of a change; 0 for reads."""


def _denied(operation: Operation) -> AdminResult[T]:
    denial = ClusterAuthorizationError(operation)  # the one denial every admin surface answers
    return AdminResult(denial.error, str(denial))


class ClientMetricsAdmin:
    """Alter/describe/list subscriptions on a store, with Kafka's authorization and error codes."""

    def __init__(self, store: SubscriptionStore, authorizer: ClusterAuthorizer | None = None) -> None:
        self.store = store
        self.authorizer = authorizer or AllowAllAuthorizer()

    def alter(
        self,
        principal: str,
        name: str,
        properties: Mapping[str, PropertyValue],
        *,
        validate_only: bool = False,
    ) -> AdminResult[int]:
        """Set the complete property set of ``name`` (empty deletes); value: the store version."""
        if not self.authorizer.authorize(principal, "ALTER_CONFIGS"):
            return _denied("ALTER_CONFIGS")
        try:
            if validate_only:
                if properties or not name:
                    self.store.validate(name, properties)
                return AdminResult(Errors.NONE, None, self.store.version)
            return AdminResult(Errors.NONE, None, self.store.update(name, properties))
        except SubscriptionError as exc:
            return AdminResult(exc.error, exc.message)
        except Exception:  # an admin call never crashes the caller (spec A.1)
            log.exception("altering client-metrics resource %r failed unexpectedly", name)
            return AdminResult(Errors.UNKNOWN_SERVER_ERROR, "Unexpected error altering the subscription")

    def describe(self, principal: str, name: str) -> AdminResult[dict[str, PropertyValue]]:
        """The stored properties of ``name`` (empty for an unknown name, as Kafka describes it)."""
        if not self.authorizer.authorize(principal, "DESCRIBE_CONFIGS"):
            return _denied("DESCRIBE_CONFIGS")
        subscription = self.store.get(name)
        return AdminResult(Errors.NONE, None, dict(subscription.properties) if subscription else {})

    def list(self, principal: str) -> AdminResult[list[str]]:
        """ListClientMetricsResources: the subscription names."""
        if not self.authorizer.authorize(principal, "DESCRIBE_CONFIGS"):
            return _denied("DESCRIBE_CONFIGS")
        return AdminResult(Errors.NONE, None, self.store.names())
