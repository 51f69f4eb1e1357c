"""CONN-1..CONN-6 and the worked examples CONN-E1..CONN-E4."""

from __future__ import annotations

import asyncio

import pytest

from quotas.config import ConnectionQuotaConfig, parse_per_ip_overrides
from quotas.connection_quotas import ConnectionQuotas, ConnectionThrottledError, TooManyConnectionsError
from quotas.java import INT_MAX
from quotas.sensor import Metrics
from tests.support.clock import T0, FakeClock

IP = "192.168.1.1"
OTHER_IP = "192.168.1.2"


def _quotas(clock: FakeClock | None = None, **config: object) -> ConnectionQuotas:
    quotas = ConnectionQuotas(
        ConnectionQuotaConfig(**config),  # type: ignore[arg-type]
        Metrics(),
        clock or FakeClock(),
        inter_broker_listener="REPLICATION",
    )
    for name in ("EXTERNAL", "REPLICATION", "ADMIN"):
        quotas.add_listener(name)
    return quotas


def test_CONN_1_defaults_are_kafkas() -> None:
    config = ConnectionQuotaConfig()
    assert config.max_connections == config.max_connections_per_ip == INT_MAX
    assert config.max_connection_creation_rate == INT_MAX
    assert config.max_connections_per_ip_overrides == {}
    assert config.validate() == []
    assert ConnectionQuotaConfig(max_connections=-1).validate()


def test_CONN_1_per_ip_overrides_parse() -> None:
    assert parse_per_ip_overrides("127.0.0.1:5, [::1]:7, 10.0.0.1:0") == {
        "127.0.0.1": 5,
        "::1": 7,
        "10.0.0.1": 0,
    }
    assert parse_per_ip_overrides("") == {}
    with pytest.raises(ValueError, match="host:count"):
        parse_per_ip_overrides("127.0.0.1")


async def test_CONN_E1_per_ip_count() -> None:
    quotas = _quotas(max_connections_per_ip=17)
    for _ in range(17):
        await quotas.inc("EXTERNAL", IP)
    for _ in range(2):
        with pytest.raises(TooManyConnectionsError):
            await quotas.inc("EXTERNAL", IP)
    assert quotas.get(IP) == 19  # counted until the acceptor closes them
    await quotas.inc("EXTERNAL", OTHER_IP)
    for _ in range(4):
        quotas.dec("EXTERNAL", IP)
    assert quotas.get(IP) == 15
    await quotas.inc("EXTERNAL", IP)
    await quotas.inc("EXTERNAL", IP)
    assert quotas.get(IP) == 17


async def test_CONN_1_per_ip_override_beats_the_default() -> None:
    quotas = _quotas(max_connections_per_ip=1, max_connections_per_ip_overrides={IP: 3})
    for _ in range(3):
        await quotas.inc("EXTERNAL", IP)
    with pytest.raises(TooManyConnectionsError):
        await quotas.inc("EXTERNAL", IP)
    await quotas.inc("EXTERNAL", OTHER_IP)
    with pytest.raises(TooManyConnectionsError):
        await quotas.inc("EXTERNAL", OTHER_IP)


async def test_CONN_E2_CONN_6_ip_rate_quota_updates() -> None:
    quotas = _quotas(num_quota_samples=2)
    quotas.update_ip_connection_rate_quota(IP, 20)
    for _ in range(20):
        await quotas.inc("EXTERNAL", IP)
    with pytest.raises(ConnectionThrottledError) as info:
        await quotas.inc("EXTERNAL", IP)
    assert info.value.throttle_ms == 50
    assert quotas.get(IP) == 20
    quotas.update_ip_connection_rate_quota(IP, 30)
    for _ in range(10):
        await quotas.inc("EXTERNAL", IP)
    with pytest.raises(ConnectionThrottledError):
        await quotas.inc("EXTERNAL", IP)
    assert quotas.get(IP) == 30
    quotas.update_ip_connection_rate_quota(IP, None)
    for _ in range(50):
        await quotas.inc("EXTERNAL", IP)
    for _ in range(40):
        await quotas.inc("EXTERNAL", OTHER_IP)
    quotas.update_ip_connection_rate_quota(None, 20)  # the default, for an IP with no rate history
    for _ in range(20):
        await quotas.inc("EXTERNAL", OTHER_IP)
    with pytest.raises(ConnectionThrottledError):
        await quotas.inc("EXTERNAL", OTHER_IP)


