"""Forwards accepted pushes to a downstream OpenTelemetry collector over OTLP (gRPC or HTTP).

The payload is sent as it is: OTLP ``MetricsData`` and ``ExportMetricsServiceRequest`` have the same
wire format, so nothing is re-encoded. Retries follow the OTLP specification: on gRPC ``UNAVAILABLE``,
``RESOURCE_EXHAUSTED``, ``DEADLINE_EXCEEDED``, ``ABORTED``, ``CANCELLED``, ``OUT_OF_RANGE`` and
``DATA_LOSS``, and on HTTP 429, 502, 503 and 504 (honouring ``Retry-After`` up to the maximum
backoff), with jittered exponential backoff, up to ``max_attempts``; then the push is answered
RETRYABLE (the client pushes again at its next interval). HTTP 401 and 403 are retryable too: the
sink's credentials are wrong, not the client's data. Any other failure is permanent: the collector
refused the data. gRPC ``RetryInfo`` details are not read; the backoff applies.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Final, Literal

import grpc
import grpc.aio
import httpx
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

from exporters.base import Exporter, ExportResult, Health, TelemetryPush

__all__ = ["EXPORT_METHOD", "OtlpForwardingExporter", "retry_after_seconds"]

log = logging.getLogger(__name__)

EXPORT_METHOD: Final = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
_RETRYABLE_GRPC: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_RETRYABLE_HTTP: Final = frozenset({429, 502, 503, 504})
_OUR_CREDENTIALS: Final = frozenset({401, 403})  # our configuration is wrong, not the client's data


def retry_after_seconds(value: str, now_s: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds (decimals accepted) or an HTTP date."""
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


def _passthrough(payload: bytes) -> bytes:
    return payload


class OtlpForwardingExporter(Exporter):
    """Sends each push to ``endpoint`` (``host:port`` for gRPC, a URL for HTTP)."""

    name = "otlp"

    def __init__(
        self,
        endpoint: str,
        *,
        protocol: Literal["grpc", "http/protobuf"] = "grpc",
        headers: Mapping[str, str] | None = None,
        timeout_ms: int = 10_000,
        max_attempts: int = 5,
        initial_backoff_ms: int = 100,
        max_backoff_ms: int = 5_000,
    ) -> None:
        if protocol not in ("grpc", "http/protobuf"):
            raise ValueError(f"protocol must be 'grpc' or 'http/protobuf', not {protocol!r}")
        if max_attempts < 1 or timeout_ms < 1:
            raise ValueError("max_attempts and timeout_ms must be positive")
        self.endpoint = endpoint
        self.protocol = protocol
        self.headers = dict(headers or {})
        self._grpc_metadata = tuple((key.lower(), value) for key, value in self.headers.items())
        self.timeout_s = timeout_ms / 1000
        self.max_attempts = max_attempts
        self.initial_backoff_ms = initial_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.UnaryUnaryMultiCallable[bytes, ExportMetricsServiceResponse] | None = None
        self._http: httpx.AsyncClient | None = None
        self._health = Health(True, "nothing forwarded yet")
        self.rejected_data_points = 0

    @property
    def url(self) -> str:
        base = self.endpoint.rstrip("/")
        return base if base.endswith("/v1/metrics") else base + "/v1/metrics"

    async def start(self) -> None:
        if self.protocol == "grpc":
            self._channel = grpc.aio.insecure_channel(self.endpoint)
            self._call = self._channel.unary_unary(
                EXPORT_METHOD,
                request_serializer=_passthrough,
                response_deserializer=ExportMetricsServiceResponse.FromString,
            )
        else:
            self._http = httpx.AsyncClient(timeout=self.timeout_s)

    async def export(self, push: TelemetryPush) -> ExportResult:
        if self._call is None and self._http is None:
            return ExportResult.RETRYABLE  # not started, or shut down
        backoff_ms = self.initial_backoff_ms
        detail = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                result, retry_after_s, detail = await self._send(push.payload)
            except Exception as exc:  # never let a transport surprise escape as a crash
                result, retry_after_s, detail = ExportResult.RETRYABLE, None, f"{type(exc).__name__}: {exc}"
            if result is ExportResult.SUCCESS:
                self._health = Health(True, "forwarding")
                return result
            if result is ExportResult.PERMANENT:  # the data was refused: the collector is fine
                log.warning("collector refused push %s: %s", push.context.push_id, detail)
                return result
            if attempt < self.max_attempts:
                jittered = backoff_ms * (0.5 + random.random() / 2) / 1000
                wait = jittered if retry_after_s is None else min(retry_after_s, self.max_backoff_ms / 1000)
                await asyncio.sleep(wait)
                backoff_ms = min(backoff_ms * 2, self.max_backoff_ms)
        self._health = Health(False, f"{self.endpoint}: {detail}")
        return ExportResult.RETRYABLE

    async def _send(self, payload: bytes) -> tuple[ExportResult, float | None, str]:
        if self._call is not None:
            return await self._send_grpc(payload)
        return await self._send_http(payload)

    async def _send_grpc(self, payload: bytes) -> tuple[ExportResult, float | None, str]:
        assert self._call is not None
        try:
            response = await self._call(payload, timeout=self.timeout_s, metadata=self._grpc_metadata)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            result = ExportResult.RETRYABLE if code in _RETRYABLE_GRPC else ExportResult.PERMANENT
            return result, None, f"{code.name}: {exc.details()}"
        self._note_partial_success(response)
        return ExportResult.SUCCESS, None, ""

    async def _send_http(self, payload: bytes) -> tuple[ExportResult, float | None, str]:
        assert self._http is not None
        headers = {"Content-Type": "application/x-protobuf", **self.headers}
        try:
            response = await self._http.post(self.url, content=payload, headers=headers)
        except httpx.HTTPError as exc:
            return ExportResult.RETRYABLE, None, f"{type(exc).__name__}: {exc}"
        if 200 <= response.status_code < 300:
            try:
                self._note_partial_success(ExportMetricsServiceResponse.FromString(response.content))
            except Exception:  # an empty or non-protobuf body still means accepted
                log.debug("collector's 200 answer had no ExportMetricsServiceResponse")
            return ExportResult.SUCCESS, None, ""
        detail = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code in _RETRYABLE_HTTP:
            return (
                ExportResult.RETRYABLE,
                retry_after_seconds(response.headers.get("Retry-After", "")),
                detail,
            )
        if response.status_code in _OUR_CREDENTIALS:
            return ExportResult.RETRYABLE, None, detail
        return ExportResult.PERMANENT, None, detail

    def _note_partial_success(self, response: ExportMetricsServiceResponse) -> None:
        rejected = response.partial_success.rejected_data_points
        if rejected:
            self.rejected_data_points += rejected
            log.warning(
                "collector rejected %d data points: %s", rejected, response.partial_success.error_message
            )

    async def shutdown(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._call = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def health(self) -> Health:
        return self._health
