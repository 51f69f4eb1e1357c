"""Which principal an OTLP client instance id belongs to (F8).

An OTLP push names its client instance itself (``identity.otlp_instance_id``: a header or a resource
attribute), so without a rule anyone could land data under another client's instance. The rule: an
instance id belongs to the principal that first used it, by a KIP-714 GetTelemetrySubscriptions that
created it (the instance in ``ClientMetricsManager``'s cache, which wins) or by the first OTLP push
naming it; an OTLP push naming it as any other principal is refused (CLUSTER_AUTHORIZATION_FAILED:
gRPC PERMISSION_DENIED, HTTP 403) with ``subscriptions.errors.InstanceOwnershipError``, whose message
does not name the owner.

The bookkeeping is bounded as the client-instance cache is: at most ``max_entries`` (the cache's
``client.metrics.max.cache.size``, 16,384 by default) ids, the least recently used forgotten first,
in one dict of ints to (interned) principal strings, which the garbage collector sees as one object.
Clients sharing a principal (every anonymous client is ``User:ANONYMOUS``) cannot be told apart, so
the rule protects the instances of authenticated clients (``security.require_authentication``).
"""

from __future__ import annotations

import sys
from uuid import UUID

from subscriptions import ClientMetricsManager

__all__ = ["InstanceOwners"]


class InstanceOwners:
    """The owner of each recently used OTLP client instance id."""

    __slots__ = ("_manager", "_max_entries", "_owners")

    def __init__(self, manager: ClientMetricsManager, max_entries: int) -> None:
        self._manager = manager
        self._max_entries = max_entries
        self._owners: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._owners)

    def claim(self, instance_id: UUID, principal: str) -> bool:
        """True if ``principal`` may push as ``instance_id`` (binding the id to it when it was free);
        False if the id belongs to another principal."""
        instance = self._manager.instance(instance_id)
        if instance is not None and instance.context.principal != principal:
            return False
        owners, key = self._owners, instance_id.int
        owner = owners.pop(key, None)
        if owner is not None and owner != principal:
            owners[key] = owner  # still the most recently used: it was just asked for
            return False
        if owner is None and len(owners) >= self._max_entries:
            del owners[next(iter(owners))]  # the least recently used
        owners[key] = owner or sys.intern(principal)
        return True
