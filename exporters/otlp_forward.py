"""Forwards accepted pushes to a downstream OpenTelemetry collector over OTLP (gRPC or HTTP).

The payload is sent as it is: OTLP ``MetricsData`` and ``ExportMetricsServiceRequest`` have the same
wire format, so nothing is re-encoded. Retries follow the OTLP specification: on gRPC ``UNAVAILABLE``,
``RESOURCE_EXHAUSTED``, ``DEADLINE_EXCEEDED``, ``ABORTED``, ``CANCELLED``, ``OUT_OF_RANGE`` and
``DATA_LOSS``, and on HTTP 429, 502, 503 and 504 (honouring ``Retry-After``), with exponential
backoff, up to ``max_attempts``; then the push is answered RETRYABLE (the client pushes again at its
next interval). Any other failure is permanent: the collector refused the data.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Final, Literal

import grpc
import grpc.aio
import httpx
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

from exporters.base import Exporter, ExportResult, Health, TelemetryPush

__all__ = ["EXPORT_METHOD", "OtlpForwardingExporter"]

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
        backoff_ms = self.initial_backoff_ms
        detail = ""
        for attempt in range(1, self.max_attempts + 1):
            result, retry_after_s, detail = await self._send(push.payload)
            if result is not ExportResult.RETRYABLE:
                self._health = Health(True, "forwarding") if result is ExportResult.SUCCESS else self._health
                if result is ExportResult.PERMANENT:
                    log.warning("collector refused push %s: %s", push.context.push_id, detail)
                return result
            if attempt < self.max_attempts:
                jittered = backoff_ms * (0.5 + random.random() / 2) / 1000
                await asyncio.sleep(retry_after_s if retry_after_s is not None else jittered)
                backoff_ms = min(backoff_ms * 2, self.max_backoff_ms)
        self._health = Health(False, f"{self.endpoint}: {detail}")
        return ExportResult.RETRYABLE

    async def _send(self, payload: bytes) -> tuple[ExportResult, float | None, str]:
        if self._call is not None:
            return await self._send_grpc(payload)
        if self._http is not None:
            return await self._send_http(payload)
        return ExportResult.RETRYABLE, None, "exporter not started"

    async def _send_grpc(self, payload: bytes) -> tuple[ExportResult, float | None, str]:
        assert self._call is not None
        try:
            response = await self._call(payload, timeout=self.timeout_s, metadata=tuple(self.headers.items()))
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
        if response.status_code == 200:
            try:
                self._note_partial_success(ExportMetricsServiceResponse.FromString(response.content))
            except Exception:  # an empty or non-protobuf body still means accepted
                log.debug("collector's 200 answer had no ExportMetricsServiceResponse")
            return ExportResult.SUCCESS, None, ""
        detail = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code in _RETRYABLE_HTTP:
            retry_after = response.headers.get("Retry-After", "")
            return ExportResult.RETRYABLE, float(retry_after) if retry_after.isdigit() else None, detail
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
