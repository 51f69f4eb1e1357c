"""TEL-12: the LRU instance cache, expiry and connection removal."""

from __future__ import annotations

import functools
import gc
import logging
from uuid import UUID

import pytest

from subscriptions import ClientContext, ClientInstanceCache, instance_expiry_ms, is_expired
from subscriptions.instance import ClientInstance
from subscriptions.resolution import Resolution, resolve_matched
from tests.support.clock import T0
from tests.support.process import run_isolated


def _instance(n: int, interval_ms: int = 300000, connection_id: str | None = None) -> ClientInstance:
    return _instance_with(n, ClientContext(connection_id=connection_id), interval_ms)


def _instance_with(n: int, context: ClientContext, interval_ms: int = 300000) -> ClientInstance:
    resolution = _resolution(interval_ms)
    return ClientInstance(
        UUID(int=n + 2), context, resolution, version=0, expiry_ms=instance_expiry_ms(interval_ms)
    )


@functools.cache
def _resolution(interval_ms: int) -> Resolution:
    """One resolution per interval, shared as the manager shares them."""
    return resolve_matched(())._replace(push_interval_ms=interval_ms)


@pytest.mark.parametrize(
    ("interval", "base", "expiry"),
    [(300000, 60000, 900000), (1000, 60000, 60000), (100, 100, 300), (20000, 60000, 60000)],
)
def test_TEL_12_expiry_is_max_of_base_and_three_intervals(interval: int, base: int, expiry: int) -> None:
    assert instance_expiry_ms(interval, base) == expiry


def test_TEL_12_expiry_fires_at_the_deadline() -> None:
    assert not is_expired(T0 + 10, T0 + 9)
    assert is_expired(T0 + 10, T0 + 10)


def test_TEL_12_capacity_evicts_least_recently_used() -> None:
    cache = ClientInstanceCache(capacity=3)
    instances = [_instance(i) for i in range(4)]
    for instance in instances[:3]:
        cache.put(instance, T0)
    assert cache.lookup(instances[0].client_instance_id, T0) is instances[0]  # refresh recency
    cache.put(instances[3], T0)
    assert len(cache) == 3
    assert instances[1].client_instance_id not in cache
    assert instances[0].client_instance_id in cache
    assert cache.evictions == 1


def test_TEL_12_an_expired_instance_goes_before_a_live_one_is_evicted() -> None:
    cache = ClientInstanceCache(capacity=2)
    long_lived = _instance(1, interval_ms=3_600_000)  # expires after 3 hours
    short_lived = _instance(2, interval_ms=1000)  # expires after 60 s
    cache.put(long_lived, T0)
    cache.put(short_lived, T0 + 10)
    cache.put(_instance(3), T0 + 100_000)
    assert long_lived.client_instance_id in cache
    assert short_lived.client_instance_id not in cache
    assert (cache.evictions, cache.expirations) == (0, 1)


def test_TEL_12_kafka_default_capacity() -> None:
    assert ClientInstanceCache().capacity == 16384


def test_TEL_12_expired_instance_is_gone_on_lookup() -> None:
    cache = ClientInstanceCache()
    instance = _instance(1, interval_ms=1000)
    cache.put(instance, T0)
    assert cache.peek(instance.client_instance_id) is instance
    assert cache.lookup(instance.client_instance_id, T0 + 60000) is None
    assert len(cache) == 0
    assert cache.expirations == 1


def test_TEL_12_every_lookup_rearms_the_deadline() -> None:
    cache = ClientInstanceCache()
    instance = _instance(1, interval_ms=1000)
    cache.put(instance, T0)
    assert cache.lookup(instance.client_instance_id, T0 + 50000) is instance
    assert cache.expire(T0 + 60000) == 0
    assert cache.expire(T0 + 110000) == 1


def test_TEL_12_sweep_removes_only_expired_instances_across_intervals() -> None:
    cache = ClientInstanceCache()
    slow = _instance(1, interval_ms=300000)  # 900 s
    fast = [_instance(i, interval_ms=1000) for i in range(2, 6)]  # 60 s
    cache.put(slow, T0)
    for i, instance in enumerate(fast):
        cache.put(instance, T0 + 1000 * i)
    assert cache.expire(T0 + 61000) == 2
    assert slow.client_instance_id in cache
    assert [i.client_instance_id in cache for i in fast] == [False, False, True, True]
    assert cache.expire(T0 + 900000) == 3
    assert len(cache) == 0


def test_TEL_12_connection_close_removes_its_instances() -> None:
    cache = ClientInstanceCache()
    on_a = [_instance(i, connection_id="a") for i in range(3)]
    on_b = _instance(9, connection_id="b")
    unbound = _instance(10)
    for instance in [*on_a, on_b, unbound]:
        cache.put(instance, T0)
    assert cache.remove_connection("a") == 3
    assert cache.remove_connection("a") == 0
    assert len(cache) == 2
    assert cache.disconnect_removals == 3


def test_TEL_12_replacing_an_instance_keeps_one_entry() -> None:
    cache = ClientInstanceCache()
    first = _instance(1, interval_ms=1000)
    second = _instance(1, interval_ms=300000)
    cache.put(first, T0)
    cache.put(second, T0 + 1)
    assert len(cache) == 1
    assert cache.peek(second.client_instance_id) is second
    assert cache.expire(T0 + 100000) == 0  # the old deadline no longer applies


def test_TEL_12_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ClientInstanceCache(capacity=0)


def test_F13_a_cached_instance_is_one_object_for_the_garbage_collector() -> None:
    """A full collection walks every tracked object, and anonymous clients choose how many instances
    are made: each cached instance adds one tracked object (not its UUID and named tuple too), so a
    flood of new client ids keeps the collector's pauses short. Counted in a fresh interpreter, where
    no other thread allocates between the two counts."""
    added = run_isolated(_objects_tracked_for_2000_cached_instances)
    assert isinstance(added, int)
    assert 2000 <= added < 2000 + 50
    cache = ClientInstanceCache(capacity=2000)
    context = ClientContext("client-5", "librdkafka", "2.16.0", "10.0.0.1", 4005)
    cache.put(_instance_with(5, context), T0)
    instance = cache.peek(UUID(int=7))
    assert instance is not None
    assert (instance.client_instance_id, instance.context) == (UUID(int=7), context)


def _objects_tracked_for_2000_cached_instances() -> int:
    """How many more objects the collector tracks once 2,000 instances are cached (``run_isolated``)."""
    cache = ClientInstanceCache(capacity=2000)
    contexts = [
        ClientContext(f"client-{n}", "librdkafka", "2.16.0", "10.0.0.1", 4000 + n) for n in range(2000)
    ]
    gc.collect()
    before = len(gc.get_objects())
    for n, context in enumerate(contexts):
        cache.put(_instance_with(n, context), T0)
    gc.collect()
    return len(gc.get_objects()) - before


def test_AUD_I22_evicting_live_instances_warns_of_cache_pressure_at_most_every_five_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = ClientInstanceCache(capacity=1)
    with caplog.at_level(logging.WARNING, logger="subscriptions.instance_cache"):
        for n, now in enumerate((T0, T0 + 1, T0 + 299_999, T0 + 300_000, T0 + 300_001)):
            cache.put(_instance(n), now)
    warnings = [r for r in caplog.records if "client instance cache is full" in r.getMessage()]
    assert cache.evictions == 4
    assert len(warnings) == 2  # at T0 + 1 and at T0 + 300,001: not in between
    assert "4 so far" in warnings[-1].getMessage()
