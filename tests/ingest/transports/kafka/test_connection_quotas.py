"""Connection quotas at the Kafka listener over real loopback sockets: docs/rules.md's CONN worked examples
(CONN-E1 per-IP count, CONN-E2 IP creation rate and its updates, CONN-E3 nothing recorded for a
rejected connection, CONN-E4 the broker-wide count) and the listener's own limits. Time is a stepped
fake clock: a connection that must wait waits on it, and the test moves it on."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from ingest.transports.kafka import KAFKA_LISTENER
from quotas import ClientQuotaEntity
from tests.support.clock import SteppedClock, eventually
from tests.support.kafka import IP, KafkaClient, KafkaServed, serving_kafka

pytestmark = pytest.mark.integration


async def _served(client: KafkaClient) -> bool:
    return bool((await client.request(ApiVersionsRequest())).error_code == ErrorCode.none)


async def _connect_all(served: KafkaServed, n: int) -> list[KafkaClient]:
    clients = [await served.connect() for _ in range(n)]
    for client in clients:
        assert await _served(client)
    return clients


async def test_CONN_E1_per_ip_count_closes_the_extra_connections_and_a_close_frees_a_slot(
    tmp_path: Path,
) -> None:
    async with serving_kafka(tmp_path, {"max.connections.per.ip": 17}) as served:
        clients = await _connect_all(served, 17)
        for _ in range(2):  # the 18th and 19th count themselves, are closed, and are taken back
            assert await (await served.connect()).closed_by_server()
        assert served.connections.get(IP) == 17
        for client in clients[:4]:
            client.close()
        await eventually(lambda: served.connections.get(IP) == 13)
        await _connect_all(served, 4)
        assert served.connections.get(IP) == 17
        assert served.connections.listener_count(KAFKA_LISTENER) == 17
        assert all([await _served(client) for client in clients[4:]])


async def test_CONN_E2_ip_rate_quota_rejects_the_21st_and_follows_quota_updates(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, {"quota.window.num": 2}, clock) as served:
        served.quotas.alter(ClientQuotaEntity(ip=IP), "connection_creation_rate", 20)
        await _connect_all(served, 20)
        throttled = await served.connect()  # rate 21.0 over 1 s against 20: 50 ms
        await eventually(lambda: clock.pending == [51])  # held open, unread, until strictly past it
        assert served.connections.get(IP) == 20
        assert served.metric("connection-accept-rate", ip=IP) == 20.0  # the 21st was un-recorded
        assert served.metric("ip-connection-accept-throttle-time", listener=KAFKA_LISTENER) == 50

        served.quotas.alter(ClientQuotaEntity(ip=IP), "connection_creation_rate", 30)  # same instant
        await _connect_all(served, 10)
        assert served.connections.get(IP) == 30
        over = await served.connect()
        await eventually(lambda: len(clock.pending) == 2)
        clock.advance(max(clock.pending))
        assert await throttled.closed_by_server()
        assert await over.closed_by_server()

        served.quotas.alter(ClientQuotaEntity(ip=IP), "connection_creation_rate", None)
        await _connect_all(served, 40)  # no IP quota: every connection is accepted
        assert served.connections.get(IP) == 70


async def test_CONN_E3_an_ip_quota_of_zero_rejects_and_leaves_no_trace_in_the_rates(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, {"quota.window.num": 2}, clock) as served:
        served.connections.update_ip_connection_rate_quota(IP, 0)  # below what an admin may set (QUO-2)
        rejected = await served.connect()
        await eventually(lambda: clock.pending == [1001])  # bound 0: infinite, capped at the window
        assert served.metric("connection-accept-rate", ip=IP) == 0.0
        assert served.metric("connection-accept-rate", listener=KAFKA_LISTENER) == 0.0
        assert served.metric("broker-connection-accept-rate") == 0.0
        clock.advance(1001)
        assert await rejected.closed_by_server()
        assert served.connections.total == 0


async def test_CONN_E4_the_broker_wide_count_makes_the_next_accept_wait_for_a_close(tmp_path: Path) -> None:
    clock = SteppedClock()
    async with serving_kafka(tmp_path, {"max.connections": 3}, clock) as served:
        clients = await _connect_all(served, 3)
        waiting = await served.connect()
        correlation_id = waiting.send(ApiVersionsRequest())
        await eventually(lambda: served.listener.gate.waiting == 1)
        assert served.connections.total == 3
        assert served.connections.max_connections_exceeded(KAFKA_LISTENER) is False

        clients[0].close()
        answer = await waiting.response(18, 0, correlation_id)  # admitted once a slot was freed
        assert answer.error_code == ErrorCode.none
        assert served.connections.total == 3


async def test_CONN_1_listener_max_connections_makes_the_next_accept_wait_for_a_close(tmp_path: Path) -> None:
    async with serving_kafka(tmp_path, max_connections=2) as served:
        first, _ = await _connect_all(served, 2)
        third = await served.connect()
        correlation_id = third.send(ApiVersionsRequest())
        await eventually(lambda: served.listener.gate.waiting == 1)
        first.close()
        assert (await third.response(18, 0, correlation_id)).error_code == ErrorCode.none
        assert served.connections.listener_count(KAFKA_LISTENER) == 2


async def test_CONN_3_listener_creation_rate_makes_the_accept_wait_for_the_clock(tmp_path: Path) -> None:
    clock = SteppedClock()
    keys = {"quota.window.num": 2}
    async with serving_kafka(tmp_path, keys, clock, max_connection_creation_rate=5) as served:
        await _connect_all(served, 5)
        sixth = await served.connect()  # rate 6.0 over 1 s against 5: (6 - 5) / 5 x 1000 = 200 ms
        correlation_id = sixth.send(ApiVersionsRequest())
        await eventually(lambda: clock.pending == [200])
        assert served.metric("connection-accept-throttle-time", listener=KAFKA_LISTENER) == 200
        clock.advance(200)
        assert (await sixth.response(18, 0, correlation_id)).error_code == ErrorCode.none
