"""The request bytes the listeners hold at once (F9): Kafka's ``queued.max.request.bytes``, and a bound
per client address.

A request's bytes are held from the moment its size is known until it has been answered: on the HTTP
port from its headers (its ``Content-Length``, or the body limit when the body is chunked), on the
Kafka port from its frame's size. The connection limits bound how many requests may arrive at once,
and the timeouts how long each may take, but not their sum: one address's 1,000 connections, each
sending a 2 MiB body slowly, held 2 GB. ``RequestMemory`` bounds the sum twice:

- ``max_bytes`` over every client, as Kafka's memory pool (``queued.max.request.bytes``) does;
- ``max_bytes_per_ip`` for each source address, so one client's stalled uploads use up only its own
  bound (a few addresses together can still fill the total, after which everyone waits or is refused).

A request is read while both bounds have room left, whatever its size (Kafka's pool, not strict,
does the same): a bound is passed by at most one request. One that comes when a bound is used up is
never read: an HTTP request is answered at once (503 with
``Retry-After``, which OTLP clients retry; ``ingest.transports.http_app``), a Kafka connection waits
unread, as a broker mutes a channel when its memory pool is empty, for at most its request read
timeout (``ingest.transports.kafka.listener``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DEFAULT_REQUEST_MEMORY", "RequestMemory", "RequestMemoryLimits"]


@dataclass(frozen=True, slots=True)
class RequestMemoryLimits:
    """``server.queued_max_request_bytes`` and ``server.max_request_bytes_per_ip``."""

    max_bytes: int = 512 * 1024 * 1024
    max_bytes_per_ip: int = 64 * 1024 * 1024


DEFAULT_REQUEST_MEMORY: Final = RequestMemoryLimits()
"""512 MiB in all (a quarter of the Helm chart's 2 GiB memory limit) and 64 MiB per address (eight
Kafka pushes of ``socket_request_max_bytes``, 30 HTTP bodies at their limit)."""


class RequestMemory(Collector):
    """The request bytes held, in all and per source address (see the module docstring). Callers take
    a request's size before reading it and give exactly that back once it is answered. As a Prometheus
    collector: ``telemetry_sink_request_memory_*`` (``ingest.push.metrics``)."""

    def __init__(self, limits: RequestMemoryLimits = DEFAULT_REQUEST_MEMORY) -> None:
        self.limits = limits
        self.held = 0
        self.refused = 0
        self._by_ip: dict[str, int] = {}
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}
        """Each waiting address's requests, first come first woken; a wait that ended (cancelled) is
        dropped when it reaches the front."""
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for memory (Kafka connections muted under memory pressure)."""
        return self._waiting

    def held_by(self, ip: str) -> int:
        return self._by_ip.get(ip, 0)

    def fits(self, ip: str) -> bool:
        """Whether a request from ``ip`` may be read now: while both bounds have room left, whatever
        its size, as Kafka's memory pool (not strict) allocates; so a bound is passed by at most one
        request, and a request larger than a bound is still read."""
        return self.held < self.limits.max_bytes and self.held_by(ip) < self.limits.max_bytes_per_ip

    def refusal(self, ip: str) -> str:
        """Why a request from ``ip`` does not fit."""
        limits = self.limits
        if self.held_by(ip) >= limits.max_bytes_per_ip:
            return (
                f"requests from {ip} hold {self.held_by(ip)} bytes "
                f"(server.max_request_bytes_per_ip is {limits.max_bytes_per_ip})"
            )
        return f"requests hold {self.held} bytes (server.queued_max_request_bytes is {limits.max_bytes})"

    def try_take(self, ip: str, size: int) -> bool:
        """Hold ``size`` bytes for a request from ``ip`` (True), or count a refusal (False)."""
        if not self.fits(ip):
            self.refused += 1
            return False
        self._hold(ip, size)
        return True

    async def take(self, ip: str, size: int) -> None:
        """Hold ``size`` bytes for ``ip``, waiting for other requests to give theirs back (the caller
        bounds the wait). Waits are woken one per address at a time, in order, so that a give-back
        costs the addresses waiting, never every waiting request."""
        first = True
        while not self.fits(ip):
            waiter = asyncio.get_running_loop().create_future()
            queue = self._queues.setdefault(ip, deque())
            if first:
                queue.append(waiter)
            else:
                queue.appendleft(waiter)  # woken but still no room: keep its turn
            first = False
            self._waiting += 1
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(ip)  # woken, then cancelled before its turn: the next one's turn
                raise
            finally:
                self._waiting -= 1
        self._hold(ip, size)
        self._wake(ip)  # room left for its address: the next one's turn

    def give_back(self, ip: str, size: int) -> None:
        """Give back what ``try_take`` or ``take`` held for a request from ``ip``; the first waiting
        request of each address with room looks again."""
        self.held -= size
        left = self.held_by(ip) - size
        if left > 0:
            self._by_ip[ip] = left
        else:
            self._by_ip.pop(ip, None)
        for waiting in list(self._queues):  # each checks its own room and the total's
            self._wake(waiting)

    def _wake(self, ip: str) -> None:
        """Wake the first request of ``ip`` still waiting, if it may fit."""
        queue = self._queues.get(ip)
        if queue is None or not self.fits(ip):
            return
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        if not queue:
            del self._queues[ip]

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "telemetry_sink_request_memory_held_bytes", "Request bytes the listeners hold now", self.held
        )
        yield GaugeMetricFamily(
            "telemetry_sink_request_memory_max_bytes",
            "server.queued_max_request_bytes: the request bytes the listeners may hold at once",
            self.limits.max_bytes,
        )
        yield GaugeMetricFamily(
            "telemetry_sink_request_memory_waiting",
            "Kafka requests waiting, unread, for request memory",
            self.waiting,
        )
        yield CounterMetricFamily(
            "telemetry_sink_request_memory_refused",
            "HTTP requests answered 503 because their body did not fit the request memory",
            self.refused,
        )

    def _hold(self, ip: str, size: int) -> None:
        self.held += size
        self._by_ip[ip] = self.held_by(ip) + size
