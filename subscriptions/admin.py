"""The admin surface of subscriptions: alter, describe and list ``client-metrics`` resources (TEL-23).

Altering needs ALTER_CONFIGS on the cluster, describing and listing need DESCRIBE_CONFIGS; without
them the answer is CLUSTER_AUTHORIZATION_FAILED (31). Who may do what is decided by a small
``ClusterAuthorizer`` plugin; the default allows everyone. Results carry a Kafka error code and
message instead of raising, so every transport can answer with them as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from subscriptions.errors import (
    ClusterAuthorizationError,
    Errors,
    InvalidConfigError,
    SubscriptionError,
)
from subscriptions.model import PropertyValue
from subscriptions.store import SubscriptionStore

__all__ = [
    "AdminResult",
    "AllowAllAuthorizer",
    "ClientMetricsAdmin",
    "ClusterAuthorizer",
    "ConfigOp",
    "apply_config_ops",
]

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


class ConfigOp(IntEnum):
    """IncrementalAlterConfigs' operations, with Kafka's ids (``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_config_ops(
    current: Mapping[str, PropertyValue], ops: Sequence[tuple[str, ConfigOp, PropertyValue | None]]
) -> dict[str, PropertyValue]:
    """A client-metrics resource's properties after IncrementalAlterConfigs' ``(key, op, value)`` in
    order, as a Kafka 4.4 broker applies them: SET replaces, DELETE removes, and APPEND and SUBTRACT
    are refused on every key, INVALID_CONFIG "Can't APPEND to key metrics because its type is not
    LIST.": Kafka's controller splits only BROKER and TOPIC list keys, and a CLIENT_METRICS key is
    neither (docs/findings.md KF3-C-7, compared with a real broker). Values are validated afterwards,
    with the rest."""
    properties: dict[str, PropertyValue] = dict(current)
    for key, op, value in ops:
        if op is ConfigOp.SET:
            properties[key] = "" if value is None else value
        elif op is ConfigOp.DELETE:
            properties.pop(key, None)
        else:
            raise InvalidConfigError(f"Can't {op.name} to key {key} because its type is not LIST.")
    return properties


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
