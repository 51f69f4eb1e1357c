"""Both front doors on loopback, over one pipeline: the gRPC server (ClientTelemetry and OTLP) and the
HTTP app, as ``serve`` runs them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc.aio
import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporters import Health
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.push.metrics import metrics_exposition
from ingest.push.pipeline import TelemetryPipeline
from ingest.transports.grpc_service import ClientTelemetryService
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app
from ingest.transports.otlp_grpc import otlp_metrics_handler
from ingest.wire import METRICS_SERVICE


@dataclass
class Endpoints:
    grpc_port: int
    channel: grpc.aio.Channel
    stub: pb_grpc.ClientTelemetryStub
    http: httpx.AsyncClient
    app: web.Application

    async def otlp_export(
        self, body: bytes, metadata: tuple[tuple[str, str], ...] = ()
    ) -> tuple[grpc.StatusCode, bytes, dict[str, str | bytes]]:
        """One raw OTLP gRPC export: (status, response bytes, trailers)."""
        method: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        try:
            reply = await method(body, metadata=metadata)
        except grpc.aio.AioRpcError as error:
            return error.code(), b"", dict(error.trailing_metadata() or ())
        return grpc.StatusCode.OK, reply, {}


@asynccontextmanager
async def serve_both(
    pipeline: TelemetryPipeline, app: web.Application | None = None
) -> AsyncIterator[Endpoints]:
    """Serve ``pipeline`` on loopback (gRPC and HTTP, ``/metrics`` included), and close it at the end;
    ``app`` replaces the HTTP app (e.g. one with extra routes)."""
    server = grpc.aio.server()
    pb_grpc.add_ClientTelemetryServicer_to_server(ClientTelemetryService(pipeline), server)  # type: ignore[no-untyped-call]
    server.add_generic_rpc_handlers((otlp_metrics_handler(pipeline),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    if app is None:
        metrics = metrics_exposition(
            pipeline.manager, pipeline.quotas, pipeline.request_metrics, pipeline.clock.now_ms
        )
        app = create_http_app(pipeline, ready=lambda: Health(True), metrics=metrics)
    http = TestServer(app, host="127.0.0.1")
    await http.start_server(**SERVER_OPTIONS)
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
            httpx.AsyncClient(base_url=str(http.make_url(""))) as client,
        ):
            stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
            yield Endpoints(port, channel, stub, client, app)
    finally:
        await http.close()
        await server.stop(None)
        await pipeline.close()
