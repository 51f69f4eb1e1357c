"""The gRPC ``ClientTelemetry`` service: a thin transport over the pipeline.

Decode (the 16-byte instance id), build the client context (``identity``), call the pipeline, encode.
Kafka's error codes travel in the responses; the gRPC status is always OK (a bad instance id is
INVALID_REQUEST in the response, as in Kafka).
"""

from __future__ import annotations

from uuid import UUID

import grpc
import grpc.aio

from ingest.identity import grpc_client_context
from ingest.pipeline import TelemetryPipeline
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from subscriptions import (
    ClientContext,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
)

__all__ = ["ClientTelemetryService", "decode_instance_id", "encode_instance_id"]

Context = grpc.aio.ServicerContext[object, object]


def decode_instance_id(raw: bytes) -> UUID | None:
    """Kafka's uuid: 16 bytes, most significant 64 bits first (RPC-3); empty means null."""
    if not raw:
        return None
    if len(raw) != 16:
        raise ValueError(f"a client instance id is 16 bytes, not {len(raw)}")
    return UUID(bytes=raw)


def encode_instance_id(instance_id: UUID) -> bytes:
    return instance_id.bytes


class ClientTelemetryService(pb_grpc.ClientTelemetryServicer):
    """GetTelemetrySubscriptions and PushTelemetry over gRPC."""

    def __init__(self, pipeline: TelemetryPipeline) -> None:
        self.pipeline = pipeline

    @staticmethod
    def _client(context: Context) -> ClientContext:
        return grpc_client_context(
            context.invocation_metadata() or (), context.peer(), context.auth_context()
        )

    async def GetTelemetrySubscriptions(  # noqa: N802 - gRPC's method name
        self, request: pb.GetTelemetrySubscriptionsRequest, context: Context
    ) -> pb.GetTelemetrySubscriptionsResponse:
        try:
            instance_id = decode_instance_id(request.client_instance_id)
        except ValueError:
            return pb.GetTelemetrySubscriptionsResponse(error_code=Errors.INVALID_REQUEST)
        r = await self.pipeline.get_subscriptions(
            GetTelemetrySubscriptionsRequest(instance_id), self._client(context)
        )
        fields = {**r._asdict(), "client_instance_id": encode_instance_id(r.client_instance_id)}
        return pb.GetTelemetrySubscriptionsResponse(**fields)

    async def PushTelemetry(  # noqa: N802 - gRPC's method name
        self, request: pb.PushTelemetryRequest, context: Context
    ) -> pb.PushTelemetryResponse:
        try:
            instance_id = decode_instance_id(request.client_instance_id)
        except ValueError:
            return pb.PushTelemetryResponse(error_code=Errors.INVALID_REQUEST)
        push = PushTelemetryRequest(
            instance_id,
            request.subscription_id,
            request.terminating,
            request.compression_type,
            request.metrics,
        )
        r = await self.pipeline.push(push, self._client(context))
        return pb.PushTelemetryResponse(throttle_time_ms=r.throttle_time_ms, error_code=r.error_code)
