"""Which principal an OTLP client instance id belongs to (F8), kept per principal (T3-6).

An OTLP push names its client instance itself (``identity.otlp_instance_id``: a header or a resource
attribute), so without a rule anyone could land data under another client's instance. The rule: an
instance id belongs to the principal that first used it, by a KIP-714 GetTelemetrySubscriptions that
created it (the instance in ``ClientMetricsManager``'s cache, which wins) or by the first OTLP push
naming it; an OTLP push naming it as any other principal is refused (CLUSTER_AUTHORIZATION_FAILED:
gRPC PERMISSION_DENIED, HTTP 403) with ``subscriptions.errors.InstanceOwnershipError``, whose message
does not name the owner.

The bookkeeping is bounded, and no principal's traffic can evict another principal's binding (a
shared least-recently-used table let one export naming 16,384 new ids forget every other owner: T3-6):

- **Per principal.** Each principal binds at most ``max_ids_per_principal`` ids (the client-instance
  cache's ``client.metrics.max.cache.size``, 16,384 by default: what one principal could hold when
  the table was shared). A new id beyond that forgets the least recently used id *of the same
  principal*. So a principal that names ever more ids (``User:ANONYMOUS`` is one principal, however
  many senders share it) only churns its own.
- **In all.** The table holds at most ``max_ids`` ids (``limits.max_instance_owners``, 65,536). When
  it is full, a new id takes the place of the least recently used binding, whoever owns it, only if
  that binding is idle (``binding_is_idle``: unused for ``BINDING_IDLE_MS``, 15 minutes, Kafka's
  instance expiry at its default push interval); otherwise the new id is let through *unbound*: the
  push lands, the id is not remembered (``unbound`` counts these, a warning is logged at most every
  5 minutes), and its next push tries again. A binding in use is never given up for anyone else.

What that leaves an attacker: keeping *new* ids from being bound takes a table full of bindings in
use, so at least ``max_ids / max_ids_per_principal`` (4) principals naming fresh ids and re-using each
within 15 minutes: principals are credentials (bearer tokens, certificates, SASL users), which the
operator issues. Existing bindings stay their owners' even then. A principal's id that it stopped
using can be taken over once the table is full and the binding idle, as a Kafka broker forgets an
expired client instance. Clients sharing a principal cannot be told apart, so the rule protects the
instances of authenticated clients (``security.require_authentication``).

Memory: two dicts of ints (the ids' 128-bit ints to interned principal strings, in least recently used
order; per principal, its ids to their last use in ms), at most ``max_ids`` entries each: about 7 MB
at the defaults, full. They hold only atoms, so the garbage collector does not walk them.
"""

from __future__ import annotations

import logging
import sys
from typing import Final
from uuid import UUID

from subscriptions import ClientMetricsManager

__all__ = ["BINDING_IDLE_MS", "InstanceOwners", "binding_is_idle"]

log = logging.getLogger(__name__)

BINDING_IDLE_MS: Final = 15 * 60_000
"""A binding unused this long may give way to another principal's new id once the table is full: 3 x
300 s, Kafka's client-instance expiry (``max(60 s, 3 x interval)``) at its default push interval."""
UNBOUND_WARNING_INTERVAL_MS: Final = 300_000


def binding_is_idle(last_used_ms: int, now_ms: int, idle_ms: int = BINDING_IDLE_MS) -> bool:
    """A binding last used at ``last_used_ms`` is idle at ``now_ms`` once ``idle_ms`` have passed."""
    return now_ms - last_used_ms >= idle_ms


class InstanceOwners:
    """The owner of each recently used OTLP client instance id, bounded per principal and in all."""

    __slots__ = (
        "_by_principal",
        "_idle_ms",
        "_last_warning_ms",
        "_manager",
        "_max_ids",
        "_max_ids_per_principal",
        "_owners",
        "unbound",
    )

    def __init__(
        self,
        manager: ClientMetricsManager,
        max_ids_per_principal: int,
        max_ids: int,
        idle_ms: int = BINDING_IDLE_MS,
    ) -> None:
        if max_ids_per_principal < 1 or max_ids < 1:
            raise ValueError("instance owners need room for at least one id")
        self._manager = manager
        self._max_ids_per_principal = min(max_ids_per_principal, max_ids)
        self._max_ids = max_ids
        self._idle_ms = idle_ms
        self._owners: dict[int, str] = {}
        """Every bound id's owner, the least recently used first."""
        self._by_principal: dict[str, dict[int, int]] = {}
        """Per principal, its ids (the least recently used first) and when each was last used (ms)."""
        self._last_warning_ms: int | None = None
        self.unbound = 0
        """Claims let through without a binding: the table was full of bindings in use."""

    def __len__(self) -> int:
        return len(self._owners)

    def owner_of(self, instance_id: UUID) -> str | None:
        """The principal ``instance_id`` is bound to, if any (its recency left as it is)."""
        return self._owners.get(instance_id.int)

    def held_by(self, principal: str) -> int:
        """How many ids ``principal`` owns."""
        return len(self._by_principal.get(principal, ()))

    def claim(self, instance_id: UUID, principal: str, now_ms: int) -> bool:
        """True if ``principal`` may push as ``instance_id`` at ``now_ms`` (binding the id to it when it
        was free, room allowing: see the module); False if the id belongs to another principal."""
        instance = self._manager.instance(instance_id)
        if instance is not None and instance.context.principal != principal:
            return False
        key = instance_id.int
        owner = self._owners.get(key)
        if owner is not None:
            if owner != principal:
                return False
            self._use(key, owner, now_ms)
            return True
        mine = self._by_principal.get(principal)
        if mine is not None and len(mine) >= self._max_ids_per_principal:
            self._forget(next(iter(mine)), principal)  # its own least recently used
        elif len(self._owners) >= self._max_ids and not self._forget_idle(now_ms):
            self._unbound(now_ms)
            return True
        owner = sys.intern(principal)
        self._owners[key] = owner
        self._by_principal.setdefault(owner, {})[key] = now_ms
        return True

    def _use(self, key: int, owner: str, now_ms: int) -> None:
        """The binding of ``key`` used again: the most recently used, in all and of its owner."""
        del self._owners[key]
        self._owners[key] = owner
        theirs = self._by_principal[owner]
        del theirs[key]
        theirs[key] = now_ms

    def _forget(self, key: int, owner: str) -> None:
        del self._owners[key]
        theirs = self._by_principal[owner]
        del theirs[key]
        if not theirs:
            del self._by_principal[owner]

    def _forget_idle(self, now_ms: int) -> bool:
        """Forget the least recently used binding if it is idle; whether there was room made."""
        key = next(iter(self._owners))
        owner = self._owners[key]
        if not binding_is_idle(self._by_principal[owner][key], now_ms, self._idle_ms):
            return False  # nor is any other: this one was used longest ago
        self._forget(key, owner)
        return True

    def _unbound(self, now_ms: int) -> None:
        self.unbound += 1
        last = self._last_warning_ms
        if last is None or now_ms - last >= UNBOUND_WARNING_INTERVAL_MS:
            self._last_warning_ms = now_ms
            log.warning(
                "the OTLP instance owners table is full of %d ids in use: new ids are not bound to their "
                "principal (%d so far); raise limits.max_instance_owners",
                len(self._owners),
                self.unbound,
            )
