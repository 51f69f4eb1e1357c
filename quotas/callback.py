"""The quota callback (KIP-257; docs/rules.md QUO-3..QUO-5, QUO-13): which clients share a quota, and what
their limit is.

``ClientQuotaCallback`` is the plug-in protocol, loaded by dotted path from
``client.quota.callback.class`` (``load_quota_callback``); one that is also a
``ReconfigurableQuotaCallback`` has its own configs changed at run time. ``DefaultQuotaCallback``
implements Kafka's built-in behaviour: the 8-level (user, client-id) precedence with ``<default>``
entries, with an O(1) fast path while only one kind of entity has quotas.
``ReplicaShareQuotaCallback`` shows why the hook exists: quotas are configured cluster-wide and each
sink replica enforces its share.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

from quotas.entities import (
    CLIENT,
    CLIENT_ID_TAG,
    DEFAULT,
    USER,
    USER_CLIENT,
    USER_TAG,
    ClientQuotaEntity,
    ClusterMetadata,
    QuotaType,
    principal_user,
)
from quotas.errors import INVALID_CONFIG, QuotaError

__all__ = [
    "ClientQuotaCallback",
    "DefaultQuotaCallback",
    "QuotaCallbackError",
    "ReconfigurableQuotaCallback",
    "ReplicaShareQuotaCallback",
    "load_quota_callback",
]


@runtime_checkable
class ClientQuotaCallback(Protocol):
    """KIP-257's ``ClientQuotaCallback``."""

    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> Mapping[str, str]:
        """Tags of the sensor this client records into: clients with equal tags share a quota."""
        ...

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        """The limit for a sensor's tags, or None for no limit."""
        ...

    def update_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity, new_value: float) -> None: ...

    def remove_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity) -> None: ...

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        """Polled on every request; True makes the manager re-read every sensor's limit."""
        ...

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        """Told when the cluster changes; True if limits may have changed."""
        ...

    def close(self) -> None: ...


class DefaultQuotaCallback:
    """Kafka's built-in quotas: the most specific configured (user, client-id) level wins (QUO-4/5)."""

    def __init__(self) -> None:
        self._quotas: dict[QuotaType, dict[ClientQuotaEntity, float]] = {qt: {} for qt in QuotaType}
        self._enabled: dict[QuotaType, int] = dict.fromkeys(QuotaType, 0)
        self._active: dict[QuotaType, dict[int, int]] = {qt: {} for qt in QuotaType}
        """QUO-3: how many entities of each level (mask bit) have a quota, as Kafka 4.4's
        ``activeQuotaEntities``."""

    def quota_types_enabled(self, quota_type: QuotaType) -> int:
        """The QUO-3 mask: the levels with at least one configured entity now."""
        return self._enabled[quota_type]

    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> dict[str, str]:
        user, client = self.metric_tags(quota_type, principal_user(principal), client_id)
        return {USER_TAG: user, CLIENT_ID_TAG: client}

    def metric_tags(self, quota_type: QuotaType, user: str, client_id: str) -> tuple[str, str]:
        """QUO-4 for a sanitized user: ``(user tag, client-id tag)``."""
        mask = self._enabled[quota_type]
        if mask in (0, CLIENT):
            return "", client_id
        if mask == USER:
            return user, ""
        if mask == USER_CLIENT:
            return user, client_id
        quotas = self._quotas[quota_type]
        E = ClientQuotaEntity  # noqa: N806
        for entity, tags in (
            (E(user, client_id), (user, client_id)),
            (E(user, DEFAULT), (user, client_id)),
            (E(user, None), (user, "")),
            (E(DEFAULT, client_id), (user, client_id)),
            (E(DEFAULT, DEFAULT), (user, client_id)),
            (E(DEFAULT, None), (user, "")),
            (E(None, client_id), ("", client_id)),
            (E(None, DEFAULT), ("", client_id)),
        ):
            if entity in quotas:
                return tags
        return "", client_id

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        return self.limit(quota_type, metric_tags.get(USER_TAG, ""), metric_tags.get(CLIENT_ID_TAG, ""))

    def limit(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        """QUO-5: the first configured entity for these tags, most specific first."""
        quotas = self._quotas[quota_type]
        E = ClientQuotaEntity  # noqa: N806
        candidates: tuple[ClientQuotaEntity, ...]
        if user and client_id:
            candidates = (E(user, client_id), E(user, DEFAULT), E(DEFAULT, client_id), E(DEFAULT, DEFAULT))
        elif user:
            candidates = (E(user, None), E(DEFAULT, None))
        elif client_id:
            candidates = (E(None, client_id), E(None, DEFAULT))
        else:
            return None
        for entity in candidates:
            value = quotas.get(entity)
            if value is not None:
                return value
        return None

    def update_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        quotas = self._quotas[quota_type]
        if entity not in quotas:  # a newly configured entity: counted, its level enabled (QUO-3)
            active = self._active[quota_type]
            active[entity.mask_bit] = active.get(entity.mask_bit, 0) + 1
            self._enabled[quota_type] |= entity.mask_bit
        quotas[entity] = new_value

    def remove_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity) -> None:
        if self._quotas[quota_type].pop(entity, None) is None:
            return  # not configured: nothing changes (QUO-3)
        active = self._active[quota_type]
        active[entity.mask_bit] -= 1
        if not active[entity.mask_bit]:  # the level's last entity: its bit is cleared
            del active[entity.mask_bit]
            self._enabled[quota_type] &= ~entity.mask_bit

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        return False

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        return False

    def close(self) -> None:
        return None