@pytest.mark.parametrize("listener", ["EXTERNAL", "REPLICATION"])
async def test_CONN_E3_rejected_ip_connection_leaves_no_trace(listener: str) -> None:
    clock = FakeClock()
    quotas = _quotas(clock)
    quotas.update_ip_connection_rate_quota(IP, 0)
    with pytest.raises(ConnectionThrottledError) as info:
        await quotas.inc(listener, IP)
    assert info.value.throttle_ms == 1000  # bound 0: infinite, capped at one window
    values = {name.name + str(name.tags): v for name, v in quotas.metrics.values(clock.now_ms()).items()}
    assert values["connection-accept-rate(('ip', '192.168.1.1'),)"] == 0.0
    assert values[f"connection-accept-rate(('listener', '{listener}'),)"] == 0.0
    assert values["broker-connection-accept-rate()"] == 0.0
    assert quotas.get(IP) == 0


def test_CONN_3_throttled_socket_closes_strictly_after_the_throttle() -> None:
    error = ConnectionThrottledError(IP, T0, 100)
    assert not error.should_close(T0 + 100)
    assert error.should_close(T0 + 101)


async def test_CONN_E4_CONN_2_CONN_4_broker_wide_count_and_protected_listener() -> None:
    quotas = _quotas(max_connections=800)
    for n in range(800):
        await quotas.inc("EXTERNAL", f"10.0.{n // 250}.{n % 250}")
    assert not quotas.max_connections_exceeded("EXTERNAL")
    blocked = asyncio.create_task(quotas.inc("EXTERNAL", "10.9.9.9"))
    await asyncio.sleep(0)
    assert not blocked.done()
    quotas.dec("EXTERNAL", "10.0.0.0")
    await blocked
    assert quotas.total == 800
    await quotas.inc("REPLICATION", "10.8.0.1")  # protected: beyond the broker-wide limit
    await quotas.inc("REPLICATION", "10.8.0.2")
    assert quotas.total == 802
    assert quotas.max_connections_exceeded("EXTERNAL")
    assert not quotas.max_connections_exceeded("REPLICATION")
    admin = asyncio.create_task(quotas.inc("ADMIN", "10.7.0.1"))
    for k in range(2):
        quotas.dec("EXTERNAL", f"10.0.0.{k + 1}")
        await asyncio.sleep(0)
        assert not admin.done()
    quotas.dec("EXTERNAL", "10.0.0.3")
    await admin
    assert quotas.listener_count("ADMIN") == 1


def test_CONN_2_inter_broker_listener_is_protected_only_with_other_listeners() -> None:
    quotas = ConnectionQuotas(
        ConnectionQuotaConfig(), Metrics(), FakeClock(), inter_broker_listener="REPLICATION"
    )
    quotas.add_listener("REPLICATION")
    assert not quotas.protected("REPLICATION")
    quotas.add_listener("EXTERNAL")
    assert quotas.protected("REPLICATION")
    assert not quotas.protected("EXTERNAL")


async def test_CONN_3_listener_rate_makes_the_acceptor_wait_then_accepts() -> None:
    clock = FakeClock()
    quotas = ConnectionQuotas(ConnectionQuotaConfig(num_quota_samples=2), Metrics(), clock)
    quotas.add_listener("EXTERNAL", max_connection_creation_rate=2)
    await quotas.inc("EXTERNAL", IP)
    await quotas.inc("EXTERNAL", IP)
    await quotas.inc("EXTERNAL", IP)  # rate 3 > 2: throttle round(1/2 x 1000) = 500, then accepted
    assert clock.now_ms() == T0 + 500
    assert quotas.get(IP) == 3
    throttle_avg = next(
        v
        for n, v in quotas.metrics.values(clock.now_ms()).items()
        if n.name == "connection-accept-throttle-time"
    )
    assert throttle_avg == 500.0


