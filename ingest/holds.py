"""Holds: muting for requests that have no connection to mute (QUO-14 on the OTLP receivers).

A broker mutes a throttled client's channel until its throttle ends. An OTLP push over HTTP or unary
gRPC has no channel the sink could stop reading, so a throttled client is *held* instead: until the
throttle ends, every request it sends is refused with the time left (gRPC RESOURCE_EXHAUSTED with
RetryInfo, HTTP 429 with Retry-After) and is not recorded against its quota. The throttle itself goes
through the quota manager like any other (``throttle-time`` sensor, delay queue), whose reaper ends the
hold; a lookup after the deadline ends it too, so holds never outlive their throttle.
"""

from __future__ import annotations

from ingest.quotas import ClientQuotaManager

__all__ = ["ClientHolds"]

_Key = tuple[str, str]


class ClientHolds:
    """The clients held now, by (principal, client id), with the instant each hold ends."""

    def __init__(self) -> None:
        self._until: dict[_Key, int] = {}

    def __len__(self) -> int:
        return len(self._until)

    def remaining_ms(self, principal: str, client_id: str, now_ms: int) -> int:
        """How long this client is still held (0: not held)."""
        key = (principal, client_id)
        until = self._until.get(key)
        if until is None:
            return 0
        if until <= now_ms:
            del self._until[key]
            return 0
        return until - now_ms

    def hold(
        self, manager: ClientQuotaManager, principal: str, client_id: str, throttle_ms: int, now_ms: int
    ) -> None:
        """Hold the client for ``throttle_ms`` (nothing for 0), recording the throttle in ``manager``."""
        if throttle_ms <= 0:
            return
        key = (principal, client_id)
        until = max(now_ms + throttle_ms, self._until.get(key, 0))
        self._until[key] = until
        manager.throttle(principal, client_id, throttle_ms, _Release(self, key, until), now_ms)

    def release(self, key: _Key, until: int) -> None:
        """End the hold that was to end at ``until`` (a later hold of the same client stays)."""
        if self._until.get(key) == until:
            del self._until[key]


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
