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

Transports build the ``ClientContext`` (who is asking) and map responses to their wire format; they
contain no logic of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from exporters import Exporter, ExportResult, PushContext, TelemetryPush
from ingest.codec import DEFAULT_MAX_DECOMPRESSED_BYTES, PayloadError, decode_payload
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

__all__ = ["TelemetryPipeline"]

log = logging.getLogger(__name__)


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
        try:
            result = await self.exporter.export(TelemetryPush(self._push_context(accepted), payload))
        except Exception:  # the exporter's fault, never the client's: retry at the next interval
            log.exception("exporter failed")
            result = ExportResult.RETRYABLE
        if result is ExportResult.SUCCESS:
            return PUSH_ACCEPTED
        error = (
            Errors.THROTTLING_QUOTA_EXCEEDED if result is ExportResult.RETRYABLE else Errors.INVALID_RECORD
        )
        return self.manager.push_failed(accepted, error, now)

    def _push_context(self, accepted: AcceptedPush) -> PushContext:
        client = accepted.context
        tags = self.quotas.produce.callback.quota_metric_tags(
            QuotaType.PRODUCE, client.principal, client.client_id or ""
        )
        return PushContext(
            client_instance_id=accepted.client_instance_id,
            subscription_id=accepted.subscription_id,
            received_ms=accepted.received_ms,
            principal=client.principal,
            client_id=client.client_id,
            client_software_name=client.client_software_name,
            client_software_version=client.client_software_version,
            client_source_address=client.client_source_address,
            client_source_port=client.client_source_port,
            quota_tags=dict(tags),
            compression_type=int(accepted.compression_type),
            terminating=accepted.terminating,
        )

    def _request_time_throttle_ms(self, client: ClientContext, started_ns: int, now: int) -> int:
        elapsed = self._thread_time_ns() - started_ns
        return self.quotas.request.record_request_time(client.principal, client.client_id or "", elapsed, now)
