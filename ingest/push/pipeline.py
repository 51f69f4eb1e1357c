"""The push path: the one place where the stages meet, in order.

Every request first takes an admission slot (``admission``: over ``server.max_concurrent_requests``
it is answered at once with a retry delay, unrecorded). Who is asking (``ClientContext``) the
transports establish with ``authenticator`` (``ingest.security``) before calling in.

``get_subscriptions``: a held client waits out its hold (``holds``), then the subscription core
(TEL-15), then the request-time quota.
``push``: a held client waits out its hold, then the byte-rate quota on the pushed bytes
(``producer_byte_rate``), the subscription core's gates (TEL-16), payload decompression and
validation (``codec``), the exporter (acknowledged only when durable), then the request-time quota.
The response carries the largest throttle time of the gates and quotas (QUO-9, PD-7); a quota
throttle (byte rate or request time, not the gates' advice) also holds, until it ends, every client
that records into the violated quota sensor (``holds``: under a user quota, all the user's client ids).
A transport with connections Kafka's way (the Kafka wire listener) passes its connection as
``channel`` instead: the quota manager mutes that connection for the throttle (QUO-14: start/end
callbacks) and no hold is taken or waited for.

Decompression, the structural scan, parsing and (OTLP) point filtering (``decoding``) run on the event
loop only for payloads of at most ``decoding.INLINE_DECODE_BYTES`` once decompressed; bigger ones, and
every OTLP JSON body, in worker processes, so that no request holds the loop or its GIL.

What a failure is answered with follows how clients react (PD-12):

| failure | answer |
|---|---|
| payload over the decompressed cap | TELEMETRY_TOO_LARGE (retried next interval) |
| payload over a structural limit (``limits``, counted before parsing: ``otlp_scan``) | TELEMETRY_TOO_LARGE |
| an OTLP export of more clients than ``limits.max_clients_per_export`` | TELEMETRY_TOO_LARGE |
| corrupt compressed data, not OTLP, JSON nested too deep | INVALID_RECORD (the client is broken) |
| client text no row can hold (``PushContext`` refuses it) | INVALID_REQUEST |
| exporter RETRYABLE or an exception in it, no decoder process | THROTTLING_QUOTA_EXCEEDED (next push) |
| exporter PERMANENT (data refused downstream) | INVALID_RECORD |

``export_otlp``: the OTLP receivers' path, with no subscription gate (OTLP clients never ask for one). A
client held by an earlier throttle is refused with the time left, unrecorded (``holds``); over HTTP it
is muted first (``otlp_hold``, before its body is read: the request waits out the hold as a KIP-714
request does, and is then handled); otherwise the byte-rate quota records the body, the codec decodes
it, the client instance is resolved (``identity.otlp_instance_id``) and must not belong to another
principal (``instance_owners``; else CLUSTER_AUTHORIZATION_FAILED: PERMISSION_DENIED / 403), points that
break the OTLP data model are dropped (``otlp_points``: the rest land and the answer's
``partial_success`` counts them) and the exporter lands it; a positive quota throttle then holds the
violated sensor. Its ``OtlpOutcome`` carries a Kafka error code that ``errors.OTLP_ANSWERS`` turns into
the transport's status: an exporter RETRYABLE or an overload is UNKNOWN_SERVER_ERROR (UNAVAILABLE / 503,
retried after ``EXPORTER_RETRY_MS`` or ``server.overload_retry_after_ms``).

Transports build the ``ClientContext`` (who is asking) and map responses to their wire format;
the only checks they make first are their wire format's own (the OTLP/HTTP receiver's content types,
encodings and JSON, ``http_app``); every rule of the push path is here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceResponse,
)

from exporters import Exporter, ExportResult, ForwardedBatch, PushContext, TelemetryPush
from ingest.handler_time import metering, record_request_time, waiting
from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push.admission import Admission
from ingest.push.codec import DEFAULT_MAX_DECOMPRESSED_BYTES, PayloadError
from ingest.push.decoding import (
    DEFAULT_DECODE_PROCESSES,
    DecoderUnavailableError,
    PayloadDecoders,
    decode_export,
    decode_export_tolerant,
    decode_json_export,
    decode_push,
)
from ingest.push.forwarded_batches import forwarded_batch, forwarded_push_id
from ingest.push.holds import DEFAULT_MAX_HOLD_DELAY_MS, DEFAULT_MAX_OTLP_HOLD_DELAY_MS, ClientHolds
from ingest.push.metrics import RequestMetrics
from ingest.security.attribution import ClientGroup
from ingest.security.authentication import Authenticator
from ingest.security.identity import OPEN, forwarded_client, otlp_instance_id
from ingest.security.instance_owners import InstanceOwners
from quotas import Clock, QuotaManagers, SystemClock, ThrottleCallback
from subscriptions import (
    PUSH_ACCEPTED,
    AcceptedPush,
    ClientContext,
    ClientMetricsManager,
    CompressionType,
    Errors,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    kafka_uuid_string,
)
from subscriptions.errors import InstanceOwnershipError

__all__ = ["EXPORTER_RETRY_MS", "OtlpOutcome", "TelemetryPipeline"]

log = logging.getLogger(__name__)

EXPORTER_RETRY_MS: Final = 1000
"""How long an OTLP client is asked to wait when the exporter could not land its push."""
_ZERO_UUID: Final = uuid.UUID(int=0)
FAN_OUT_SLICE: Final = 64
"""The clients of one OTLP export resolved, or handed to the exporter, between two yields to the event
loop: an export of ``limits.max_clients_per_export`` clients never holds the loop for more than a slice
(T3-7: 100,000 clients in one request used to hold it 5.7 s)."""


async def _yield_to_loop() -> None:
    """Let the loop run what is ready (other requests, probes); not this request's handler time."""
    with waiting():
        await asyncio.sleep(0)


