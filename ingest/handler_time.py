"""The request-handler time of a request, as Kafka's request quota measures it (KIP-124,
``request_percentage``; AUD-D8): the time the sink's thread spends handling that request, not
the time the request waits.

Every request is handled on the one event loop, between awaits. ``metering()`` starts a request's meter
(in a context variable, so it follows the request through the coroutines it awaits), and the places
where a request waits for something that is not its own work say so with ``waiting()``: a decoder
process decoding a large payload, the exporter's durable group commit. While a request waits, the loop
runs other requests, whose time is theirs. What is left is this request's handling: its parse, gates,
quota bookkeeping and inline decode, but neither another client's work nor a Delta commit. It is read
with the monotonic clock (``time.perf_counter_ns``), as Kafka takes request-handler thread time as
the wall time from a request's dequeue to its local completion: within a synchronous stretch the loop
runs nothing else, and the clock costs a few tens of nanoseconds where the thread's CPU clock is a
system call (see ``benchmarks/quotas/request_overhead.py``).

A large payload is decoded in another process (``ingest.push.decoding``), while the request waits;
the CPU that process spent on it is then added to the request's handler time (``charge``): a broker
decompresses and reads a push's payload on its request-handler thread (the telemetry receiver reads
``PushTelemetryRequest.metricsData()``, which decompresses), so that work is request time in Kafka,
whatever process does it here. It is the worker thread's CPU clock, not its wall time, which would
include waiting for a core that other clients' work holds.

``record_request_time`` records a request's handler time in the request quota, in one place for every
transport, as a broker's ``sendResponseMaybeThrottle`` and ``sendResponseExemptThrottle``: for its
client, returning the throttle the client earned for the transport to answer with its own way (the
Kafka wire puts it into the answer's ``throttle_time_ms`` and mutes the connection, ``channel``; the
admin HTTP API into the body and ``Retry-After``; the push pipeline into the response and a hold, or a
mute, for the larger of its two quotas); for nobody's client (the platform's probes and scrapes, as a
broker's cluster-action requests), into the never-throttled ``exempt-request-time``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Final

from quotas import ClientRequestQuotaManager, ThrottleCallback
from subscriptions import ClientContext

__all__ = ["HandlerTime", "charge", "metering", "record_request_time", "waiting"]


class HandlerTime:
    """One request's handler time so far: the advance of a monotonic wall clock (``clock``) since it
    started, less its waits."""

    __slots__ = ("_clock", "_since", "_spent")

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self._clock = clock
        self._spent = 0
        self._since: int | None = clock()

    def pause(self) -> None:
        if self._since is not None:
            self._spent += self._clock() - self._since
            self._since = None

    def resume(self) -> None:
        if self._since is None:
            self._since = self._clock()

    def charge(self, ns: int) -> None:
        """Add ``ns`` of this request's work done elsewhere."""
        self._spent += ns

    def total_ns(self) -> int:
        running = 0 if self._since is None else self._clock() - self._since
        return self._spent + running


_CURRENT: Final[ContextVar[HandlerTime | None]] = ContextVar("handler_time", default=None)


class _Metering:
    """``metering()``'s context: a class, not a generator, as it runs around every request."""

    __slots__ = ("_meter", "_token")

    def __init__(self, clock: Callable[[], int]) -> None:
        self._meter = HandlerTime(clock)
        self._token: Token[HandlerTime | None] | None = None

    def __enter__(self) -> HandlerTime:
        self._token = _CURRENT.set(self._meter)
        return self._meter

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)


class _Waiting:
    __slots__ = ("_meter",)

    def __enter__(self) -> None:
        self._meter = _CURRENT.get()
        if self._meter is not None:
            self._meter.pause()

    def __exit__(self, *exc: object) -> None:
        if self._meter is not None:
            self._meter.resume()


def metering(clock: Callable[[], int] = time.perf_counter_ns) -> _Metering:
    """Meter the handling of one request (within this context)."""
    return _Metering(clock)


def waiting() -> _Waiting:
    """The current request waits for something that is not its own work (nothing to do outside a
    metered request)."""
    return _Waiting()


def charge(ns: int) -> None:
    """Add ``ns`` of work another process did for the current request (a decoder's CPU) to its handler
    time (nothing outside a metered request)."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.charge(ns)


def record_request_time(
    quota: ClientRequestQuotaManager,
    client: ClientContext | None,
    meter: HandlerTime,
    now_ms: int,
    channel: ThrottleCallback | None = None,
) -> int:
    """Record the handler time ``meter`` holds for ``client`` at ``now_ms``; the throttle in ms it
    earned (0 within ``request_percentage``), with ``channel`` (a connection) muted for it. With no
    ``client`` (the platform's own request) the time is exempt and the throttle 0."""
    if client is None:
        quota.record_exempt(meter.total_ns(), now_ms)
        return 0
    principal, client_id = client.principal, client.client_id or ""
    throttle_ms = quota.record_request_time(principal, client_id, meter.total_ns(), now_ms)
    if channel is not None:
        quota.throttle(principal, client_id, throttle_ms, channel, now_ms)  # nothing when 0
    return throttle_ms
