"""Holds: muting for requests that have no connection to mute (QUO-14 over HTTP and gRPC).

A broker mutes a throttled client's channel until its throttle ends: the response carrying the
throttle goes out at once, and the client's next request is not read until then. A request over HTTP
or unary gRPC has no channel the sink could stop reading, so the throttle is *held* instead: from the
response that carried a quota throttle (byte rate or request time) until the throttle ends.

A hold is as wide as the quota it enforces: it is keyed by the quota sensor that was violated, named as
Kafka names it from the quota's metric tags (``ClientQuotaManager.sensor_name``: ``Produce-alice:`` for
a ``<user>`` quota on ``User:alice``, ``Produce-:app-1`` for a ``<client-id>`` one), not by who sent
the request. Every client that records into a held sensor is held, whatever client id it sends, and no
other: a ``<default>`` quota is still one sensor per user or per client id (never one for everyone),
and a client no quota applies to records into a sensor without a bound, which is never held. A request
records into two sensors, its produce byte rate and its request time (``managers``), so it is held
while either is (a KIP-714 Get too, as a muted channel holds every API). A request that earned both
throttles holds both sensors, each for its own throttle; the larger one is the throttle recorded in
the ``throttle-time`` sensor (QUO-9), the other is only held.

Each hold goes through its quota manager's delay queue like any throttle, whose reaper (or ``close`` at
shutdown) ends it; a lookup after the deadline ends it too, so holds never outlive their throttle.
What a held request gets depends on the RPC (``pipeline``):

- KIP-714 Get/Push: ``wait`` delays it until the hold ends, then it is handled as usual (Kafka's mute:
  the request waits, nothing is lost). It is answered THROTTLING_QUOTA_EXCEEDED with the time left,
  unrecorded, instead when the hold has longer than ``server.max_hold_delay_ms`` to run (also once it
  has waited and the hold grew past that), or when another request of the same (principal, client id)
  is already waiting (one waiting request per client, as a muted channel holds one; every waiting
  request also keeps its admission slot).
- OTLP/HTTP: muted before its body is read (``wait``, as a KIP-714 request, for at most
  ``server.max_otlp_hold_delay_ms``: 5 s by default, half the OpenTelemetry SDKs' default export
  timeout, so that the answer comes before the exporter gives up), then handled as usual; a request
  that may not wait is refused at once with the time left (429 + Retry-After). One whose client gave
  up meanwhile does not land: its body, read only after the wait, went with its connection.
- OTLP gRPC: refused at once with the time left (``remaining_ms``; RESOURCE_EXHAUSTED + RetryInfo),
  which OTLP clients honour by sending the same batch again later (the request was already read).

Throttles that are not quotas (a too-early Get/Push, PD-7; an overload answer, ``admission``) are
advice in the response and hold nobody. The Kafka wire listener mutes the connection instead, as a
broker does, and takes no hold.

The sensors held at once are bounded: under a ``<default client-id>`` quota each client id sent is a
sensor of its own, so at most ``max_held_clients`` (``limits.max_held_clients``) are held. A throttle
of a sensor beyond that is not held (nor queued): its answer still carries the throttle, and
``refused`` counts it (``telemetry_sink_holds_refused_total``). The sensors already held stay held, so
a flood of new client ids throttles only itself; a client that rotates its client id under a quota
on its user records into the one held sensor and is held like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from ingest.limits import DEFAULT_LIMITS
from quotas import ClientQuotaManager, Clock

__all__ = ["DEFAULT_MAX_HOLD_DELAY_MS", "DEFAULT_MAX_OTLP_HOLD_DELAY_MS", "ClientHolds"]

DEFAULT_MAX_HOLD_DELAY_MS: Final = 10_000
"""``server.max_hold_delay_ms``: the longest a held KIP-714 request waits (a client's request timeout
is typically 30 s or more)."""

DEFAULT_MAX_OTLP_HOLD_DELAY_MS: Final = 5_000
"""``server.max_otlp_hold_delay_ms``: the longest a held OTLP/HTTP request waits (the OpenTelemetry
SDKs' export timeout is 10 s by default)."""

_Client = tuple[str, str]
"""(principal, client id): who sent a request."""


class _Hold:
    __slots__ = ("ended", "until")

    def __init__(self, until: int) -> None:
        self.until = until
        self.ended = asyncio.Event()


class ClientHolds:
    """The quota sensors held now, by sensor name, with the instant each hold ends: at most
    ``max_held_clients``. ``managers`` are the quota managers whose sensors every request records
    into (the produce byte rate and the request time)."""

    def __init__(
        self, managers: Sequence[ClientQuotaManager], max_held_clients: int = DEFAULT_LIMITS.max_held_clients
    ) -> None:
        self.managers = tuple(managers)
        self.max_held_clients = max_held_clients
        self.refused = 0
        """Throttles of sensors not held because ``max_held_clients`` were."""
        self._holds: dict[str, _Hold] = {}
        self._waiting: set[_Client] = set()
        """Clients with a request waiting (at most the requests admitted at once)."""

    def __len__(self) -> int:
        return len(self._holds)

    def sensors(self, principal: str, client_id: str) -> list[str]:
        """The names of the sensors this client's requests record into, one per manager."""
        return [manager.sensor_name(principal, client_id) for manager in self.managers]

    def remaining_ms(self, principal: str, client_id: str, now_ms: int) -> int:
        """How long this client is still held: the longest hold on a sensor it records into (0: none)."""
        return self._longest(principal, client_id, now_ms)[0]

    async def wait(self, principal: str, client_id: str, clock: Clock, max_wait_ms: int) -> int:
        """Delay a held client's request until no sensor it records into is held: 0 once it may go
        ahead, or the time left when it may not wait (the hold ends more than ``max_wait_ms`` after the
        request came, or another request of the client is already waiting)."""
        now = clock.now_ms()
        left, hold = self._longest(principal, client_id, now)
        client = (principal, client_id)
        if hold is None:
            return 0
        if left > max_wait_ms or client in self._waiting:
            return left
        deadline = now + max_wait_ms
        self._waiting.add(client)
        try:
            while hold is not None:
                await clock.wait(hold.ended, left)
                now = clock.now_ms()
                left, hold = self._longest(principal, client_id, now)
                if now + left > deadline:  # held again meanwhile, for longer than the request may wait
                    return left
        finally:
            self._waiting.discard(client)
        return 0

    def hold(
        self,
        manager: ClientQuotaManager,
        principal: str,
        client_id: str,
        throttle_ms: int,
        now_ms: int,
        *,
        record_throttle: bool = True,
    ) -> None:
        """Hold this client's sensor of ``manager``, and so every client recording into it, for
        ``throttle_ms`` (nothing for 0); the throttle is recorded in the client's ``throttle-time``
        sensor if ``record_throttle``. A sensor not held yet is not when ``max_held_clients`` are
        (counted in ``refused``)."""
        if throttle_ms <= 0:
            return
        name = manager.sensor_name(principal, client_id)
        hold = self._holds.get(name)
        if hold is None:
            if len(self._holds) >= self.max_held_clients:
                self.refused += 1
                if record_throttle:  # told, not held
                    manager.record_throttle_time(principal, client_id, throttle_ms, now_ms)
                return
            hold = self._holds[name] = _Hold(now_ms + throttle_ms)
        hold.until = max(hold.until, now_ms + throttle_ms)
        release = _Release(self, name, hold.until)
        if record_throttle:
            manager.throttle(principal, client_id, throttle_ms, release, now_ms)
        else:
            manager.throttle_queue.throttle(release, throttle_ms, now_ms)

    def release(self, name: str, until: int) -> None:
        """End the hold that was to end at ``until`` (a later hold of the same sensor stays)."""
        hold = self._holds.get(name)
        if hold is not None and hold.until == until:
            self._end(name)

    def release_all(self) -> None:
        """End every hold now (shutdown: waiting requests are handled within the grace period)."""
        for name in list(self._holds):
            self._end(name)

    def _longest(self, principal: str, client_id: str, now_ms: int) -> tuple[int, _Hold | None]:
        """The longest hold on a sensor this client records into, and its time left ((0, None): none);
        holds found past their deadline end here."""
        if not self._holds:  # the usual case: no sensor to name
            return 0, None
        longest: tuple[int, _Hold | None] = (0, None)
        for name in self.sensors(principal, client_id):
            hold = self._holds.get(name)
            if hold is None:
                continue
            if hold.until <= now_ms:
                self._end(name)
            elif hold.until - now_ms > longest[0]:
                longest = (hold.until - now_ms, hold)
        return longest

    def _end(self, name: str) -> None:
        self._holds.pop(name).ended.set()


class _Release:
    """The throttle callback of one hold: nothing to mute at the start, the release at the end."""

    __slots__ = ("holds", "name", "until")

    def __init__(self, holds: ClientHolds, name: str, until: int) -> None:
        self.holds = holds
        self.name = name
        self.until = until

    def start_throttling(self) -> None:
        return None

    def end_throttling(self) -> None:
        self.holds.release(self.name, self.until)
