"""The gRPC ``ClientTelemetry`` service: a thin transport over the pipeline.

Decode (the 16-byte instance id), build the client context (``ingest.security.identity``), call the pipeline,
encode. Kafka's error codes travel in the responses; the gRPC status is OK (a bad instance id is
INVALID_REQUEST in the response, as in Kafka), except for an unknown bearer token: UNAUTHENTICATED,
the request not handled (``errors``). Client text in the metadata that breaks ``ingest.security.identity``'s
rules (invalid UTF-8, a control character, a client id or software name over its limit) is INVALID_REQUEST
in the response too, before the pipeline sees the request: that is what a Kafka client reads, and what
a Kafka broker answers a request it cannot handle (TEL-22); a client that sends such text will always
send it, and INVALID_REQUEST stops its telemetry rather than have it retry forever (PD-12). Every
request is counted and timed (``ingest.push.metrics``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any
from uuid import UUID

import grpc
import grpc.aio

from ingest.errors import AUTHENTICATION_ANSWER, AUTHENTICATION_FAILED
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.push.metrics import RequestObservation, Rpc
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.authentication import AuthenticationError
from ingest.security.identity import ClientTextError, grpc_client_context
from subscriptions import (
    ClientContext,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
)

__all__ = ["AuthenticatedRequest", "ClientTelemetryService", "decode_instance_id", "encode_instance_id"]

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


class AuthenticatedRequest:
    """``async with AuthenticatedRequest(pipeline, context, rpc) as (client, seen)``: count and time one
    gRPC request and establish who sent it; an unknown bearer token aborts it with UNAUTHENTICATED, and
    client text that breaks ``ingest.security.identity``'s rules raises ``ClientTextError``, counted as
    INVALID_REQUEST, for the caller to answer (in both cases the body of the ``async with`` does not run). A
    class rather than a generator-based context manager: it is entered on every request."""

    __slots__ = ("_context", "_pipeline", "_seen")

    def __init__(
        self, pipeline: TelemetryPipeline, context: grpc.aio.ServicerContext[Any, Any], rpc: Rpc
    ) -> None:
        self._pipeline = pipeline
        self._context = context
        self._seen = pipeline.request_metrics.observe("grpc", rpc)

    async def __aenter__(self) -> tuple[ClientContext, RequestObservation]:
        seen = self._seen.__enter__()
        context = self._context
        try:
            client = grpc_client_context(
                context.invocation_metadata() or (),
                context.peer(),
                context.auth_context(),
                self._pipeline.authenticator,
                self._pipeline.limits,
            )
        except ClientTextError:
            seen.code = Errors.INVALID_REQUEST  # not counted for an entity: its name is not valid
            self._seen.__exit__(None, None, None)
            raise
        except AuthenticationError as exc:
            seen.code = AUTHENTICATION_FAILED  # not counted for an entity: it names no principal
            try:
                await context.abort(AUTHENTICATION_ANSWER.grpc_status, str(exc))
            finally:
                self._seen.__exit__(None, None, None)
        seen.client = client
        return client, seen

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._seen.__exit__(kind, error, trace)


class ClientTelemetryService(pb_grpc.ClientTelemetryServicer):
    """GetTelemetrySubscriptions and PushTelemetry over gRPC."""

    def __init__(self, pipeline: TelemetryPipeline) -> None:
        self.pipeline = pipeline

    async def GetTelemetrySubscriptions(  # noqa: N802 - gRPC's method name
        self, request: pb.GetTelemetrySubscriptionsRequest, context: Context
    ) -> pb.GetTelemetrySubscriptionsResponse:
        try:
            async with AuthenticatedRequest(self.pipeline, context, "GetTelemetrySubscriptions") as (
                client,
                seen,
            ):
                try:
                    instance_id = decode_instance_id(request.client_instance_id)
                except ValueError:
                    seen.code = Errors.INVALID_REQUEST
                    return pb.GetTelemetrySubscriptionsResponse(error_code=Errors.INVALID_REQUEST)
                r = await self.pipeline.get_subscriptions(
                    GetTelemetrySubscriptionsRequest(instance_id), client
                )
                seen.code = r.error_code
                fields = {**r._asdict(), "client_instance_id": encode_instance_id(r.client_instance_id)}
                return pb.GetTelemetrySubscriptionsResponse(**fields)
        except ClientTextError:
            return pb.GetTelemetrySubscriptionsResponse(error_code=Errors.INVALID_REQUEST)

    async def PushTelemetry(  # noqa: N802 - gRPC's method name
        self, request: pb.PushTelemetryRequest, context: Context
    ) -> pb.PushTelemetryResponse:
        try:
            async with AuthenticatedRequest(self.pipeline, context, "PushTelemetry") as (client, seen):
                try:
                    instance_id = decode_instance_id(request.client_instance_id)
                except ValueError:
                    seen.code = Errors.INVALID_REQUEST
                    return pb.PushTelemetryResponse(error_code=Errors.INVALID_REQUEST)
                push = PushTelemetryRequest(
                    instance_id,
                    request.subscription_id,
                    request.terminating,
                    request.compression_type,
                    request.metrics,
                )
                r = await self.pipeline.push(push, client)
                seen.code = r.error_code
                return pb.PushTelemetryResponse(throttle_time_ms=r.throttle_time_ms, error_code=r.error_code)
        except ClientTextError:
            return pb.PushTelemetryResponse(error_code=Errors.INVALID_REQUEST)