class OtlpOutcome(NamedTuple):
    """The answer to one OTLP export: a Kafka error code, the wait (retryable answers) and why; a
    landed export (NONE) with ``rejected_points`` or a ``message`` was a partial success."""

    error: Errors
    retry_after_ms: int = 0
    message: str = ""
    rejected_points: int = 0

    def export_response(self) -> ExportMetricsServiceResponse:
        """The ``ExportMetricsServiceResponse`` of a landed export (``partial_success`` if any)."""
        if not (self.rejected_points or self.message):
            return ExportMetricsServiceResponse()
        partial = ExportMetricsPartialSuccess(
            rejected_data_points=self.rejected_points, error_message=self.message
        )
        return ExportMetricsServiceResponse(partial_success=partial)


def _throttled_get(throttle_ms: int) -> GetTelemetrySubscriptionsResponse:
    """A Get answered without reaching the core (overload, hold): every other field at its default."""
    return GetTelemetrySubscriptionsResponse(
        throttle_ms, Errors.THROTTLING_QUOTA_EXCEEDED, _ZERO_UUID, 0, (), 0, 0, False, ()
    )


def _throttled_push(throttle_ms: int) -> PushTelemetryResponse:
    return PushTelemetryResponse(throttle_ms, Errors.THROTTLING_QUOTA_EXCEEDED)


def _forwarded(header: str | None, principal: str) -> ForwardedBatch | OtlpOutcome | None:
    """A trusted forwarder's batch header parsed, or the refusal of a malformed one."""
    if header is None:
        return None
    try:
        return forwarded_batch(header, principal)
    except ValueError as exc:
        return OtlpOutcome(Errors.INVALID_REQUEST, 0, str(exc))


def _refusals(refused: Sequence[tuple[OtlpOutcome, int]]) -> str:
    points = sum(n for _, n in refused)
    return f"{points} data points of {len(refused)} clients refused: {refused[0][0].message}"


def _held_export(held_ms: int) -> OtlpOutcome:
    return OtlpOutcome(Errors.THROTTLING_QUOTA_EXCEEDED, held_ms, "over quota: retry after the delay")


