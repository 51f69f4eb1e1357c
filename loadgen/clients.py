"""The simulated clients: ``Kip714Client`` (Get, pushes at the subscription's interval, the
reactions of docs/rules.md TEL-25 / PD-12, throttle times honoured, a terminating push) and
``OtlpClient`` (an OTLP exporter), over the transport protocols they need; and the run's records
and ``Summary``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from loadgen.payloads import (
    _ACCEPTED_OUTCOMES,
    _NS_PER_MS,
    _RETRY_AGAIN_NOW,
    _RETRY_LATER,
    CLIENT_KINDS,
    DEFAULT_OTLP_INTERVAL_MS,
    DEFAULT_PUSH_INTERVAL_MS,
    ClientIdentity,
    ClientMetricsModel,
    CompressionChoice,
    build_metrics_data,
    choose_compression,
    compress,
    first_push_delay_ms,
    select_metrics,
)
from quotas import Clock
from subscriptions import (
    CompressionType,
    Errors,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)


class TransportError(Exception):
    """A request got no protocol answer (connection refused, reset, timed out, HTTP 5xx)."""


class TargetUnreachableError(Exception):
    """The target did not answer before the run started."""


class OtlpAnswer(NamedTuple):
    """An OTLP export's answer: the gRPC status name and the wait the sink asked for (RetryInfo)."""

    status: str
    retry_after_ms: int = 0


class Kip714Transport(Protocol):
    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        """GetTelemetrySubscriptions; raise ``TransportError`` when there is no answer."""
        ...

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        """PushTelemetry; raise ``TransportError`` when there is no answer."""
        ...


class OtlpTransport(Protocol):
    async def export(self, client: ClientIdentity, instance_id: uuid.UUID, body: bytes) -> OtlpAnswer:
        """One ``MetricsService/Export``; raise ``TransportError`` when there is no answer."""
        ...


