"""Admission control: a bound on the KIP-714 and OTLP requests in flight, shared by both ports.

grpcio's own ``maximum_concurrent_rpcs`` refuses the excess with RESOURCE_EXHAUSTED and no retry
information, which OTLP clients treat as permanent (the batch is dropped). So the sink counts requests
itself (``server.max_concurrent_requests``, like Kafka's ``queued.max.requests``) and answers the
excess at once, unrecorded, with an answer every client retries after
``server.overload_retry_after_ms``:

| RPC | over the limit |
|---|---|
| KIP-714 Get/Push (gRPC, HTTP) | THROTTLING_QUOTA_EXCEEDED with ``throttle_time_ms`` (and ``Retry-After``) |
| OTLP gRPC ``Export`` | UNAVAILABLE with RetryInfo |
| OTLP HTTP ``/v1/metrics`` | 503 with ``Retry-After`` |

Never INVALID_REQUEST, INVALID_RECORD or UNSUPPORTED_VERSION, which turn a Kafka client's telemetry off
(PD-12). A request holds its slot until it is answered, including while it waits out its client's
throttle (``holds``), so held clients cannot pile up without bound. Everything runs on the one event
loop, so the count needs no lock.
"""

from __future__ import annotations

from types import TracebackType
from typing import Final

__all__ = ["DEFAULT_MAX_CONCURRENT_REQUESTS", "DEFAULT_OVERLOAD_RETRY_AFTER_MS", "Admission", "Slot"]

DEFAULT_MAX_CONCURRENT_REQUESTS: Final = 500
"""``server.max_concurrent_requests``, as Kafka's ``queued.max.requests``."""
DEFAULT_OVERLOAD_RETRY_AFTER_MS: Final = 1000
"""``server.overload_retry_after_ms``."""


class Admission:
    """At most ``max_in_flight`` requests at once; the rest are asked to come back after
    ``retry_after_ms``."""

    def __init__(self, max_in_flight: int, retry_after_ms: int) -> None:
        if max_in_flight < 1 or retry_after_ms < 1:
            raise ValueError("max_in_flight and retry_after_ms must be positive")
        self.max_in_flight = max_in_flight
        self.retry_after_ms = retry_after_ms
        self.in_flight = 0
        self.refused = 0

    def try_enter(self) -> bool:
        """Take a slot (True), or count a refusal (False)."""
        if self.in_flight >= self.max_in_flight:
            self.refused += 1
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1

    def slot(self) -> Slot:
        """``with admission.slot() as admitted``: the slot (if any) is given back on leaving."""
        return Slot(self)

    @property
    def overload_message(self) -> str:
        return f"the sink has {self.max_in_flight} requests in flight: retry after {self.retry_after_ms} ms"


class Slot:
    """One request's turn: entering takes a slot if one is free (``True``), leaving gives it back. A
    class rather than a generator-based context manager: it is entered on every request."""

    __slots__ = ("_admission", "_admitted")

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._admitted = False

    def __enter__(self) -> bool:
        self._admitted = self._admission.try_enter()
        return self._admitted

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._admitted:
            self._admission.leave()
