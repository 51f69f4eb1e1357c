"""The Kafka wire listener on loopback over the real pipeline and admin, and a raw Kafka client built
on ``kio``'s schemas (for what no client library here sends: client-quota RPCs, bad frames, chosen
versions)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import ssl
import struct
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.index import load_response_schema
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from exporters.in_memory import InMemoryExporter
from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower
from ingest.admin.operations import SinkAdmin, SuperUserAuthorizer
from ingest.push.pipeline import TelemetryPipeline
from ingest.transports.kafka import KafkaApis, KafkaListener, ListenerLimits, NodeInfo
from quotas import ConnectionQuotas, MetricName, QuotaConfig, QuotaManagers, create_quota_managers
from subscriptions import ClientMetricsManager, SubscriptionStore
from tests.support.clock import FakeClock

IP = "127.0.0.1"
ADMIN = "User:ANONYMOUS"
"""The listener's principal without TLS; the served sink makes it a super user."""


def encode_request(request: Any, correlation_id: int, client_id: str | None = "kio-test") -> bytes:
    """A kio request entity as a size-prefixed frame, with the header version its schema names."""
    header_schema = RequestHeaderV2 if request.__header_schema__ is RequestHeaderV2 else RequestHeaderV1
    header = header_schema(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header)
    entity_writer(type(request))(buffer, request)
    body = buffer.getvalue()
    return struct.pack(">i", len(body)) + body


def push_request(
    instance_id: uuid.UUID | None, subscription_id: int, metrics: bytes, *, terminating: bool = False
) -> PushTelemetryRequest:
    """A PushTelemetry v0 request, uncompressed."""
    return PushTelemetryRequest(
        client_instance_id=instance_id,
        subscription_id=i32(subscription_id),
        terminating=terminating,
        compression_type=i8(0),
        metrics=metrics,
    )


class KafkaClient:
    """One connection speaking Kafka's framing with kio's entities."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._correlation = itertools.count(1)

    @classmethod
    async def connect(cls, port: int, ssl_context: ssl.SSLContext | None = None) -> KafkaClient:
        reader, writer = await asyncio.open_connection(IP, port, ssl=ssl_context)
        return cls(reader, writer)

    def send_raw(self, frame: bytes) -> None:
        """Bytes as they are (no size prefix added)."""
        self.writer.write(frame)

    def send(
        self, request: Any, client_id: str | None = "kio-test", correlation_id: int | None = None
    ) -> int:
        """Frame and send a kio request entity; its correlation id."""
        correlation_id = next(self._correlation) if correlation_id is None else correlation_id
        self.writer.write(encode_request(request, correlation_id, client_id))
        return correlation_id

    async def frame(self) -> bytes:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 30))  # hang guard
        return await self.reader.readexactly(size)

    async def response(self, api_key: int, api_version: int, correlation_id: int) -> Any:
        schema = load_response_schema(api_key, api_version)
        frame = await self.frame()
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        assert header.correlation_id == correlation_id
        body, size = entity_reader(schema)(frame, offset)  # kio gives what it read, not where it ended
        assert offset + size == len(frame)
        return body

    async def request(self, request: Any, client_id: str | None = "kio-test") -> Any:
        correlation_id = self.send(request, client_id)
        return await self.response(request.__api_key__, request.__version__, correlation_id)

    async def closed_by_server(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 30) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.writer.close()


@dataclass
class KafkaServed:
    listener: KafkaListener
    pipeline: TelemetryPipeline
    admin: SinkAdmin
    exporter: InMemoryExporter
    clock: FakeClock
    clients: list[KafkaClient] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def quotas(self) -> QuotaManagers:
        return self.pipeline.quotas

    @property
    def connections(self) -> ConnectionQuotas:
        return self.quotas.connections

    @property
    def manager(self) -> ClientMetricsManager:
        return self.pipeline.manager

    async def connect(self, ssl_context: ssl.SSLContext | None = None) -> KafkaClient:
        client = await KafkaClient.connect(self.port, ssl_context)
        self.clients.append(client)  # closed with the listener if the test did not
        return client

    def metric(self, name: str, group: str = "socket-server-metrics", **tags: str) -> float:
        return self.quotas.values(self.clock.now_ms())[MetricName.of(name, group, tags)]


@asynccontextmanager
async def serving_kafka(
    tmp_path: Path,
    keys: Mapping[str, object] | None = None,
    clock: FakeClock | None = None,
    *,
    interval_ms: int = 1000,
    limits: ListenerLimits | None = None,
    ssl_context: ssl.SSLContext | None = None,
    node: NodeInfo | None = None,
    super_users: tuple[str, ...] = (ADMIN,),
    **listener_options: Any,
) -> AsyncIterator[KafkaServed]:
    """The listener on loopback: every Kafka client metric every ``interval_ms``, quotas from Kafka's
    ``keys``, time from ``clock``, pushes kept by an in-memory exporter, the config log in ``tmp_path``."""
    clock = clock or FakeClock()
    quotas = create_quota_managers(QuotaConfig.from_mapping(keys or {}), clock)
    store = SubscriptionStore()
    store.update("kafka", {"metrics": "org.apache.kafka.", "interval.ms": interval_ms})
    manager = ClientMetricsManager(store)
    sasl = listener_options.get("sasl")
    image = (
        ConfigImage(store, quotas)
        if sasl is None
        else ConfigImage(store, quotas, credentials=sasl.credentials)
    )
    follower = ConfigLogFollower(ConfigLog(str(tmp_path / "config_log"), replica_id="r0"), image)
    admin = SinkAdmin(follower, manager, quotas, SuperUserAuthorizer(super_users), clock.now_ms)
    exporter = InMemoryExporter()
    pipeline = TelemetryPipeline(manager, quotas, exporter, clock=clock)
    listener = KafkaListener(
        KafkaApis(pipeline, admin, node or NodeInfo(7, "test-cluster", None, None)),
        manager,
        quotas.connections,
        clock,
        limits=limits,
        ssl_context=ssl_context,
        **listener_options,
    )
    await listener.start(IP, 0)
    reapers = asyncio.create_task(quotas.run_reapers(clock))
    served = KafkaServed(listener, pipeline, admin, exporter, clock)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        await listener.stop()
        await pipeline.close()
        quotas.close()
        reapers.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reapers