class TelemetryPipeline:
    """Runs every KIP-714 request through identity, quotas, the core, the codec and the exporter."""

    def __init__(
        self,
        manager: ClientMetricsManager,
        quotas: QuotaManagers,
        exporter: Exporter,
        *,
        clock: Clock | None = None,
        admission: Admission | None = None,
        authenticator: Authenticator = OPEN,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
        max_hold_delay_ms: int = DEFAULT_MAX_HOLD_DELAY_MS,
        max_otlp_hold_delay_ms: int = DEFAULT_MAX_OTLP_HOLD_DELAY_MS,
        limits: RequestLimits = DEFAULT_LIMITS,
        decode_processes: int = DEFAULT_DECODE_PROCESSES,
        otlp_tolerant_intake: bool = False,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.manager = manager
        self.quotas = quotas
        self.exporter = exporter
        self.clock: Clock = clock or SystemClock()
        self.admission = admission or Admission(2**31 - 1, EXPORTER_RETRY_MS)  # no practical limit
        self.authenticator = authenticator
        """The identity stage: transports build each request's ``ClientContext`` with it."""
        self.max_decompressed_bytes = max_decompressed_bytes
        self.max_hold_delay_ms = max_hold_delay_ms
        self.max_otlp_hold_delay_ms = max_otlp_hold_delay_ms
        self.limits = limits
        """What one request may hold (``limits:``), checked before a payload is parsed."""
        self.otlp_decode = decode_export_tolerant if otlp_tolerant_intake else decode_export
        """How an OTLP protobuf export is decoded: ``server.otlp_tolerant_intake`` repairs what raw
        forwarders send."""
        self.decoders = PayloadDecoders(decode_processes)
        """Where payloads are decoded: on the loop if small, else in worker processes (``decoding``)."""
        self._clock_ns = clock_ns
        """What handler time is read with (``handler_time``): a monotonic clock; a test steps it."""
        self.holds = ClientHolds((quotas.produce, quotas.request), limits.max_held_clients)
        """Throttles held by quota sensor (QUO-14 without a connection): every request records into
        its produce and request-time sensors, and is held while either is."""
        self.instance_owners = InstanceOwners(
            manager, manager.config.cache_max_size, limits.max_instance_owners
        )
        self.request_metrics = RequestMetrics(
            self.admission,
            lambda c: self.quotas.produce.metric_tags(c.principal, c.client_id or ""),
            max_entities=limits.max_entity_counters,
            holds=self.holds,
            instance_owners=self.instance_owners,
        )

    async def close(self) -> None:
        """Stop what the pipeline runs of its own: its decoder processes, once no other pipeline of the
        process shares them."""
        await self.decoders.close()

    async def get_subscriptions(
        self,
        request: GetTelemetrySubscriptionsRequest,
        client: ClientContext,
        channel: ThrottleCallback | None = None,
    ) -> GetTelemetrySubscriptionsResponse:
        with self.admission.slot() as admitted:
            refused_ms = await self._refusal(admitted, client, channel)
            if refused_ms:
                return _throttled_get(refused_ms)
            with metering(self._clock_ns) as meter:
                now = self.clock.now_ms()
                response = self.manager.process_get(request, client, now)
            throttle = record_request_time(self.quotas.request, client, meter, now)
            self._hold(client, 0, throttle, now, channel)
            return response._replace(throttle_time_ms=max(response.throttle_time_ms, throttle))

    async def push(
        self, request: PushTelemetryRequest, client: ClientContext, channel: ThrottleCallback | None = None
    ) -> PushTelemetryResponse:
        with self.admission.slot() as admitted:
            refused_ms = await self._refusal(admitted, client, channel)
            if refused_ms:
                return _throttled_push(refused_ms)
            with metering(self._clock_ns) as meter:
                now = self.clock.now_ms()
                size = len(request.metrics or b"")
                byte_throttle = self.quotas.produce.record_and_get_throttle_time_ms(
                    client.principal, client.client_id or "", size, now
                )
                outcome = self.manager.process_push(request, client, now)
                if isinstance(outcome, AcceptedPush):
                    response = await self._land(outcome, now)
                else:
                    response = outcome
            request_throttle = record_request_time(self.quotas.request, client, meter, now)
            self._hold(client, byte_throttle, request_throttle, now, channel)
            throttle = max(response.throttle_time_ms, byte_throttle, request_throttle)
            return response._replace(throttle_time_ms=throttle)

    async def _refusal(self, admitted: bool, client: ClientContext, channel: ThrottleCallback | None) -> int:
        """A KIP-714 request in its admission slot (if ``admitted``) waits out its client's hold, as
        Kafka mutes a throttled client's channel: 0 once it may go ahead, else the throttle to refuse
        it with. A request on a ``channel`` was read only once its connection was unmuted."""
        if not admitted:
            return self.admission.retry_after_ms
        if channel is not None:
            return 0
        return await self.holds.wait(
            client.principal, client.client_id or "", self.clock, self.max_hold_delay_ms
        )

    def _hold(
        self,
        client: ClientContext,
        byte_throttle: int,
        request_throttle: int,
        now: int,
        channel: ThrottleCallback | None = None,
    ) -> None:
        """Mute the client's ``channel`` for its quota throttle, or without one hold each violated
        sensor (and so every client recording into it) for its own throttle; the throttle time is
        recorded by the manager with the larger one (ties go to the request-time manager, QUO-9)."""
        principal, client_id = client.principal, client.client_id or ""
        by_bytes = byte_throttle > request_throttle
        if channel is None:
            produce, request = self.quotas.produce, self.quotas.request
            self.holds.hold(produce, principal, client_id, byte_throttle, now, record_throttle=by_bytes)
            self.holds.hold(
                request, principal, client_id, request_throttle, now, record_throttle=not by_bytes
            )
        elif by_bytes:
            self.quotas.produce.throttle(principal, client_id, byte_throttle, channel, now)
        else:
            self.quotas.request.throttle(principal, client_id, request_throttle, channel, now)

    async def _land(self, accepted: AcceptedPush, now: int) -> PushTelemetryResponse:
        """Decompress, validate and export an accepted push; its answer per PD-12."""
        metrics, compression, cap = accepted.metrics, accepted.compression_type, self.max_decompressed_bytes
        try:
            payload = await self.decoders.decode(decode_push, metrics, compression, cap, self.limits)
        except PayloadError as exc:
            log.info("push from %s refused: %s", kafka_uuid_string(accepted.client_instance_id), exc)
            return self.manager.push_failed(accepted, exc.error, now)
        except DecoderUnavailableError:  # ours, not the client's: it retries at its next interval
            log.exception("push from %s not decoded", kafka_uuid_string(accepted.client_instance_id))
            return self.manager.push_failed(accepted, Errors.THROTTLING_QUOTA_EXCEEDED, now)
        try:
            context = self._accepted_context(accepted)
        except ValueError as exc:  # client text no row can hold: refused alone, never in a batch
            log.info("push from %s refused: %s", kafka_uuid_string(accepted.client_instance_id), exc)
            return self.manager.push_failed(accepted, Errors.INVALID_REQUEST, now)
        result = await self._export(TelemetryPush(context, payload))
        if result is ExportResult.SUCCESS:
            return PUSH_ACCEPTED
        error = (
            Errors.THROTTLING_QUOTA_EXCEEDED if result is ExportResult.RETRYABLE else Errors.INVALID_RECORD
        )
        return self.manager.push_failed(accepted, error, now)

    async def export_otlp(
        self,
        body: bytes,
        compression_type: int,
        client: ClientContext,
        instance_header: str | None = None,
        *,
        as_json: bool = False,
        batch_header: str | None = None,
    ) -> OtlpOutcome:
        """One OTLP export request (``body``: the request's protobuf bytes, or OTLP JSON if ``as_json``,
        compressed per Kafka's ``compression_type``); ``instance_header`` is the
        ``x-kafka-client-instance-id`` header, ``batch_header`` the
        ``x-telemetry-sink-forwarded-batch`` header (``forwarded_batches``)."""
        with self.admission.slot() as admitted:
            if not admitted:
                return OtlpOutcome(
                    Errors.UNKNOWN_SERVER_ERROR,
                    self.admission.retry_after_ms,
                    self.admission.overload_message,
                )
            now = self.clock.now_ms()
            principal, client_id = client.principal, client.client_id or ""
            held_ms = self.holds.remaining_ms(principal, client_id, now)
            if held_ms:
                return _held_export(held_ms)
            trusted = principal in self.authenticator.trusted_forwarders
            with metering(self._clock_ns) as meter:
                byte_throttle = (  # a trusted forwarder's clients are each recorded on their own
                    0
                    if trusted
                    else self.quotas.produce.record_and_get_throttle_time_ms(
                        principal, client_id, len(body), now
                    )
                )
                outcome = await self._land_otlp(
                    body,
                    compression_type,
                    client,
                    instance_header,
                    now,
                    as_json=as_json,
                    forwarded=_forwarded(batch_header, principal) if trusted else None,
                )
            request_throttle = record_request_time(self.quotas.request, client, meter, now)
            self._hold(client, byte_throttle, request_throttle, now)
            return outcome

    async def otlp_hold(self, client: ClientContext) -> OtlpOutcome | None:
        """Mute a held client's OTLP/HTTP request before its body is read, as a broker mutes a
        throttled channel (its next request is not read until the throttle ends): None once it may go
        ahead (``export_otlp`` then handles it as usual), or the refusal with the time left when it may
        not wait, as a KIP-714 request may not (the hold ends more than
        ``server.max_otlp_hold_delay_ms`` away, or another request of the client already waits). A
        client sending back to back without honouring ``Retry-After`` so sends at most a request per
        hold, not as fast as it is answered."""
        left = await self.holds.wait(
            client.principal, client.client_id or "", self.clock, self.max_otlp_hold_delay_ms
        )
        return _held_export(left) if left else None

    async def _land_otlp(
        self,
        body: bytes,
        compression_type: int,
        client: ClientContext,
        instance_header: str | None,
        now: int,
        *,
        as_json: bool,
        forwarded: ForwardedBatch | OtlpOutcome | None,
    ) -> OtlpOutcome:
        if isinstance(forwarded, OtlpOutcome):
            return forwarded  # a trusted forwarder's malformed batch header
        trusted = client.principal in self.authenticator.trusted_forwarders
        limits = self.limits.for_trusted_forwarder() if trusted else self.limits  # clients per export
        cap = self.max_decompressed_bytes
        try:
            if as_json:  # never on the loop: converting JSON costs ~20 us a value
                decoded = await self.decoders.in_worker(
                    decode_json_export, body, compression_type, cap, limits
                )
                compression_type = CompressionType.NONE  # what lands is protobuf
            else:
                decoded = await self.decoders.decode(self.otlp_decode, body, compression_type, cap, limits)
        except PayloadError as exc:
            return OtlpOutcome(exc.error, 0, str(exc))
        except DecoderUnavailableError:
            log.exception("OTLP export not decoded")
            return OtlpOutcome(
                Errors.UNKNOWN_SERVER_ERROR, EXPORTER_RETRY_MS, "the sink could not decode the push"
            )
        groups, has_metrics, rejected, repairs = decoded
        for repair in repairs:
            self.request_metrics.count_repair(repair)
        if rejected and not has_metrics:
            return OtlpOutcome(Errors.NONE, 0, rejected.message, rejected.points)  # nothing valid to land
        rows, refused = await self._forwarded_rows(
            groups, client, instance_header, now, compression_type, trusted=trusted, forwarded=forwarded
        )
        if not rows:
            if trusted:  # one client's refusal never holds back the forwarder's queue: reported, not retried
                points = sum(n for _, n in refused)
                return OtlpOutcome(Errors.NONE, 0, _refusals(refused), rejected.points + points)
            return refused[0][0]
        pushes = [push for push, _ in rows]
        exported = self._export_all(pushes) if forwarded is None else self._export_batch(pushes, forwarded)
        results = await exported
        if ExportResult.RETRYABLE in results:
            return OtlpOutcome(
                Errors.UNKNOWN_SERVER_ERROR, EXPORTER_RETRY_MS, "the sink could not store the push"
            )
        downstream = OtlpOutcome(Errors.INVALID_RECORD, 0, "the push was refused downstream")
        refused += [
            (downstream, points)
            for (_, points), result in zip(rows, results, strict=True)
            if result is not ExportResult.SUCCESS
        ]
        if ExportResult.SUCCESS not in results:
            return refused[0][0]  # nothing landed: answered as a push of one client is
        messages = [rejected.message] if rejected else []
        if refused:
            messages.append(_refusals(refused))
        return OtlpOutcome(Errors.NONE, 0, "; ".join(messages), rejected.points + sum(n for _, n in refused))

    async def _forwarded_rows(
        self,
        groups: Sequence[ClientGroup],
        sender: ClientContext,
        instance_header: str | None,
        now: int,
        compression_type: int,
        *,
        trusted: bool,
        forwarded: ForwardedBatch | None,
    ) -> tuple[list[tuple[TelemetryPush, int]], list[tuple[OtlpOutcome, int]]]:
        """One push to land per client instance the export carries (``ingest.security.attribution``), each
        with its data points, and the refusals of the clients that cannot land, each with its data points.
        The decoder counted the clients (at most ``limits.max_clients_per_export``, a ``trusted``
        forwarder's more); they are resolved ``FAN_OUT_SLICE`` at a time, yielding to the loop between.
        A ``trusted`` forwarder's clients are each recorded in their own byte-rate quota (the asserted
        principal and client id) and left out while it throttles them; a ``forwarded`` batch's rows
        get push ids every attempt of the batch shares."""
        by_instance: dict[uuid.UUID, tuple[PushContext, list[bytes], int]] = {}
        refused: list[tuple[OtlpOutcome, int]] = []
        for index, (labels, payload, points) in enumerate(groups):
            if index and not index % FAN_OUT_SLICE:
                await _yield_to_loop()
            try:
                client, ignored = forwarded_client(
                    sender, labels, trusted_forwarder=trusted, limits=self.limits
                )
                instance_id = otlp_instance_id(instance_header, labels, client)
                terminating = labels.terminating == "true"
                context = self._push_context(
                    client, instance_id, 0, now, compression_type, terminating=terminating
                )
            except ValueError as exc:  # a bad instance id, or client text no row can hold
                refused.append((OtlpOutcome(Errors.INVALID_REQUEST, 0, str(exc)), points))
                continue
            if ignored:
                self.request_metrics.count_ignored_principal()
            if not self.instance_owners.claim(instance_id, client.principal, now):
                denied = InstanceOwnershipError(instance_id)
                refused.append((OtlpOutcome(denied.error, 0, str(denied)), points))
                continue
            landing = by_instance.get(instance_id)
            if landing is None:
                by_instance[instance_id] = (context, [payload], points)
            else:  # serialized MetricsData concatenate into one, the last of the client's if any was
                merged = dataclasses.replace(landing[0], terminating=True) if terminating else landing[0]
                by_instance[instance_id] = (merged, [*landing[1], payload], landing[2] + points)
        rows = []
        for instance_id, (resolved, payloads, points) in by_instance.items():
            payload = b"".join(payloads)
            over_quota = self._forwarded_quota(resolved, len(payload), now) if trusted else None
            if over_quota is not None:
                refused.append((over_quota, points))
                continue
            context = (
                resolved
                if forwarded is None
                else dataclasses.replace(resolved, push_id=forwarded_push_id(forwarded, instance_id))
            )
            rows.append((TelemetryPush(context, payload), points))
        return rows, refused

    def _forwarded_quota(self, context: PushContext, size: int, now: int) -> OtlpOutcome | None:
        """A forwarded client's push in its own byte-rate quota: the refusal while an earlier throttle
        holds it (nothing recorded), else None after recording ``size`` bytes (a throttle then holds
        its quota sensor: Kafka answers the request that went over, and throttles the next)."""
        principal, client_id = context.principal, context.client_id or ""
        held_ms = self.holds.remaining_ms(principal, client_id, now)
        if held_ms:
            self.request_metrics.count_forwarded_over_quota()
            return OtlpOutcome(
                Errors.THROTTLING_QUOTA_EXCEEDED, held_ms, f"client {client_id!r} of {principal} over quota"
            )
        produce = self.quotas.produce
        throttle = produce.record_and_get_throttle_time_ms(principal, client_id, size, now)
        self.holds.hold(produce, principal, client_id, throttle, now, record_throttle=True)
        return None

    async def _export_batch(
        self, pushes: Sequence[TelemetryPush], batch: ForwardedBatch
    ) -> list[ExportResult]:
        """A forwarded batch's pushes exported together; DUPLICATE answers counted, then taken as
        SUCCESS."""
        try:
            with waiting():  # the durable group commit is not this request's handler time
                results = await self.exporter.export_batch(pushes, batch)
        except Exception:  # the exporter's fault: the forwarder sends the batch again
            log.exception("exporter failed")
            return [ExportResult.RETRYABLE] * len(pushes)
        duplicates = results.count(ExportResult.DUPLICATE)
        if duplicates:
            self.request_metrics.count_forwarded_duplicates(duplicates)
        return [ExportResult.SUCCESS if r is ExportResult.DUPLICATE else r for r in results]

    async def _export_all(self, pushes: Sequence[TelemetryPush]) -> list[ExportResult]:
        """Each push exported, concurrently (they share group commits), their exports started
        ``FAN_OUT_SLICE`` at a time with a yield to the loop between; the results in order."""
        if len(pushes) == 1:
            return [await self._export(pushes[0])]
        started: list[asyncio.Task[ExportResult]] = []
        try:
            for start in range(0, len(pushes), FAN_OUT_SLICE):
                if start:
                    await _yield_to_loop()  # the slice before takes its first step meanwhile
                batch = pushes[start : start + FAN_OUT_SLICE]
                started += [asyncio.ensure_future(self._export(push)) for push in batch]
        except BaseException:  # cancelled while starting them: none is left running unawaited
            for task in started:
                task.cancel()
            raise
        return list(await asyncio.gather(*started))

    async def _export(self, push: TelemetryPush) -> ExportResult:
        try:
            with waiting():  # the durable group commit is not this request's handler time
                return await self.exporter.export(push)
        except Exception:  # the exporter's fault, never the client's: the client retries
            log.exception("exporter failed")
            return ExportResult.RETRYABLE

    def _accepted_context(self, accepted: AcceptedPush) -> PushContext:
        return self._push_context(
            accepted.context,
            accepted.client_instance_id,
            accepted.subscription_id,
            accepted.received_ms,
            int(accepted.compression_type),
            terminating=accepted.terminating,
        )

    def _push_context(
        self,
        client: ClientContext,
        instance_id: uuid.UUID,
        subscription_id: int,
        received_ms: int,
        compression_type: int,
        *,
        terminating: bool,
    ) -> PushContext:
        tags = self.quotas.produce.metric_tags(client.principal, client.client_id or "")
        return PushContext(
            client_instance_id=instance_id,
            subscription_id=subscription_id,
            received_ms=received_ms,
            principal=client.principal,
            client_id=client.client_id,
            client_software_name=client.client_software_name,
            client_software_version=client.client_software_version,
            client_source_address=client.client_source_address,
            client_source_port=client.client_source_port,
            quota_tags=dict(tags),
            compression_type=compression_type,
            terminating=terminating,
        )