class RequestRecord(NamedTuple):
    """One request a simulated client made, as the summary (and tests) see it.

    ``outcome`` is the Kafka error name (``NONE``, ``UNKNOWN_SUBSCRIPTION_ID``, ...), for OTLP the gRPC
    status name (``OK``, ``RESOURCE_EXHAUSTED``), or ``TRANSPORT_ERROR``. ``sent_ms``/``answered_ms``
    are the loadgen clock's; ``throttle_ms`` is the wait the answer asked for.
    """

    client: int
    kind: Literal["get", "push"]
    sent_ms: int
    answered_ms: int
    outcome: str
    throttle_ms: int = 0
    terminating: bool = False
    bytes_sent: int = 0
    bytes_uncompressed: int = 0
    compression: int | None = None
    latency_ms: float = 0.0
    subscription_id: int | None = None
    instance_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run did. ``render()`` is the text the CLI prints; ``as_dict()`` its JSON."""

    target: str
    address: str
    clients: int
    elapsed_s: float
    gets: int
    gets_by_outcome: Mapping[str, int]
    pushes: int
    pushes_accepted: int
    pushes_by_outcome: Mapping[str, int]
    terminating_sent: int
    terminating_accepted: int
    throttled: int
    throttle_ms_total: int
    bytes_sent: int
    bytes_uncompressed: int
    compression: Mapping[str, int]
    push_latency_p50_ms: float | None
    push_latency_p99_ms: float | None
    clients_stopped: int
    transport_errors: int
    first_transport_error: str | None

    @property
    def pushes_per_s(self) -> float:
        return self.pushes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "pushes_per_s": round(self.pushes_per_s, 3)}

    def render(self) -> str:
        def counts(by: Mapping[str, int]) -> str:
            return ", ".join(f"{name} {n}" for name, n in sorted(by.items(), key=lambda kv: -kv[1])) or "-"

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f} ms"

        lines = [
            f"telemetry-sink loadgen: {self.clients} clients -> {self.target} {self.address}, "
            f"{self.elapsed_s:.1f} s",
            f"  gets               {self.gets} ({counts(self.gets_by_outcome)})",
            f"  pushes             {self.pushes} sent, {self.pushes_accepted} accepted, "
            f"{self.pushes_per_s:.1f} pushes/s",
            f"  pushes by outcome  {counts(self.pushes_by_outcome)}",
            f"  terminating        {self.terminating_sent} sent, {self.terminating_accepted} accepted",
            f"  throttled          {self.throttled} answers, {self.throttle_ms_total} ms in total",
            f"  bytes sent         {self.bytes_sent} ({self.bytes_uncompressed} before compression; "
            f"{counts(self.compression)})",
            f"  push latency       p50 {ms(self.push_latency_p50_ms)}, p99 {ms(self.push_latency_p99_ms)}",
            f"  clients stopped    {self.clients_stopped} (telemetry turned off by a fatal error code)",
            f"  transport errors   {self.transport_errors}"
            + (f" (first: {self.first_transport_error})" if self.first_transport_error else ""),
        ]
        return "\n".join(lines)


def _percentile(sorted_values: Sequence[float], percent: float) -> float | None:
    """Nearest-rank percentile."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class LoadStats:
    """Collects every ``RequestRecord`` (passing each to ``observer``) and sums them up."""

    def __init__(self, observer: Callable[[RequestRecord], None] | None = None) -> None:
        self.observer = observer
        self.gets: Counter[str] = Counter()
        self.pushes: Counter[str] = Counter()
        self.compression: Counter[str] = Counter()
        self.terminating_sent = 0
        self.terminating_accepted = 0
        self.throttled = 0
        self.throttle_ms_total = 0
        self.bytes_sent = 0
        self.bytes_uncompressed = 0
        self.latencies_ms: list[float] = []
        self.clients_stopped = 0
        self.transport_errors = 0
        self.first_transport_error: str | None = None

    def record(self, record: RequestRecord) -> None:
        if record.kind == "get":
            self.gets[record.outcome] += 1
        else:
            self.pushes[record.outcome] += 1
            self.bytes_sent += record.bytes_sent
            self.bytes_uncompressed += record.bytes_uncompressed
            if record.compression is not None:
                self.compression[CompressionType(record.compression).name.lower()] += 1
            if record.outcome != "TRANSPORT_ERROR":
                self.latencies_ms.append(record.latency_ms)
            if record.terminating:
                self.terminating_sent += 1
                self.terminating_accepted += record.outcome in _ACCEPTED_OUTCOMES
        if record.throttle_ms > 0:
            self.throttled += 1
            self.throttle_ms_total += record.throttle_ms
        if self.observer is not None:
            self.observer(record)

    def transport_error(self, error: BaseException) -> None:
        self.transport_errors += 1
        if self.first_transport_error is None:
            self.first_transport_error = str(error) or type(error).__name__

    def summary(self, target: str, address: str, clients: int, elapsed_ms: int) -> Summary:
        latencies = sorted(self.latencies_ms)
        return Summary(
            target=target,
            address=address,
            clients=clients,
            elapsed_s=elapsed_ms / 1000,
            gets=sum(self.gets.values()),
            gets_by_outcome=dict(self.gets),
            pushes=sum(self.pushes.values()),
            pushes_accepted=sum(n for outcome, n in self.pushes.items() if outcome in _ACCEPTED_OUTCOMES),
            pushes_by_outcome=dict(self.pushes),
            terminating_sent=self.terminating_sent,
            terminating_accepted=self.terminating_accepted,
            throttled=self.throttled,
            throttle_ms_total=self.throttle_ms_total,
            bytes_sent=self.bytes_sent,
            bytes_uncompressed=self.bytes_uncompressed,
            compression=dict(self.compression),
            push_latency_p50_ms=_percentile(latencies, 50),
            push_latency_p99_ms=_percentile(latencies, 99),
            clients_stopped=self.clients_stopped,
            transport_errors=self.transport_errors,
            first_transport_error=self.first_transport_error,
        )


def _outcome(error_code: int) -> str:
    try:
        return Errors(error_code).name
    except ValueError:
        return str(error_code)


