"""Holds: muting for requests that have no connection to mute (QUO-14 over HTTP and gRPC).

A broker mutes a throttled client's channel until its throttle ends: the response carrying the
throttle goes out at once, and the client's next request is not read until then. A request over HTTP
or unary gRPC has no channel the sink could stop reading, so a throttled client is *held* instead,
keyed by (principal, client id): from the response that carried a quota throttle (byte rate or request
time) until the throttle ends. The throttle itself goes through the quota manager like any other
(``throttle-time`` sensor, delay queue), whose reaper (or ``close`` at shutdown) ends the hold; a
lookup after the deadline ends it too, so holds never outlive their throttle. What a held client's
next request gets depends on the RPC (``pipeline``):

- KIP-714 Get/Push: ``wait`` delays it until the hold ends, then it is handled as usual (Kafka's mute:
  the request waits, nothing is lost). It is answered THROTTLING_QUOTA_EXCEEDED with the time left,
  unrecorded, instead when the hold has longer than ``server.max_hold_delay_ms`` to run, or when
  another request of the same client is already waiting (one waiting request per client, as a muted
  channel holds one).
- OTLP: refused at once with the time left (``remaining_ms``; RESOURCE_EXHAUSTED + RetryInfo, 429 +
  Retry-After), which OTLP clients honour by sending the same batch again later.

Throttles that are not quotas (a too-early Get/Push, PD-7; an overload answer, ``admission``) are
advice in the response and hold nobody.

The clients held at once are bounded: keys are what clients send, so at most ``max_held_clients``
(``limits.max_held_clients``) are held. A throttled client beyond that is not held (nor its throttle
queued): its answer still carries the throttle, and ``refused`` counts it
(``telemetry_sink_holds_refused_total``). The clients already held stay held, so a flood of new
client ids throttles only itself.
"""

from __future__ import annotations

import asyncio
from typing import Final

from ingest.limits import DEFAULT_LIMITS
from quotas import ClientQuotaManager, Clock

__all__ = ["DEFAULT_MAX_HOLD_DELAY_MS", "ClientHolds"]

DEFAULT_MAX_HOLD_DELAY_MS: Final = 10_000
"""``server.max_hold_delay_ms``: the longest a held KIP-714 request waits (a client's request timeout
is typically 30 s or more)."""

_Key = tuple[str, str]


class _Hold:
    __slots__ = ("ended", "until", "waiting")

    def __init__(self, until: int) -> None:
        self.until = until
        self.ended = asyncio.Event()
        self.waiting = False


class ClientHolds:
    """The clients held now, by (principal, client id), with the instant each hold ends: at most
    ``max_held_clients``."""

    def __init__(self, max_held_clients: int = DEFAULT_LIMITS.max_held_clients) -> None:
        self.max_held_clients = max_held_clients
        self.refused = 0
        """Throttled clients not held because ``max_held_clients`` were."""
        self._holds: dict[_Key, _Hold] = {}

    def __len__(self) -> int:
        return len(self._holds)

    def remaining_ms(self, principal: str, client_id: str, now_ms: int) -> int:
        """How long this client is still held (0: not held)."""
        key = (principal, client_id)
        hold = self._holds.get(key)
        if hold is None:
            return 0
        if hold.until <= now_ms:
            self._end(key)
            return 0
        return hold.until - now_ms

    async def wait(self, principal: str, client_id: str, clock: Clock, max_wait_ms: int) -> int:
        """Delay a held client's request until its hold ends: 0 once it may go ahead, or the time left
        when it may not wait (more than ``max_wait_ms`` to go, or another request already waiting)."""
        left = self.remaining_ms(principal, client_id, clock.now_ms())
        hold = self._holds.get((principal, client_id))
        if hold is None:
            return 0
        if left > max_wait_ms or hold.waiting:
            return left
        hold.waiting = True
        try:
            while left:
                await clock.wait(hold.ended, left)
                left = self.remaining_ms(principal, client_id, clock.now_ms())
        finally:
            hold.waiting = False
        return 0

    def hold(
        self, manager: ClientQuotaManager, principal: str, client_id: str, throttle_ms: int, now_ms: int
    ) -> None:
        """Hold the client for ``throttle_ms`` (nothing for 0), recording the throttle in ``manager``;
        a client not held yet is not when ``max_held_clients`` are (counted in ``refused``)."""
        if throttle_ms <= 0:
            return
        key = (principal, client_id)
        hold = self._holds.get(key)
        if hold is None:
            if len(self._holds) >= self.max_held_clients:
                self.refused += 1
                manager.record_throttle_time(principal, client_id, throttle_ms, now_ms)  # told, not held
                return
            hold = self._holds[key] = _Hold(now_ms + throttle_ms)
        hold.until = max(hold.until, now_ms + throttle_ms)
        manager.throttle(principal, client_id, throttle_ms, _Release(self, key, hold.until), now_ms)

    def release(self, key: _Key, until: int) -> None:
        """End the hold that was to end at ``until`` (a later hold of the same client stays)."""
        hold = self._holds.get(key)
        if hold is not None and hold.until == until:
            self._end(key)

    def release_all(self) -> None:
        """End every hold now (shutdown: waiting requests are handled within the grace period)."""
        for key in list(self._holds):
            self._end(key)

    def _end(self, key: _Key) -> None:
        self._holds.pop(key).ended.set()


class _Release:
    """The throttle callback of one hold: nothing to mute at the start, the release at the end."""

    __slots__ = ("holds", "key", "until")

    def __init__(self, holds: ClientHolds, key: _Key, until: int) -> None:
        self.holds = holds
        self.key = key
        self.until = until

    def start_throttling(self) -> None:
        return None

    def end_throttling(self) -> None:
        self.holds.release(self.key, self.until)
