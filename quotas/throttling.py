"""Throttling mechanics (docs/rules.md QUO-14): throttled channels, one delay queue and one reaper per quota
type, and the start/end callbacks a transport uses to mute and unmute a client.

A positive throttle puts the channel in the quota type's delay queue until ``now + throttle``; the
response goes out at once carrying the throttle time, and the transport stops reading the client
until ``end_throttling``. Each throttle calls ``start_throttling`` once and ``end_throttling`` exactly
once (at expiry, or when the queue closes). Several quotas on one request combine by taking the
largest throttle time (``combine_throttle_ms``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from typing import Protocol

from quotas.clock import Clock
from quotas.sensor import MetricName, Metrics
from quotas.stats import Gauge

__all__ = ["ThrottleCallback", "ThrottleQueue", "ThrottledChannel", "combine_throttle_ms"]

log = logging.getLogger(__name__)


def combine_throttle_ms(*throttles_ms: int) -> int:
    """Several quotas on one request: the client waits for the largest throttle."""
    return max(0, *throttles_ms)


class ThrottleCallback(Protocol):
    def start_throttling(self) -> None:
        """Mute: stop reading this client's requests."""
        ...

    def end_throttling(self) -> None:
        """Unmute."""
        ...


class ThrottledChannel:
    """One throttle of one client: starts throttling when made, ends it exactly once."""

    __slots__ = ("_done", "callback", "end_ms", "throttle_ms")

    def __init__(self, callback: ThrottleCallback, throttle_ms: int, now_ms: int) -> None:
        self.callback = callback
        self.throttle_ms = throttle_ms
        self.end_ms = now_ms + throttle_ms
        self._done = False
        callback.start_throttling()

    @property
    def done(self) -> bool:
        return self._done

    def notify_throttling_done(self) -> None:
        if not self._done:
            self._done = True
            try:
                self.callback.end_throttling()
            except Exception:  # one broken channel must not keep the others muted
                log.exception("end_throttling failed")


class ThrottleQueue:
    """The delay queue of one quota type, with its reaper (``run``) and a ``queue-size`` metric."""

    def __init__(self, quota_type_name: str, metrics: Metrics, now_ms: int) -> None:
        self.quota_type_name = quota_type_name
        self._heap: list[tuple[int, int, ThrottledChannel]] = []
        self._sequence = itertools.count()
        self._wakeup = asyncio.Event()
        self._closed = False
        sensor, created = metrics.sensor(f"{quota_type_name}-delayQueue", now_ms)
        if created:
            sensor.add(MetricName.of("queue-size", quota_type_name), Gauge(lambda: len(self._heap)))
        self._sensor = sensor

    def __len__(self) -> int:
        return len(self._heap)

    def throttle(self, callback: ThrottleCallback, throttle_ms: int, now_ms: int) -> ThrottledChannel | None:
        """Mute ``callback``'s client for ``throttle_ms`` (nothing for a throttle of 0 or less)."""
        if throttle_ms <= 0:
            return None
        channel = ThrottledChannel(callback, throttle_ms, now_ms)
        if self._closed:
            channel.notify_throttling_done()
            return channel
        heapq.heappush(self._heap, (channel.end_ms, next(self._sequence), channel))
        self._wakeup.set()
        return channel

    def next_deadline_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def reap(self, now_ms: int) -> int:
        """End every throttle whose time is up; return how many ended."""
        ended = 0
        while self._heap and self._heap[0][0] <= now_ms:
            _, _, channel = heapq.heappop(self._heap)
            channel.notify_throttling_done()
            ended += 1
        return ended

    async def run(self, clock: Clock) -> None:
        """The reaper: sleep until the earliest throttle ends, end it, repeat until closed."""
        while not self._closed:
            deadline = self.next_deadline_ms()
            now = clock.now_ms()
            if deadline is not None and deadline <= now:
                self.reap(now)
                continue
            self._wakeup.clear()
            await clock.wait(self._wakeup, None if deadline is None else deadline - now)

    def close(self) -> None:
        """Stop the reaper and unmute everyone still throttled."""
        self._closed = True
        while self._heap:
            heapq.heappop(self._heap)[2].notify_throttling_done()
        self._wakeup.set()