class _ClientBase:
    """What every simulated client shares: its clock, its throttle, the waits and the records."""

    def __init__(
        self,
        identity: ClientIdentity,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        close_timeout_ms: int,
        timer: Callable[[], float],
    ) -> None:
        self.identity = identity
        self.clock = clock
        self.stats = stats
        self.rng = rng
        self.close_timeout_ms = close_timeout_ms
        self.timer = timer
        self.model = ClientMetricsModel(
            CLIENT_KINDS[identity.kind], rng, bootstrap_node=identity.kind == "consumer"
        )
        self.throttle_until = 0
        self.started_ns = clock.now_ms() * _NS_PER_MS
        self.last_collection_ns = self.started_ns

    async def _wait_until(self, at_ms: int, stop: asyncio.Event) -> bool:
        """Wait until ``at_ms`` on the clock; False when ``stop`` was set first."""
        if stop.is_set():
            return False
        remaining = at_ms - self.clock.now_ms()
        if remaining <= 0:
            return True
        return not await self.clock.wait(stop, remaining)

    async def _wait_for_throttle_at_close(self) -> bool:
        """Before the last push: wait out a throttle that ends within the close timeout; False if it
        would not (then the last push is not sent, as a client closing with a timeout gives up)."""
        remaining = self.throttle_until - self.clock.now_ms()
        if remaining > self.close_timeout_ms:
            return False
        if remaining > 0:
            await self.clock.wait(asyncio.Event(), remaining)
        return True

    def _throttled(self, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.throttle_until = max(self.throttle_until, self.clock.now_ms() + throttle_ms)

    def _payload(self, requested: Sequence[str] | None, delta: bool) -> bytes:
        now_ns = self.clock.now_ms() * _NS_PER_MS
        points = self.model.collect(delta=delta)
        if requested is not None:
            points = select_metrics(points, requested)
        data = build_metrics_data(
            points,
            resource_attributes=self._resource_attributes(),
            scope_name=self.identity.scope_name,
            start_time_unix_nano=self.last_collection_ns if delta else self.started_ns,
            time_unix_nano=now_ns,
            delta_temporality=delta,
        )
        self.last_collection_ns = now_ns
        return bytes(data.SerializeToString())

    def _resource_attributes(self) -> Mapping[str, str]:
        return self.identity.resource_attributes


class Kip714Client(_ClientBase):
    """One Kafka client's telemetry, over GetTelemetrySubscriptions and PushTelemetry.

    Reactions (TEL-25, PD-12 in docs/rules.md): a successful Get schedules the first push at
    ``first_push_delay_ms`` and later pushes one interval after the previous push's answer; ``[]``
    requested metrics re-Get after the interval; 117/76 re-Get at once; 89/118 re-Get after the
    interval; INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and unknown codes turn telemetry off
    for the rest of the run; a request without an answer re-Gets after the interval. Every answer's
    ``throttle_time_ms`` delays the next request. At the end: one terminating push if the client holds
    a subscription.
    """

    def __init__(
        self,
        identity: ClientIdentity,
        transport: Kip714Transport,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        compression: CompressionChoice = "auto",
        interval_override_ms: int | None = None,
        close_timeout_ms: int = 5000,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(
            identity, clock=clock, stats=stats, rng=rng, close_timeout_ms=close_timeout_ms, timer=timer
        )
        self.transport = transport
        self.compression_choice: CompressionChoice = compression
        self.interval_override_ms = interval_override_ms
        self.instance_id = uuid.UUID(int=0)
        self.subscription: GetTelemetrySubscriptionsResponse | None = None
        self.interval_ms = DEFAULT_PUSH_INTERVAL_MS
        self.stopped = False

    async def run(self, start_ms: int, deadline_ms: int, stop: asyncio.Event) -> None:
        next_at = start_ms
        while not self.stopped:
            at = max(next_at, self.throttle_until)
            if at >= deadline_ms or not await self._wait_until(at, stop):
                break
            next_at = await (self._get() if self.subscription is None else self._push(terminating=False))
        if not self.stopped:
            await self._wait_until(deadline_ms, stop)
            await self.close()

    async def close(self) -> None:
        """The terminating push, if this client holds a subscription that asks for metrics."""
        if self.stopped or self.subscription is None or not self.subscription.requested_metrics:
            return
        if await self._wait_for_throttle_at_close():
            await self._push(terminating=True)

    async def _get(self) -> int:
        """Send a Get; the time of the next request."""
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.get(self.identity, self.instance_id)
        except TransportError as exc:
            return self._transport_failed("get", sent, exc)
        error = answer.error_code
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "get",
                sent,
                self.clock.now_ms(),
                _outcome(error),
                answer.throttle_time_ms,
                latency_ms=(self.timer() - began) * 1000,
                subscription_id=answer.subscription_id if error == Errors.NONE else None,
                instance_id=answer.client_instance_id if error == Errors.NONE else None,
            )
        )
        self._throttled(answer.throttle_time_ms)
        now = self.clock.now_ms()
        if error != Errors.NONE:
            if error in _RETRY_LATER:
                return now + self.interval_ms
            return self._stop()
        self.instance_id = answer.client_instance_id
        interval = self.interval_override_ms or answer.push_interval_ms
        self.interval_ms = interval if interval > 0 else DEFAULT_PUSH_INTERVAL_MS
        if not answer.requested_metrics:
            self.subscription = None  # nothing to collect: ask again after the interval
            return now + self.interval_ms
        if self.subscription is None or answer.delta_temporality != self.subscription.delta_temporality:
            self.model.reset_baselines()
            self.last_collection_ns = now * _NS_PER_MS
        self.subscription = answer
        return now + first_push_delay_ms(self.interval_ms, self.rng)

    async def _push(self, *, terminating: bool) -> int:
        """Send a push; the time of the next request."""
        subscription = self.subscription
        assert subscription is not None
        raw = self._payload(subscription.requested_metrics, subscription.delta_temporality)
        compression = choose_compression(subscription.accepted_compression_types, self.compression_choice)
        try:
            payload = compress(raw, compression)
        except Exception:  # a client falls back to NONE when compression fails (TEL-19)
            payload, compression = raw, CompressionType.NONE
        request = PushTelemetryRequest(
            self.instance_id, subscription.subscription_id, terminating, int(compression), payload
        )
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.push(self.identity, request)
        except TransportError as exc:
            return self._transport_failed("push", sent, exc, request, len(raw))
        error = answer.error_code
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "push",
                sent,
                self.clock.now_ms(),
                _outcome(error),
                answer.throttle_time_ms,
                terminating,
                len(payload),
                len(raw),
                int(compression),
                (self.timer() - began) * 1000,
                subscription.subscription_id,
                self.instance_id,
            )
        )
        self._throttled(answer.throttle_time_ms)
        now = self.clock.now_ms()
        if error == Errors.NONE:
            return now + self.interval_ms
        if error in _RETRY_AGAIN_NOW:
            self.subscription = None
            return now
        if error in _RETRY_LATER:
            self.subscription = None
            return now + self.interval_ms
        return self._stop()

    def _transport_failed(
        self,
        kind: Literal["get", "push"],
        sent: int,
        exc: TransportError,
        request: PushTelemetryRequest | None = None,
        raw_size: int = 0,
    ) -> int:
        self.stats.transport_error(exc)
        payload = (request.metrics or b"") if request is not None else b""
        self.stats.record(
            RequestRecord(
                self.identity.number,
                kind,
                sent,
                self.clock.now_ms(),
                "TRANSPORT_ERROR",
                terminating=request is not None and request.terminating,
                bytes_sent=len(payload),
                bytes_uncompressed=raw_size,
                compression=request.compression_type if request is not None else None,
            )
        )
        self.subscription = None
        return self.clock.now_ms() + self.interval_ms

    def _stop(self) -> int:
        """A code a Kafka client treats as fatal: telemetry off for the life of this client."""
        self.stopped = True
        self.stats.clients_stopped += 1
        return 0