async def test_CONN_3_broker_rate_counts_for_every_unprotected_listener() -> None:
    clock = FakeClock()
    quotas = _quotas(clock, num_quota_samples=2, max_connection_creation_rate=1)
    await quotas.inc("EXTERNAL", IP)
    await quotas.inc("ADMIN", IP)  # broker rate 2 > 1: waits
    assert clock.now_ms() > T0
    before = clock.now_ms()
    await quotas.inc("REPLICATION", IP)  # protected: the broker rate does not apply
    assert clock.now_ms() == before


async def test_CONN_3_listener_connection_limit_blocks_until_a_close() -> None:
    quotas = ConnectionQuotas(ConnectionQuotaConfig(), Metrics(), FakeClock())
    quotas.add_listener("EXTERNAL", max_connections=1)
    await quotas.inc("EXTERNAL", IP)
    waiting = asyncio.create_task(quotas.inc("EXTERNAL", OTHER_IP))
    await asyncio.sleep(0)
    assert not waiting.done()
    quotas.dec("EXTERNAL", IP)
    await waiting
    assert quotas.get(OTHER_IP) == 1


def test_CONN_3_dec_of_an_unknown_ip_is_an_error() -> None:
    quotas = _quotas()
    with pytest.raises(ValueError, match="no connections"):
        quotas.dec("EXTERNAL", IP)
    with pytest.raises(ValueError, match="unknown listener"):
        asyncio.run(quotas.inc("NOPE", IP))


async def test_CONN_3_dec_after_the_listener_was_removed_still_frees_the_counts() -> None:
    quotas = _quotas()
    await quotas.inc("ADMIN", IP)
    quotas.remove_listener("ADMIN")
    quotas.dec("ADMIN", IP)
    assert (quotas.get(IP), quotas.total) == (0, 0)


async def test_CONN_2_adding_a_listener_wakes_acceptors_it_unblocks() -> None:
    quotas = ConnectionQuotas(
        ConnectionQuotaConfig(max_connections=1), Metrics(), FakeClock(), inter_broker_listener="REPL"
    )
    quotas.add_listener("REPL")
    await quotas.inc("REPL", IP)
    blocked = asyncio.create_task(quotas.inc("REPL", OTHER_IP))
    await asyncio.sleep(0)
    assert not blocked.done()
    quotas.add_listener("EXTERNAL")  # REPL is now protected: the broker-wide limit no longer applies
    await asyncio.wait_for(blocked, 1)


async def test_CONN_5_sensor_names_and_ip_sensor_expiry() -> None:
    clock = FakeClock()
    quotas = _quotas(clock)
    quotas.update_ip_connection_rate_quota(IP, 100)
    await quotas.inc("EXTERNAL", IP)
    names = {s.name for s in quotas.metrics.sensors()}
    assert {
        "Connection-Accept-Rate",
        "Connection-Accept-Rate-EXTERNAL",
        f"Connection-Accept-Rate-{IP}",
    } <= names
    assert quotas.metrics.expire(T0 + 3600_000) == []
    assert quotas.metrics.expire(T0 + 3600_001) == [f"Connection-Accept-Rate-{IP}"]
    clock.advance(3600_002)
    await quotas.inc("EXTERNAL", IP)  # a fresh sensor
    assert f"Connection-Accept-Rate-{IP}" in {s.name for s in quotas.metrics.sensors()}


async def test_CONN_3_ipv6_forms_are_one_address() -> None:
    quotas = _quotas(max_connections_per_ip=1)
    await quotas.inc("EXTERNAL", "::1")
    with pytest.raises(TooManyConnectionsError):
        await quotas.inc("EXTERNAL", "0:0:0:0:0:0:0:1")
