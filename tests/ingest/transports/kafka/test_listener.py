"""The Kafka listener's connection lifecycle: a client that goes away while muted is closed and its
instances evicted at once (PD-8, QUO-14), stopping closes idle connections at once while a request
in flight is answered within the grace period, and a request larger than its API may send closes the
connection once its api key is read, before its body (F10)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest

from exporters import ExportResult, TelemetryPush
from exporters.in_memory import InMemoryExporter
from ingest.transports.kafka import ListenerLimits
from quotas import ClientQuotaEntity
from tests.support.clock import SteppedClock, eventually
from tests.support.kafka import IP, KafkaClient, encode_request, push_request, serving_kafka
from tests.support.otlp import metrics_data

pytestmark = pytest.mark.integration


class HeldExporter(InMemoryExporter):
    """Lands a push only once the test lets it (a slow store, for a request in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.exporting = asyncio.Event()
        self.release = asyncio.Event()

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.exporting.set()
        await self.release.wait()
        return await super().export(push)


async def _subscribed(client: KafkaClient) -> tuple[uuid.UUID, int]:
    got = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=None))
    assert got.error_code == ErrorCode.none
    return got.client_instance_id, got.subscription_id


async def test_PD_8_a_client_that_disconnects_while_muted_is_closed_and_evicted_at_once(
    tmp_path: Path,
) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, {"quota.window.num": 2}, clock) as served:
        served.quotas.alter(ClientQuotaEntity(client_id="<default>"), "producer_byte_rate", 100.0)
        client = await served.connect()
        instance_id, subscription_id = await _subscribed(client)
        pushed = await client.request(push_request(instance_id, subscription_id, metrics_data(points=40)))
        assert pushed.throttle_time.total_seconds() > 1  # muted now, for longer than this test runs
        client.close()
        await eventually(lambda: served.manager.instance(instance_id) is None)
        await eventually(lambda: served.connections.get(IP) == 0)
        assert served.listener.connections == 0


async def test_stopping_closes_idle_connections_and_answers_the_request_in_flight(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path) as served:
        held = HeldExporter()
        served.pipeline.exporter = held
        idle = await served.connect()
        assert (await idle.request(ApiVersionsRequest())).error_code == ErrorCode.none
        pushing = await served.connect()
        instance_id, subscription_id = await _subscribed(pushing)
        correlation_id = pushing.send(push_request(instance_id, subscription_id, metrics_data()))
        await held.exporting.wait()

        stopping = asyncio.create_task(served.listener.stop(grace_s=30))
        assert await idle.closed_by_server()  # closed at once
        assert not stopping.done()
        held.release.set()
        answer = await pushing.response(72, 0, correlation_id)
        assert answer.error_code == ErrorCode.none  # answered, and landed, before its connection closed
        assert len(held.pushes) == 1
        assert await pushing.closed_by_server()
        await stopping
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(IP, served.port)  # no longer listening


async def test_F10_a_request_over_its_apis_size_is_refused_from_its_api_key_before_its_body(
    tmp_path: Path,
) -> None:
    limits = ListenerLimits(socket_request_max_bytes=4 * 1024 * 1024, non_push_request_max_bytes=64 * 1024)
    async with serving_kafka(tmp_path, limits=limits) as served:
        bystander = await served.connect()
        big_metadata = await served.connect()
        big_metadata.send_raw(struct.pack(">ih", 64 * 1024 + 1, 3))  # the size and api key, nothing more
        assert await big_metadata.closed_by_server()  # not waiting for the body it announced

        pushing = await served.connect()
        instance_id, subscription_id = await _subscribed(pushing)
        push = push_request(instance_id, subscription_id, metrics_data(points=4000))
        assert len(encode_request(push, 1)) > 64 * 1024  # only a push may be that large
        pushed = await pushing.request(push)
        assert pushed.error_code == ErrorCode.none
        assert (await bystander.request(ApiVersionsRequest())).error_code == ErrorCode.none


def test_F10_only_push_telemetry_gets_socket_request_max_bytes() -> None:
    limits = ListenerLimits(socket_request_max_bytes=8 << 20, non_push_request_max_bytes=1 << 20)
    assert limits.request_max_bytes(72) == 8 << 20
    assert limits.request_max_bytes(3) == limits.request_max_bytes(None) == 1 << 20
    assert ListenerLimits(socket_request_max_bytes=1000).request_max_bytes(3) == 1000  # never above it
