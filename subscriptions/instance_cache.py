"""The client-instance cache: LRU by capacity plus per-instance expiry (docs/rules.md TEL-12).

- LRU: every lookup and insert refreshes recency; inserting beyond ``capacity`` (Kafka: 16384)
  evicts the least recently used instance.
- Expiry: each Get, and each Push with a valid instance id, looks its instance up, which re-arms a
  deadline of ``instance_expiry_ms(push_interval_ms)`` (``max(60 s, 3 x interval)``); an instance
  past its deadline is gone (``is_expired``): lookups treat it as absent and ``expire(now)`` sweeps
  it. Instances are grouped by expiry length, and within a group re-arming keeps deadline order, so
  a sweep touches only what has expired (as long as the clock does not go backwards).
- Keys are the ids' 128-bit ints: ``uuid.UUID`` hashes in Python code, an int in C.
- Pressure: a live instance evicted for room is logged as a warning, at most every 5 minutes.
- Connections: instances created on a connection (the Kafka wire listener, PD-8) are removed when it
  closes.

The cache does no locking: the manager serialises access.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from typing import Final
from uuid import UUID

from subscriptions.instance import ClientInstance

__all__ = [
    "DEFAULT_CACHE_MAX_SIZE",
    "DEFAULT_EXPIRY_BASE_MS",
    "ClientInstanceCache",
    "instance_expiry_ms",
    "is_expired",
]

log = logging.getLogger(__name__)

DEFAULT_CACHE_MAX_SIZE: Final = 16384
PRESSURE_WARNING_INTERVAL_MS: Final = 300_000
"""At most one cache-pressure warning this often (Kafka's: every 5 minutes)."""
DEFAULT_EXPIRY_BASE_MS: Final = 60_000


def instance_expiry_ms(push_interval_ms: int, base_ms: int = DEFAULT_EXPIRY_BASE_MS) -> int:
    """How long an instance lives after its last request: ``max(base, 3 x push interval)``."""
    return max(base_ms, 3 * push_interval_ms)


def is_expired(deadline_ms: int, now_ms: int) -> bool:
    """The expiry timer has fired once ``now`` reaches the deadline."""
    return now_ms >= deadline_ms


class ClientInstanceCache:
    """Instances by id, LRU-bounded, with expiry deadlines and a connection index."""

    def __init__(self, capacity: int = DEFAULT_CACHE_MAX_SIZE) -> None:
        if capacity < 1:
            raise ValueError("the instance cache needs a capacity of at least 1")
        self.capacity = capacity
        self._lru: OrderedDict[int, ClientInstance] = OrderedDict()
        self._by_expiry: dict[int, OrderedDict[int, None]] = {}
        self._by_connection: dict[str, set[int]] = {}
        self.evictions = 0
        self._last_pressure_warning_ms: int | None = None
        self.expirations = 0
        self.disconnect_removals = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, client_instance_id: object) -> bool:
        return isinstance(client_instance_id, UUID) and client_instance_id.int in self._lru

    def __iter__(self) -> Iterator[ClientInstance]:
        """Instances from least to most recently used (including any not yet swept)."""
        return iter(list(self._lru.values()))

    def peek(self, client_instance_id: UUID) -> ClientInstance | None:
        """The instance without refreshing recency or checking expiry."""
        return self._lru.get(client_instance_id.int)

    def lookup(self, client_instance_id: UUID, now_ms: int) -> ClientInstance | None:
        """The live instance, with recency refreshed and expiry re-armed; None when absent or
        expired (an expired one is removed)."""
        key = client_instance_id.int
        instance = self._lru.get(key)
        if instance is None:
            return None
        if is_expired(instance.deadline_ms, now_ms):
            self._discard(instance)
            self.expirations += 1
            return None
        self._lru.move_to_end(key)
        instance.deadline_ms = now_ms + instance.expiry_ms
        self._by_expiry[instance.expiry_ms].move_to_end(key)
        return instance

    def put(self, instance: ClientInstance, now_ms: int) -> None:
        """Insert or replace ``instance``, arm its deadline, and evict beyond capacity."""
        key = instance.key
        previous = self._lru.get(key)
        if previous is not None:
            self._discard(previous)
        self._lru[key] = instance
        self._by_expiry.setdefault(instance.expiry_ms, OrderedDict())[key] = None
        connection_id = instance.connection_id
        if connection_id is not None:
            self._by_connection.setdefault(connection_id, set()).add(key)
        instance.deadline_ms = now_ms + instance.expiry_ms
        if len(self._lru) > self.capacity:
            self.expire(now_ms)  # an expired instance goes before a live one is evicted
        while len(self._lru) > self.capacity:
            _, oldest = self._lru.popitem(last=False)
            self._unindex(oldest)
            self.evictions += 1
            self._warn_of_pressure(now_ms)

    def _warn_of_pressure(self, now_ms: int) -> None:
        """A live instance was evicted for room: say so, at most every ``PRESSURE_WARNING_INTERVAL_MS``
        (Kafka's client-metrics cache warns the same way; AUD-I22)."""
        last = self._last_pressure_warning_ms
        if last is not None and now_ms - last < PRESSURE_WARNING_INTERVAL_MS:
            return
        self._last_pressure_warning_ms = now_ms
        log.warning(
            "The client instance cache is full (%d instances): live instances are evicted before they "
            "expire (%d so far); their next push is answered UNKNOWN_SUBSCRIPTION_ID and they re-Get. "
            "Raise client_metrics: {client.metrics.cache.max.size: ...} if this persists",
            self.capacity,
            self.evictions,
        )

    def remove(self, client_instance_id: UUID) -> bool:
        instance = self._lru.get(client_instance_id.int)
        if instance is None:
            return False
        self._discard(instance)
        return True

    def remove_connection(self, connection_id: str) -> int:
        """Remove every instance created on ``connection_id``; return how many."""
        keys = self._by_connection.pop(connection_id, set())
        removed = 0
        for key in keys:
            instance = self._lru.get(key)
            if instance is not None:
                self._discard(instance)
                removed += 1
        self.disconnect_removals += removed
        return removed

    def expire(self, now_ms: int) -> int:
        """Remove every instance whose deadline has passed; return how many."""
        removed = 0
        for expiry_ms, group in list(self._by_expiry.items()):
            while group:
                instance = self._lru[next(iter(group))]
                if not is_expired(instance.deadline_ms, now_ms):
                    break
                self._discard(instance)
                removed += 1
            if not group:
                del self._by_expiry[expiry_ms]
        self.expirations += removed
        return removed

    def _discard(self, instance: ClientInstance) -> None:
        del self._lru[instance.key]
        self._unindex(instance)

    def _unindex(self, instance: ClientInstance) -> None:
        key = instance.key
        group = self._by_expiry.get(instance.expiry_ms)
        if group is not None:
            group.pop(key, None)
        connection_id = instance.connection_id
        if connection_id is not None:
            keys = self._by_connection.get(connection_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_connection[connection_id]
