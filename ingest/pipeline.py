"""The push path: the one place where the stages meet, in order.

``get_subscriptions``: the subscription core (TEL-15), then the request-time quota.
``push``: the byte-rate quota on the pushed bytes (``producer_byte_rate``), the subscription core's
gates (TEL-16), payload decompression and validation (``codec``), the exporter (acknowledged only
when durable), then the request-time quota. The response carries the largest throttle time of the
gates and quotas (QUO-9, PD-7).

What a failure is answered with follows how clients react (PD-12):

| failure | answer |
|---|---|
| payload over the decompressed cap | TELEMETRY_TOO_LARGE (retried next interval) |
| corrupt compressed data, not OTLP | INVALID_RECORD (the client is broken) |
| exporter RETRYABLE, or an exception in it | THROTTLING_QUOTA_EXCEEDED with the time to the next push |
| exporter PERMANENT (data refused downstream) | INVALID_RECORD |

``export_otlp``: the OTLP receivers' path, with no subscription gate (OTLP clients never ask for
one). A client held by an earlier throttle is refused with the time left, unrecorded (``holds``);
otherwise the byte-rate quota records the body, the codec decodes it, the client instance is resolved
(``identity.otlp_instance_id``) and the exporter lands it; a positive throttle then holds the client.
Its ``OtlpOutcome`` carries a Kafka error code that ``errors.OTLP_ANSWERS`` turns into the transport's
status: an exporter RETRYABLE is UNKNOWN_SERVER_ERROR (UNAVAILABLE / 503, retried after
``EXPORTER_RETRY_MS``).

Transports build the ``ClientContext`` (who is asking) and map responses to their wire format; they
contain no logic of their own.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Final, NamedTuple

from exporters import Exporter, ExportResult, PushContext, TelemetryPush
from ingest.codec import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    PayloadError,
    decode_payload,
    decompress,
    parse_metrics_data,
)
from ingest.holds import ClientHolds
from ingest.identity import otlp_instance_id
from ingest.quotas import QuotaManagers, QuotaType
from subscriptions import (
    PUSH_ACCEPTED,
    AcceptedPush,
    ClientContext,
    ClientMetricsManager,
    Errors,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)

__all__ = ["EXPORTER_RETRY_MS", "OtlpOutcome", "TelemetryPipeline"]

log = logging.getLogger(__name__)

EXPORTER_RETRY_MS: Final = 1000
"""How long an OTLP client is asked to wait when the exporter could not land its push."""


class OtlpOutcome(NamedTuple):
    """The answer to one OTLP export: a Kafka error code, the wait (retryable answers) and why."""

    error: Errors
    retry_after_ms: int = 0
    message: str = ""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TelemetryPipeline:
    """Runs every KIP-714 request through identity, quotas, the core, the codec and the exporter."""

    def __init__(
        self,
        manager: ClientMetricsManager,
        quotas: QuotaManagers,
        exporter: Exporter,
        *,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
        now_ms: Callable[[], int] = _wall_clock_ms,
        thread_time_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.manager = manager
        self.quotas = quotas
        self.exporter = exporter
        self.max_decompressed_bytes = max_decompressed_bytes
        self._now_ms = now_ms
        self._thread_time_ns = thread_time_ns
        self.holds = ClientHolds()

    async def get_subscriptions(
        self, request: GetTelemetrySubscriptionsRequest, client: ClientContext
    ) -> GetTelemetrySubscriptionsResponse:
        started = self._thread_time_ns()
        now = self._now_ms()
        response = self.manager.process_get(request, client, now)
        throttle = self._request_time_throttle_ms(client, started, now)
        return response._replace(throttle_time_ms=max(response.throttle_time_ms, throttle))

    async def push(self, request: PushTelemetryRequest, client: ClientContext) -> PushTelemetryResponse:
        started = self._thread_time_ns()
        now = self._now_ms()
        client_id = client.client_id or ""
        size = len(request.metrics or b"")
        byte_throttle = self.quotas.produce.record_and_get_throttle_time_ms(
            client.principal, client_id, size, now
        )
        outcome = self.manager.process_push(request, client, now)
        if isinstance(outcome, AcceptedPush):
            response = await self._land(outcome, now)
        else:
            response = outcome
        request_throttle = self._request_time_throttle_ms(client, started, now)
        throttle = max(response.throttle_time_ms, byte_throttle, request_throttle)
        return response._replace(throttle_time_ms=throttle)

    async def _land(self, accepted: AcceptedPush, now: int) -> PushTelemetryResponse:
        """Decompress, validate and export an accepted push; its answer per PD-12."""
        try:
            payload = decode_payload(accepted.metrics, accepted.compression_type, self.max_decompressed_bytes)
        except PayloadError as exc:
            log.info("push from %s refused: %s", accepted.client_instance_id, exc)
            return self.manager.push_failed(accepted, exc.error, now)
        result = await self._export(TelemetryPush(self._accepted_context(accepted), payload))
        if result is ExportResult.SUCCESS:
            return PUSH_ACCEPTED
        error = (
            Errors.THROTTLING_QUOTA_EXCEEDED if result is ExportResult.RETRYABLE else Errors.INVALID_RECORD
        )
        return self.manager.push_failed(accepted, error, now)

    async def export_otlp(
        self, body: bytes, compression_type: int, client: ClientContext, instance_header: str | None = None
    ) -> OtlpOutcome:
        """One OTLP export request (``body``: the request's protobuf bytes, compressed per Kafka's
        ``compression_type``); ``instance_header`` is the ``x-kafka-client-instance-id`` header."""
        started = self._thread_time_ns()
        now = self._now_ms()
        principal, client_id = client.principal, client.client_id or ""
        held_ms = self.holds.remaining_ms(principal, client_id, now)
        if held_ms:
            return OtlpOutcome(Errors.THROTTLING_QUOTA_EXCEEDED, held_ms, "over quota: retry after the delay")
        byte_throttle = self.quotas.produce.record_and_get_throttle_time_ms(
            principal, client_id, len(body), now
        )
        outcome = await self._land_otlp(body, compression_type, client, instance_header, now)
        request_throttle = self._request_time_throttle_ms(client, started, now)
        if byte_throttle >= request_throttle:
            self.holds.hold(self.quotas.produce, principal, client_id, byte_throttle, now)
        else:
            self.holds.hold(self.quotas.request, principal, client_id, request_throttle, now)
        return outcome

    async def _land_otlp(
        self, body: bytes, compression_type: int, client: ClientContext, instance_header: str | None, now: int
    ) -> OtlpOutcome:
        try:
            payload = decompress(body, compression_type, self.max_decompressed_bytes)
            resources = parse_metrics_data(payload).resource_metrics
        except PayloadError as exc:
            return OtlpOutcome(exc.error, 0, str(exc))
        attributes = (
            {
                a.key: a.value.string_value
                for a in resources[0].resource.attributes
                if a.value.HasField("string_value")
            }
            if resources
            else {}
        )
        try:
            instance_id = otlp_instance_id(instance_header, attributes, client)
        except ValueError as exc:
            return OtlpOutcome(Errors.INVALID_REQUEST, 0, str(exc))
        context = self._push_context(client, instance_id, 0, now, compression_type, terminating=False)
        result = await self._export(TelemetryPush(context, payload))
        if result is ExportResult.SUCCESS:
            return OtlpOutcome(Errors.NONE)
        if result is ExportResult.RETRYABLE:
            return OtlpOutcome(
                Errors.UNKNOWN_SERVER_ERROR, EXPORTER_RETRY_MS, "the sink could not store the push"
            )
        return OtlpOutcome(Errors.INVALID_RECORD, 0, "the push was refused downstream")

    async def _export(self, push: TelemetryPush) -> ExportResult:
        try:
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
        tags = self.quotas.produce.callback.quota_metric_tags(
            QuotaType.PRODUCE, client.principal, client.client_id or ""
        )
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

    def _request_time_throttle_ms(self, client: ClientContext, started_ns: int, now: int) -> int:
        elapsed = self._thread_time_ns() - started_ns
        return self.quotas.request.record_request_time(client.principal, client.client_id or "", elapsed, now)
