"""The OTLP gRPC receiver: ``opentelemetry.proto.collector.metrics.v1.MetricsService/Export``.

The request arrives as raw bytes (its wire format is ``MetricsData``'s, so it lands exactly as sent;
gRPC has already undone any ``grpc-encoding`` compression). Outcomes are answered per
``errors.OTLP_ANSWERS``; retryable ones carry the wait twice, as OTLP clients read it: the trailer
``google.rpc.retryinfo-bin`` (``RetryInfo``, read by the Python SDK) and ``grpc-status-details-bin``
(a ``google.rpc.Status`` holding the ``RetryInfo``, read by the Go and Java SDKs). A landed export
answers an ``ExportMetricsServiceResponse``, with ``partial_success`` when points were dropped
(``otlp_points``); an unknown bearer token is UNAUTHENTICATED; client text in the metadata that breaks
``ingest.security.identity``'s rules (invalid UTF-8, a control character, over its limit) is INVALID_ARGUMENT
with a message naming the header. Every request is counted and timed.
"""

from __future__ import annotations

import grpc
import grpc.aio
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from ingest.errors import otlp_answer
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.identity import ClientTextError
from ingest.transports.grpc_service import AuthenticatedRequest
from ingest.wire import (
    FORWARDED_BATCH_HEADER,
    INSTANCE_ID_HEADER,
    METRICS_SERVICE,
    RETRY_INFO_KEY,
    STATUS_DETAILS_KEY,
)
from subscriptions import CompressionType, Errors

__all__ = [
    "otlp_metrics_handler",
    "retry_trailers",
]


def retry_trailers(
    status: grpc.StatusCode, message: str, retry_after_ms: int
) -> tuple[tuple[str, bytes], ...]:
    """The trailers that tell OTLP clients how long to wait."""
    delay = Duration()
    delay.FromMilliseconds(retry_after_ms)
    retry = RetryInfo(retry_delay=delay)
    detail = AnyProto()
    detail.Pack(retry)
    details = Status(code=status.value[0], message=message, details=[detail])
    return (
        (RETRY_INFO_KEY, retry.SerializeToString()),
        (STATUS_DETAILS_KEY, details.SerializeToString()),
    )


def otlp_metrics_handler(pipeline: TelemetryPipeline) -> grpc.GenericRpcHandler:
    """The ``MetricsService`` handler to add to a ``grpc.aio`` server."""

    async def export(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        try:
            async with AuthenticatedRequest(pipeline, context, "Export") as (client, seen):
                metadata = context.invocation_metadata() or ()
                headers = {k.lower(): str(v) for k, v in metadata}
                outcome = await pipeline.export_otlp(
                    request,
                    CompressionType.NONE,
                    client,
                    headers.get(INSTANCE_ID_HEADER),
                    batch_header=headers.get(FORWARDED_BATCH_HEADER),
                )
                seen.code = outcome.error
        except ClientTextError as exc:  # not retryable: the client will send the same text again
            await context.abort(otlp_answer(Errors.INVALID_REQUEST).grpc_status, str(exc))
        if outcome.error is not Errors.NONE:
            answer = otlp_answer(outcome.error)
            trailers = (
                retry_trailers(answer.grpc_status, outcome.message, outcome.retry_after_ms)
                if answer.retryable
                else ()
            )
            await context.abort(answer.grpc_status, outcome.message, trailing_metadata=trailers)
        return bytes(outcome.export_response().SerializeToString())

    return grpc.method_handlers_generic_handler(
        METRICS_SERVICE,
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                export, request_deserializer=None, response_serializer=None
            )
        },
    )