class ReplicaShareQuotaCallback(DefaultQuotaCallback):
    """Quotas are configured for the whole fleet; each of N sink replicas enforces 1/N of them.

    Clients spread over the replicas (the Service balances them), so a client that stays within its
    share on every replica stays within the configured quota overall. The replica count arrives
    through ``update_cluster_metadata`` (the front end feeds it the replicas it discovers); a change
    makes every manager re-read its limits.
    """

    def __init__(self) -> None:
        super().__init__()
        self.replicas = 1

    def limit(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        value = super().limit(quota_type, user, client_id)
        return None if value is None else value / self.replicas

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        replicas = max(1, len(cluster.nodes))
        changed = replicas != self.replicas
        self.replicas = replicas
        return changed


@runtime_checkable
class ReconfigurableQuotaCallback(Protocol):
    """Kafka's ``Reconfigurable``, for a quota callback: its own configs change at run time, as dynamic
    broker configs (KF3-K4; Kafka's ``DynamicClientQuotaCallback``). ``reconfigurable_configs`` names
    them; ``validate_reconfiguration`` sees the configs a change would give (what ``configure`` got,
    with the dynamic values over it) and raises ``ValueError`` (Kafka's ``ConfigException``) to refuse
    it; ``reconfigure`` gets them once the change is in force on this replica. A callback whose limits
    change with its configs says so from ``quota_reset_required``, as in Kafka."""

    def reconfigurable_configs(self) -> AbstractSet[str]: ...

    def validate_reconfiguration(self, configs: Mapping[str, object]) -> None: ...

    def reconfigure(self, configs: Mapping[str, object]) -> None: ...


class QuotaCallbackError(QuotaError, ValueError):
    """INVALID_CONFIG (40): ``client.quota.callback.class`` does not name a usable callback class."""

    error_code = INVALID_CONFIG


def load_quota_callback(class_path: str, configs: Mapping[str, object] | None = None) -> ClientQuotaCallback:
    """Instantiate the callback class named ``package.module.Class`` (or ``package.module:Class``),
    then call its ``configure(configs)`` if it has one (Kafka's ``Configurable``)."""
    module_name, sep, attr = class_path.partition(":")
    if not sep:
        module_name, _, attr = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise QuotaCallbackError(f"client.quota.callback.class: cannot load {class_path!r}: {exc}") from exc
    if not isinstance(cls, type):
        raise QuotaCallbackError(f"client.quota.callback.class: {class_path!r} is not a class")
    callback = cls()
    if not isinstance(callback, ClientQuotaCallback):
        raise QuotaCallbackError(f"client.quota.callback.class: {class_path!r} is not a ClientQuotaCallback")
    configure = getattr(callback, "configure", None)
    if callable(configure):
        configure(dict(configs or {}))
    return callback
