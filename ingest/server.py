"""``telemetry-sink serve``: the sink as one asyncio process.

``Sink`` wires the pieces from a ``SinkConfig``:

1. the subscription store (bootstrap subscriptions) and ``ClientMetricsManager``;
2. the quota managers (bootstrap client quotas) and their reapers;
3. the config log (``<data_root>/config_log``), replayed before serving and tailed every
   ``admin.config_log_poll_s``, and the admin operations over it;
4. the exporter (by default the Delta landing exporter writing this replica's shard,
   ``<data_root>/telemetry_pushes/<replica_id>``) and the quota-sample recorder
   (``<data_root>/quota_samples/<replica_id>``, every ``exporter.quota_sample_period_s``);
5. the pipeline;
6. the gRPC server (``ClientTelemetry`` and OTLP ``MetricsService``, with grpcio's connection limits),
   the HTTP server (KIP-714 JSON, OTLP ``/v1/metrics``, the admin API ``/admin/v1``, ``/healthz``,
   ``/readyz``, ``/metrics``, every connection through the connection quotas) and the Kafka wire
   listener (``ingest.transports.kafka``, unless ``kafka_listener.port`` is null; every connection through the
   connection quotas) on the same event loop, with TLS and mTLS from the config. The HTTP and Kafka
   listeners hold their requests' bytes within one ``RequestMemory``
   (``ingest.transports.request_memory``: ``server.queued_max_request_bytes`` and
   ``server.max_request_bytes_per_ip``).

Every 30 s idle client instances and quota sensors are expired, and a changed tokens file is re-read.
A task measures the event loop's lag for ``/metrics`` (``ingest.loop_lag``).

``serve`` first raises the soft open-file limit to the hard one (``raise_open_file_limit``): sockets
are bounded by the connection limits (``ServerConfig``), and the sink's own files must still open.
Where the limit is too low for the connection limits, ``Sink.start`` gives each listener a share of
it (``ingest.transports.descriptors``) and says so once.
Once started, it freezes the start-up objects out of the garbage collector's sight
(``freeze_start_up_objects``), so that no full collection stalls the loop walking them.

Shutdown (SIGTERM or SIGINT, ``Sink.stop``) has a budget, ``shutdown_budget_s``:

1. every listener (gRPC, HTTP, Kafka) stops accepting at once, and idle connections are closed;
2. requests in flight get ``server.shutdown_grace_s``, one grace period shared by all listeners; an
   HTTP request still arriving at its end (a stalled upload) is aborted then, never handled;
3. within ``server.shutdown_flush_s`` the exporter is shut down: the pushes it holds are committed and
   their requests answered (a request handed to it before the grace period ended is answered, never
   cut off while its push may land), and a push reaching it later is answered RETRYABLE; then the
   listeners send their last answers and close, the decoders stop and the last quota snapshot is
   recorded. ``serve`` then exits 0; past the bound it exits ``SHUTDOWN_INCOMPLETE_EXIT_CODE`` (75)
   at once, even with a commit hung in a worker thread: what was not flushed was never acknowledged,
   and its clients send it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import os
import resource
import signal
import ssl
import sys
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
from aiohttp import web

from exporters import Exporter, QuotaSample, QuotaSampleRecorder, load_exporter, shard_uri
from exporters.delta.schema import CONFIG_LOG_TABLE, QUOTA_SAMPLES_TABLE, TELEMETRY_PUSHES_TABLE
from ingest.admin import (
    ConfigImage,
    ConfigLog,
    ConfigLogFollower,
    QuotaChange,
    ReplicaDirectory,
    SinkAdmin,
    SuperUserAuthorizer,
    admin_routes,
)
from ingest.config import ServerConfig, SinkConfig
from ingest.loop_lag import LoopLagMonitor
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.push.admission import Admission
from ingest.push.metrics import metrics_exposition
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.sasl import SaslCredentials
from ingest.transports import (
    SERVER_OPTIONS,
    ClientTelemetryService,
    KafkaApis,
    KafkaListener,
    ListenerLimits,
    NodeInfo,
    QuotaGatedSite,
    SaslSettings,
    create_http_app,
    otlp_metrics_handler,
    register_http_listener,
    request_client,
)
from ingest.transports.connections import DEFAULT_LISTENER_MAX_CONNECTIONS, HTTP_LISTENER
from ingest.transports.descriptors import (
    DescriptorShares,
    descriptors_in_use,
    open_file_limit,
    share_descriptors,
)
from ingest.transports.kafka import KAFKA_LISTENER
from ingest.transports.request_memory import RequestMemory
from quotas import QuotaManagers, SystemClock, create_quota_managers
from subscriptions import ClientMetricsManager

__all__ = [
    "EXPIRY_PERIOD_S",
    "SHUTDOWN_INCOMPLETE_EXIT_CODE",
    "Sink",
    "freeze_start_up_objects",
    "quota_samples",
    "raise_open_file_limit",
    "serve",
    "shutdown_budget_s",
]

log = logging.getLogger(__name__)

EXPIRY_PERIOD_S: Final = 30.0
GRPC_SOCKETS: Final = "GRPC"
"""The gRPC port's name in the open-file limit's shares (it has no connection-quota listener)."""
SHUTDOWN_INCOMPLETE_EXIT_CODE: Final = 75
"""``serve``'s exit status when the shutdown did not finish within ``server.shutdown_flush_s``
(sysexits' EX_TEMPFAIL): pushes not flushed were never acknowledged; their clients send them again."""


def shutdown_budget_s(server: ServerConfig) -> float:
    """The longest ``Sink.stop`` takes: the grace period, then the flush bound (a pod's
    ``terminationGracePeriodSeconds`` is this plus its preStop pause and a margin to exit)."""
    return server.shutdown_grace_s + server.shutdown_flush_s


def _exporter(config: SinkConfig) -> Exporter:
    options: dict[str, Any] = dict(config.exporter.options)
    if config.exporter.name == "delta":
        shard = shard_uri(config.data_root, TELEMETRY_PUSHES_TABLE, config.replica_id)
        options.setdefault("table_uri", shard)
        options.setdefault("shards_uri", shard.rsplit("/", 1)[0])
        options.setdefault("writer_id", config.replica_id)
        if config.storage_options:
            options.setdefault("storage_options", dict(config.storage_options))
    return load_exporter(config.exporter.name, options)


def _quota_sample_recorder(config: SinkConfig) -> QuotaSampleRecorder | None:
    period_s = config.exporter.quota_sample_period_s
    if period_s <= 0:
        return None
    return QuotaSampleRecorder(
        shard_uri(config.data_root, QUOTA_SAMPLES_TABLE, config.replica_id),
        storage_options=config.storage_options or None,
        writer_id=config.replica_id,
        period_ms=max(1, int(period_s * 1000)),
    )


def quota_samples(quotas: QuotaManagers, now_ms: int) -> list[QuotaSample]:
    """Every quota sensor value now, as rows of ``quota_samples`` (averages with nothing yet left out)."""
    return [
        QuotaSample(metric.group, metric.name, metric.tags, value)
        for metric, value in quotas.values(now_ms).items()
        if not math.isnan(value)
    ]


class Sink:
    """The running service: start, then stop (gracefully) once."""

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.clock = SystemClock()
        store = config.subscription_store()
        self.manager = ClientMetricsManager(store, config.client_metrics)
        self.quotas = create_quota_managers(
            config.quotas,
            self.clock,
            max_quota_entities=config.limits.max_quota_entities,
            callback_configs=config.callback_configs(),
        )
        users_file = config.security.sasl_users_file
        credentials = SaslCredentials.load(users_file) if users_file else SaslCredentials({})
        image = ConfigImage(store, self.quotas, credentials=credentials)
        for entity, key, value in config.client_quotas:
            image.apply(QuotaChange(entity, key, value))
        config_log = ConfigLog(
            f"{config.data_root.rstrip('/')}/{CONFIG_LOG_TABLE}",
            replica_id=config.replica_id,
            storage_options=config.storage_options,
        )
        self.config_log = ConfigLogFollower(
            config_log, image, config.admin.config_log_poll_s, now_ms=self.clock.now_ms
        )
        self.admin = SinkAdmin(
            self.config_log,
            self.manager,
            self.quotas,
            SuperUserAuthorizer(config.security.super_users),
            self.clock.now_ms,
            strict_mutation_quota=config.admin.strict_mutation_quota,
        )
        self.replicas = ReplicaDirectory(
            config.data_root,
            replica_id=config.replica_id,
            cluster_id=config.kafka_listener.cluster_id,
            quotas=self.quotas,
            now_ms=self.clock.now_ms,
            heartbeat_ms=config.admin.replica_heartbeat_ms,
            session_timeout_ms=config.admin.replica_session_timeout_ms,
            storage_options=config.storage_options,
        )
        self.exporter = _exporter(config)
        self.quota_samples = _quota_sample_recorder(config)
        self.loop_lag = LoopLagMonitor()
        self.pipeline = TelemetryPipeline(
            self.manager,
            self.quotas,
            self.exporter,
            clock=self.clock,
            admission=Admission(config.server.max_concurrent_requests, config.server.overload_retry_after_ms),
            authenticator=config.security.authenticator(),
            max_decompressed_bytes=config.server.max_decompressed_bytes,
            max_hold_delay_ms=config.server.max_hold_delay_ms,
            max_otlp_hold_delay_ms=config.server.max_otlp_hold_delay_ms,
            limits=config.limits,
            decode_processes=config.server.decode_processes,
            otlp_tolerant_intake=config.server.otlp_tolerant_intake,
        )
        self.descriptors = self._share_descriptors()
        self.request_memory = RequestMemory(config.server.request_memory_limits())
        self.grpc_port = 0
        self.http_port = 0
        self.kafka_port: int | None = None
        self.kafka: KafkaListener | None = None
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._http_site: QuotaGatedSite | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sampling: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        server = self.config.server
        await self.config_log.catch_up()  # serve with every change made so far
        await self.replicas.heartbeat()  # and with the quotas' share of the live replicas
        await self.exporter.start()
        grpc_limits = server
        if self.descriptors.reduced or server.grpc_max_connections is None:  # null: its share
            grpc_limits = replace(server, grpc_max_connections=self.descriptors.shares[GRPC_SOCKETS])
        self._grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", server.grpc_max_receive_message_bytes),
                *grpc_limits.grpc_options(),
            ]
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
            metrics=metrics_exposition(
                self.manager,
                self.quotas,
                self.pipeline.request_metrics,
                self.clock.now_ms,
                collectors=(self.loop_lag, self.request_memory),
            ),
            max_body_bytes=self.config.http_max_body_bytes(),
            request_memory=self.request_memory,
        )
        app.add_routes(admin_routes(self.admin, request_client))
        timeouts = server.http_timeouts()
        # aiohttp waits for its handlers within the shutdown budget (not its own 60 s); ``stop`` aborts
        # the requests still arriving once the grace period is over
        self._http = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=shutdown_budget_s(server),
            **SERVER_OPTIONS,
            **timeouts.runner_options(),
        )
        await self._http.setup()
        # every HTTP connection passes the connection quotas (CONN-3) before aiohttp or TLS sees it
        listener = register_http_listener(
            self.quotas.connections, max_connections=server.http_max_connections
        )
        site = QuotaGatedSite(
            self._http,
            self.quotas.connections,
            self.clock,
            server.host,
            server.http_port,
            listener=listener,
            ssl_context=self._ssl_context(),
            timeouts=timeouts,
            gate_limits=replace(server.gate_limits(), max_sockets=self.descriptors.shares[HTTP_LISTENER]),
        )
        await site.start()
        self._http_site = site
        self.http_port = site.port
        await self._start_kafka_listener()
        # the listeners are registered: the config log's dynamic broker configs apply from now on
        self.config_log.image.broker_configs.bind(
            self.quotas.connections, self.quotas.callback, self.config.callback_configs()
        )
        self._tasks = [
            asyncio.create_task(self.quotas.run_reapers(self.clock), name="quota-reapers"),
            asyncio.create_task(self._expire_periodically(), name="expiry"),
            asyncio.create_task(self.config_log.run(), name="config-log"),
            asyncio.create_task(self.replicas.run(), name="replica-heartbeat"),
            asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
        ]
        if self.quota_samples is not None:
            sample = self.quota_samples.run(self._quota_snapshot, self.clock.now_ms, self._until_stopping)
            self._sampling = asyncio.create_task(sample, name="quota-samples")

    async def _start_kafka_listener(self) -> None:
        kafka = self.config.kafka_listener
        if kafka.port is None:
            return
        node = NodeInfo(kafka.node_id, kafka.cluster_id, kafka.advertised_host, kafka.advertised_port)
        self.kafka = KafkaListener(
            KafkaApis(self.pipeline, self.admin, node),
            self.manager,
            self.quotas.connections,
            self.clock,
            limits=ListenerLimits(
                socket_request_max_bytes=kafka.socket_request_max_bytes,
                non_push_request_max_bytes=kafka.non_push_request_max_bytes,
                connections_max_idle_ms=kafka.connections_max_idle_ms,
                request_read_timeout_ms=kafka.request_read_timeout_ms,
            ),
            ssl_context=self._ssl_context() if kafka.uses_tls(self.config.server) else None,
            max_connections=kafka.max_connections,
            max_connection_creation_rate=kafka.max_connection_creation_rate,
            gate_limits=replace(
                self.config.server.gate_limits(), max_sockets=self.descriptors.shares[KAFKA_LISTENER]
            ),
            sasl=self._sasl_settings(),
            request_memory=self.request_memory,
        )
        await self.kafka.start(self.config.server.host, kafka.port)
        self.kafka_port = self.kafka.port

    def _share_descriptors(self) -> DescriptorShares:
        """Each listener's share of the open-file limit (``ingest.transports.descriptors``): all its
        connection limits allow, unless the limit is too low for them (then said once)."""
        server, kafka = self.config.server, self.config.kafka_listener
        wanted = {
            GRPC_SOCKETS: server.grpc_max_connections or DEFAULT_LISTENER_MAX_CONNECTIONS,
            HTTP_LISTENER: server.http_max_connections + server.max_waiting_connections,
        }
        if kafka.port is not None:
            wanted[KAFKA_LISTENER] = kafka.max_connections + server.max_waiting_connections
        shares = share_descriptors(open_file_limit(), descriptors_in_use(), wanted)
        if shares.reduced:
            log.warning(shares.message())
        return shares

    def _quota_snapshot(self) -> list[QuotaSample]:
        """The quota sensors now, and the answers by quota entity since the previous snapshot."""
        samples = quota_samples(self.quotas, self.clock.now_ms())
        return samples + self.pipeline.request_metrics.drain_entity_counts()

    async def _until_stopping(self, seconds: float) -> None:
        """The sampler's pause: ``seconds``, or less when the sink stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _sasl_settings(self) -> SaslSettings | None:
        kafka = self.config.kafka_listener
        if not kafka.uses_sasl(self.config.server):
            return None
        return SaslSettings(
            kafka.sasl_enabled_mechanisms,
            self.config_log.image.credentials,  # the users file's, under the config log's SCRAM credentials
            connections_max_reauth_ms=kafka.connections_max_reauth_ms,
            failed_authentication_delay_ms=kafka.connection_failed_authentication_delay_ms,
        )

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
            self.pipeline.authenticator.refresh_tokens()

    async def stop(self) -> bool:
        """Stop every listener at once, give requests in flight the grace period, then flush within the
        flush bound (see the module docstring); True if everything finished within the bound."""
        server = self.config.server
        self.pipeline.holds.release_all()  # held requests are handled now, not cut off at the grace period
        listeners = [asyncio.create_task(stopping) for stopping in self._stop_listeners(server)]
        if listeners:
            await asyncio.wait(listeners, timeout=server.shutdown_grace_s)
        if self._http_site is not None:
            aborted = self._http_site.abort_receiving()
            if aborted:
                log.info("shutdown: %d HTTP requests still arriving after the grace period aborted", aborted)
        flushed = True
        try:
            async with asyncio.timeout(server.shutdown_flush_s):
                await self._flush(listeners)
        except TimeoutError:
            flushed = False
            log.error(
                "shutdown: not flushed within server.shutdown_flush_s (%s s); pushes not flushed were "
                "never acknowledged",
                server.shutdown_flush_s,
            )
        for task in listeners:
            task.cancel()  # past the bound only: they are done otherwise
        for task in self._tasks:
            task.cancel()
        self.quotas.close()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.replicas.withdraw()
        return flushed

    def _stop_listeners(self, server: ServerConfig) -> list[Coroutine[Any, Any, None]]:
        """Each listener's stop: it stops accepting and closes idle connections as soon as it runs, and
        cuts requests still in flight at the end of the whole budget (never reached unless the flush
        runs over its bound, when the process exits anyway)."""
        budget = shutdown_budget_s(server)
        stopping: list[Coroutine[Any, Any, None]] = []
        if self._grpc is not None:
            stopping.append(self._grpc.stop(budget))
        if self.kafka is not None:
            stopping.append(self.kafka.stop(budget))
        if self._http is not None:
            stopping.append(self._http.cleanup())  # its shutdown_timeout is the budget
        return stopping

    async def _flush(self, listeners: list[asyncio.Task[None]]) -> None:
        """Shut the exporter down (later exports answer RETRYABLE; what it holds is committed and
        answered), wait for the listeners' last answers, stop the decoders, record the last quota
        snapshot."""
        await self.exporter.shutdown()
        if listeners:
            await asyncio.wait(listeners)
        await self.pipeline.close()
        self._stopping.set()
        if self.quota_samples is not None and self._sampling is not None:
            self.quota_samples.stop()
            await self._sampling  # its snapshot in progress, then none
            # the last snapshot, so the table ends where the sink did
            await self.quota_samples.record(self._quota_snapshot(), self.clock.now_ms())


def raise_open_file_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (often 1024 against 1048576 on a developer
    host), so that sockets up to the connection limits never make the sink's own files (Delta commits,
    the config log) fail with EMFILE; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. an unlimited hard limit where the kernel caps it
            log.warning("Could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
            return soft
        soft = hard
    return soft


def freeze_start_up_objects() -> int:
    """Move every object alive after start-up (modules, classes, schemas, the configuration: most of
    the process's objects, and as long-lived as it) out of the garbage collector's sight
    (``gc.freeze``), so that a full collection walks only what serving made since: measured with the
    hostile benchmark's fleet, the loop's worst stall went from 60-75 ms, every full collection, to
    12-16 ms. Objects frozen are still freed by reference counting; how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def serve(config: SinkConfig) -> int:
    """Run until SIGTERM or SIGINT; 0 after a clean shutdown, else ``SHUTDOWN_INCOMPLETE_EXIT_CODE``
    (the process exits at once, see the module docstring)."""
    raise_open_file_limit()
    sink = Sink(config)
    await sink.start()
    freeze_start_up_objects()
    host = config.server.host
    kafka = f", Kafka on {host}:{sink.kafka_port}" if sink.kafka_port is not None else ""
    print(
        f"telemetry-sink serving gRPC on {host}:{sink.grpc_port}, HTTP on {host}:{sink.http_port}{kafka}, "
        f"landing in {getattr(sink.exporter, 'table_uri', config.exporter.name)}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    if await sink.stop():
        return 0
    # a commit may still hang in a worker thread, which the interpreter would wait for before exiting
    logging.shutdown()
    sys.stdout.flush()
    os._exit(SHUTDOWN_INCOMPLETE_EXIT_CODE)
