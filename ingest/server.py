"""``telemetry-sink serve``: the sink as one asyncio process.

``Sink`` wires the pieces from a ``SinkConfig``:

1. the subscription store (bootstrap subscriptions) and ``ClientMetricsManager``;
2. the quota managers and their reapers;
3. the exporter (by default the Delta landing exporter writing this replica's shard,
   ``<data_root>/telemetry_pushes/<replica_id>``);
4. the pipeline;
5. the gRPC server (``ClientTelemetry`` and OTLP ``MetricsService``) and the HTTP server (KIP-714
   JSON, OTLP ``/v1/metrics``, ``/healthz``, ``/readyz``, ``/metrics``) on the same event loop,
   with TLS and mTLS from the config.

Every 30 s idle client instances and quota sensors are expired.

Shutdown (SIGTERM or SIGINT) stops accepting, lets requests in flight finish within
``server.shutdown_grace_s``, flushes the exporter (every acknowledged push is durable already; a
queued one is committed or answered RETRYABLE), and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
from aiohttp import web

from exporters import Exporter, load_exporter, shard_uri
from ingest.config import SinkConfig
from ingest.grpc_service import ClientTelemetryService
from ingest.http_app import SERVER_OPTIONS, create_http_app
from ingest.metrics import metrics_exposition
from ingest.otlp_grpc import otlp_metrics_handler
from ingest.pipeline import TelemetryPipeline
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.quotas import SystemClock, create_quota_managers
from subscriptions import ClientMetricsManager

__all__ = ["EXPIRY_PERIOD_S", "Sink", "serve"]

log = logging.getLogger(__name__)

EXPIRY_PERIOD_S: Final = 30.0


def _exporter(config: SinkConfig) -> Exporter:
    options: dict[str, Any] = dict(config.exporter.options)
    if config.exporter.name == "delta":
        options.setdefault("table_uri", shard_uri(config.data_root, "telemetry_pushes", config.replica_id))
        options.setdefault("writer_id", config.replica_id)
        if config.storage_options:
            options.setdefault("storage_options", dict(config.storage_options))
    return load_exporter(config.exporter.name, options)


class Sink:
    """The running service: start, then stop (gracefully) once."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.clock = SystemClock()
        self.manager = ClientMetricsManager(config.subscription_store(), config.client_metrics)
        self.quotas = create_quota_managers(config.quotas, self.clock)
        self.exporter = _exporter(config)
        self.pipeline = TelemetryPipeline(
            self.manager,
            self.quotas,
            self.exporter,
            max_decompressed_bytes=config.server.max_decompressed_bytes,
            now_ms=self.clock.now_ms,
        )
        self.grpc_port = 0
        self.http_port = 0
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        server = self.config.server
        await self.exporter.start()
        # gRPC's 4 MiB default would refuse a large OTLP batch before the codec's own cap could answer it
        self._grpc = grpc.aio.server(
            options=[("grpc.max_receive_message_length", server.max_decompressed_bytes)]
        )
        pb_grpc.add_ClientTelemetryServicer_to_server(ClientTelemetryService(self.pipeline), self._grpc)  # type: ignore[no-untyped-call]
        self._grpc.add_generic_rpc_handlers((otlp_metrics_handler(self.pipeline),))
        address = f"{server.host}:{server.grpc_port}"
        if server.tls_cert_file and server.tls_key_file:
            pair = [(Path(server.tls_key_file).read_bytes(), Path(server.tls_cert_file).read_bytes())]
            ca = Path(server.tls_client_ca_file).read_bytes() if server.tls_client_ca_file else None
            credentials = grpc.ssl_server_credentials(pair, ca, require_client_auth=ca is not None)
            self.grpc_port = self._grpc.add_secure_port(address, credentials)
        else:
            self.grpc_port = self._grpc.add_insecure_port(address)
        await self._grpc.start()
        app = create_http_app(
            self.pipeline,
            ready=self.exporter.health,
            metrics=metrics_exposition(self.manager, self.quotas, self.clock.now_ms),
            max_body_bytes=2 * self.config.client_metrics.telemetry_max_bytes + 65536,
        )
        self._http = web.AppRunner(app, access_log=None, **SERVER_OPTIONS)
        await self._http.setup()
        site = web.TCPSite(self._http, server.host, server.http_port, ssl_context=self._ssl_context())
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._tasks = [
            asyncio.create_task(self.quotas.run_reapers(self.clock), name="quota-reapers"),
            asyncio.create_task(self._expire_periodically(), name="expiry"),
        ]

    def _ssl_context(self) -> ssl.SSLContext | None:
        server = self.config.server
        if not (server.tls_cert_file and server.tls_key_file):
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(server.tls_cert_file, server.tls_key_file)
        if server.tls_client_ca_file:
            context.load_verify_locations(server.tls_client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_PERIOD_S)
            now = self.clock.now_ms()
            self.manager.expire(now)
            self.quotas.expire(now)

    async def stop(self) -> None:
        """Stop accepting, finish requests in flight within the grace period, flush, close."""
        grace = self.config.server.shutdown_grace_s
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._http is not None:
            await self._http.cleanup()
        await self.exporter.shutdown()
        self.quotas.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def serve(config: SinkConfig) -> int:
    """Run until SIGTERM or SIGINT; 0 after a clean shutdown."""
    sink = Sink(config)
    await sink.start()
    host = config.server.host
    print(
        f"telemetry-sink serving gRPC on {host}:{sink.grpc_port}, HTTP on {host}:{sink.http_port}, "
        f"landing in {getattr(sink.exporter, 'table_uri', config.exporter.name)}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    await sink.stop()
    return 0