class OtlpClient(_ClientBase):
    """An OTLP metrics exporter holding a Kafka client's metrics: no Get, one export per interval
    (cumulative sums, as the OpenTelemetry SDKs default to), the first one jittered like a Kafka
    client's, a wait asked for by RetryInfo honoured, and a last export at the end."""

    def __init__(
        self,
        identity: ClientIdentity,
        transport: OtlpTransport,
        *,
        clock: Clock,
        stats: LoadStats,
        rng: random.Random,
        interval_ms: int = DEFAULT_OTLP_INTERVAL_MS,
        compression: CompressionType = CompressionType.NONE,
        close_timeout_ms: int = 5000,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(
            identity, clock=clock, stats=stats, rng=rng, close_timeout_ms=close_timeout_ms, timer=timer
        )
        self.transport = transport
        self.interval_ms = interval_ms
        self.compression = compression  # gRPC's own encoding: sizes are counted before it
        self.instance_id = uuid.UUID(int=rng.getrandbits(128), version=4)

    def _resource_attributes(self) -> Mapping[str, str]:
        return {"service.name": self.identity.client_id, **self.identity.resource_attributes}

    async def run(self, start_ms: int, deadline_ms: int, stop: asyncio.Event) -> None:
        next_at = start_ms + first_push_delay_ms(self.interval_ms, self.rng)
        while True:
            at = max(next_at, self.throttle_until)
            if at >= deadline_ms or not await self._wait_until(at, stop):
                break
            await self._export(final=False)
            next_at = self.clock.now_ms() + self.interval_ms
        await self._wait_until(deadline_ms, stop)
        if await self._wait_for_throttle_at_close():
            await self._export(final=True)

    async def _export(self, *, final: bool) -> None:
        body = self._payload(None, delta=False)
        sent = self.clock.now_ms()
        began = self.timer()
        try:
            answer = await self.transport.export(self.identity, self.instance_id, body)
        except TransportError as exc:
            self.stats.transport_error(exc)
            answer = OtlpAnswer("TRANSPORT_ERROR")
        self.stats.record(
            RequestRecord(
                self.identity.number,
                "push",
                sent,
                self.clock.now_ms(),
                answer.status,
                answer.retry_after_ms,
                final,
                len(body),
                len(body),
                int(self.compression),
                (self.timer() - began) * 1000,
                instance_id=self.instance_id,
            )
        )
        self._throttled(answer.retry_after_ms)


# --------------------------------------------------------------------------------------------------
