"""QUO-3..QUO-11, QUO-13, QUO-14 and the worked examples Q-E1..Q-E5 (R-2 for requests)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.callback import (
    DefaultQuotaCallback,
    QuotaCallbackError,
    ReplicaShareQuotaCallback,
    load_quota_callback,
)
from quotas.client_quota_manager import ClientQuotaManager, QuotaManagerConfig
from quotas.entities import (
    CLIENT,
    DEFAULT,
    USER,
    ClientQuotaEntity,
    ClusterMetadata,
    QuotaType,
    principal_user,
)
from quotas.java import DOUBLE_MAX, LONG_MAX
from quotas.request_quota_manager import ClientRequestQuotaManager, nanos_to_percentage
from quotas.sensor import Metrics
from tests.support.clock import T0

E = ClientQuotaEntity


def _produce(config: QuotaManagerConfig | None = None, callback: object = None) -> ClientQuotaManager:
    return ClientQuotaManager(
        QuotaType.PRODUCE,
        config or QuotaManagerConfig(),
        Metrics(),
        T0,
        callback,  # type: ignore[arg-type]
    )


def _record(m: ClientQuotaManager, user: str, client: str, value: float, at: int = 0) -> int:
    return m.record_and_get_throttle_time_ms(f"User:{user}", client, value, T0 + at)


def test_QUO_1_manager_config_defaults() -> None:
    config = QuotaManagerConfig()
    assert (config.num_quota_samples, config.quota_window_size_seconds) == (11, 1)


def _enabled(m: ClientQuotaManager) -> bool:
    return m.quotas_enabled


def test_QUO_3_nothing_is_recorded_while_no_quota_is_set() -> None:
    m = _produce()
    assert not m.quotas_enabled
    assert _record(m, "u", "c", 10**12) == 0
    assert len(m.metrics) == 1  # only the delay-queue sensor
    m.update_quota(E(None, "c"), 100)
    assert _enabled(m)
    m.update_quota(E(None, "c"), None)
    assert not _enabled(m)  # Kafka 4.4: the level's last entity removed clears its bit
    assert _record(m, "u", "c", 10**12) == 0


def test_QUO_3_AUD_C5_each_level_counts_its_entities_and_is_cleared_with_its_last() -> None:
    m = _produce()
    m.update_quota(E("alice", None), 100)
    m.update_quota(E("bob", None), 100)
    m.update_quota(E("alice", None), 200)  # a new value for a configured entity: counted once
    m.update_quota(E(None, "c"), 100)
    assert m.callback.quota_types_enabled(m.quota_type) == USER | CLIENT  # type: ignore[attr-defined]
    m.update_quota(E("carol", None), None)  # not configured: nothing changes
    m.update_quota(E("alice", None), None)
    assert m.callback.quota_types_enabled(m.quota_type) == USER | CLIENT  # type: ignore[attr-defined]
    m.update_quota(E("bob", None), None)
    assert m.callback.quota_types_enabled(m.quota_type) == CLIENT  # type: ignore[attr-defined]
    assert _tags(m, "bob", "c") == ("", "c")  # CLIENT alone: the fast path again


def test_Q_E1_QUO_4_QUO_5_precedence() -> None:
    m = _produce()
    for entity, limit in [
        (E(DEFAULT, None), 1000),
        (E(None, DEFAULT), 2000),
        (E(DEFAULT, DEFAULT), 3000),
        (E("userA", None), 4000),
        (E("userA", "client1"), 5000),
        (E("userB", None), 6000),
        (E("userB", "client1"), 7000),
        (E("userB", DEFAULT), 8000),
        (E("userC", None), 10000),
        (E(None, "client1"), 9000),
    ]:
        m.update_quota(entity, limit)
    cases = [
        ("userA", "client1", ("userA", "client1"), 5000, 49500, 0),
        ("userA", "client2", ("userA", ""), 4000, 49500, 2375),
        ("userA", "client3", ("userA", ""), 4000, 0, 2375),
        ("userB", "client1", ("userB", "client1"), 7000, 88000, 2571),
        ("userB", "client2", ("userB", "client2"), 8000, 77000, 0),
        ("userD", "client1", ("userD", "client1"), 3000, 38500, 2833),
        ("userE", "client1", ("userE", "client1"), 3000, 27500, 0),
    ]
    for user, client, tags, limit, recorded, throttle in cases:
        assert _tags(m, user, client) == tags
        assert m.quota_limit(f"User:{user}", client) == limit
        assert _record(m, user, client, recorded) == throttle, (user, client)

    m.update_quota(E(DEFAULT, DEFAULT), None)
    assert _tags(m, "userD", "client1") == ("userD", "")
    assert _record(m, "userD", "client1", 0) == 0  # a fresh sensor
    assert _record(m, "userE", "client4", 16500) == 6500
    assert _record(m, "userF", "client4", 8800) == 0
    assert _record(m, "userF", "client5", 8800) == 7600  # shares (userF, "")

    m.update_quota(E(DEFAULT, None), None)
    assert _tags(m, "userF", "client4") == ("", "client4")
    assert m.quota_limit("User:userF", "client4") == 2000
    assert _record(m, "userF", "client5", 27500) == 3750
    assert _record(m, "userG", "client5", 0) == 3750  # shares ("", client5)


def _tags(m: ClientQuotaManager, user: str, client: str) -> tuple[str, ...]:
    tags = m.callback.quota_metric_tags(m.quota_type, f"User:{user}", client)
    return tuple(tags.values())


def test_Q_E2_single_user_level_fast_path_and_removal_disables_quotas() -> None:
    m = _produce()
    m.update_quota(E("userA", None), 10)
    assert _tags(m, "userA", "anything") == ("userA", "")
    assert _record(m, "userA", "c", 11000) > 0
    m.update_quota(E("userA", None), None)
    sensors = m._by_sensor["Produce-userA:"]
    assert sensors.quota_metric.config.quota is not None
    assert sensors.quota_metric.config.quota.bound == float(LONG_MAX)  # QUO-8: existing sensors re-bound
    assert _record(m, "userA", "c", 11000) == 0
    assert not m.quotas_enabled  # QUO-3 (Kafka 4.4): the only USER entity gone, the mask is 0
    assert _tags(m, "userA", "c") == ("", "c")


def test_Q_E2_QUO_6_default_client_only_and_sensor_names() -> None:
    m = _produce()
    m.update_quota(E(None, DEFAULT), 500)
    for user in ("alice", "bob"):
        assert _tags(m, user, "client1") == ("", "client1")
        _record(m, user, "client1", 1)
    _record(m, "carol", "client@#$%", 1)
    names = {s.name for s in m.metrics.sensors()}
    assert {"Produce-:client1", "ProduceThrottleTime-:client1", "Produce-:client@#$%"} <= names


def test_QUO_4_metric_tags_follow_a_quota_change_after_the_sensors_exist() -> None:
    """``metric_tags`` (the quota entity a landed push is attributed to) answers from a client's
    sensors once they exist, and must not keep the old entity when a quota changes the tags."""
    m = _produce()
    assert m.metric_tags("User:alice", "c1") == {"user": "", "client-id": "c1"}  # no quota yet
    m.update_quota(E("alice", None), 1e9)
    _record(m, "alice", "c1", 1)
    assert m.metric_tags("User:alice", "c1") == {"user": "alice", "client-id": ""}
    m.update_quota(E("alice", "c1"), 1e9)
    assert m.metric_tags("User:alice", "c1") == {"user": "alice", "client-id": "c1"}
    _record(m, "alice", "c1", 1)
    assert m.metric_tags("User:alice", "c1") == {"user": "alice", "client-id": "c1"}
    unseen = m.callback.quota_metric_tags(QuotaType.PRODUCE, "User:bob", "c1")
    assert m.metric_tags("User:bob", "c1") == unseen  # no sensors yet: the callback's answer


def test_QUO_4_user_names_are_sanitized_like_java_url_encoder() -> None:
    assert principal_user("User:alice smith*~é") == "alice%20smith%2A%7E%C3%A9"
    assert principal_user("User:a.b-c_d") == "a.b-c_d"
    assert principal_user("plain") == "plain"
    m = _produce()
    m.update_quota(E("a%20b", None), 10)
    assert _tags(m, "a b", "c") == ("a%20b", "")
    assert m.quota_limit("User:a b", "c") == 10


@pytest.mark.parametrize(
    ("configured", "limit"),
    [
        ({}, DOUBLE_MAX),
        ({E(DEFAULT, None): 10}, 100.0),
    ],
)
def test_Q_E3_QUO_10_AUD_D5_max_value_in_quota_window(
    configured: Mapping[ClientQuotaEntity, float], limit: float
) -> None:
    m = _produce()
    for entity, value in configured.items():
        m.update_quota(entity, value)
    assert m.max_value_in_quota_window("User:u", "c", T0) == limit


def test_QUO_10_kafka_test_window_num_4() -> None:
    m = _produce(QuotaManagerConfig(num_quota_samples=4))
    m.update_quota(E(DEFAULT, None), 10)
    assert m.max_value_in_quota_window("User:u", "c", T0) == 30.0


def test_Q_E5_QUO_8_quota_change_keeps_recorded_data() -> None:
    m = _produce()
    m.update_quota(E(None, DEFAULT), 4000)
    m.update_quota(E(None, "p1"), 2000)
    assert _record(m, "ANONYMOUS", "p1", 2500 * 11) > 0  # rate 2750
    m.update_quota(E(None, "p1"), 3000)
    assert _record(m, "ANONYMOUS", "p1", 0) == 0  # 2750 <= 3000
    m.update_quota(E(None, "p1"), 500)
    assert _record(m, "ANONYMOUS", "p1", 0) > 0
    m.update_quota(E(None, "p1"), None)
    assert _record(m, "ANONYMOUS", "p1", 11000) == 0  # default 4000, rate 3850


def test_QUO_7_R_1_byte_rate_throttle_is_unbounded() -> None:
    m = _produce()
    m.update_quota(E(None, "c"), 500)
    for k in range(10):
        assert _record(m, "u", "c", 400, 1000 * k) == 0
    assert _record(m, "u", "c", 2300, 10500) == 2100
    assert _record(m, "u", "c", 10**9, 10500) > 1000  # not capped at one window


def test_QUO_9_AUD_D4_fetch_unrecord_takes_the_bytes_back() -> None:
    fetch = ClientQuotaManager(QuotaType.FETCH, QuotaManagerConfig(), Metrics(), T0)
    fetch.update_quota(E(None, "c"), 100)
    assert fetch.record_and_get_throttle_time_ms("User:u", "c", 5000, T0) > 0
    fetch.unrecord("User:u", "c", 5000, T0)
    assert fetch.record_and_get_throttle_time_ms("User:u", "c", 0, T0) == 0
    assert fetch._by_sensor["Fetch-:c"].quota_metric.metric_name.name == "byte-rate"


def test_Q_E4_R_2_QUO_11_request_quota() -> None:
    m = ClientRequestQuotaManager(QuotaManagerConfig(), Metrics(), T0)
    m.update_quota(E(None, "c"), 1.0)
    # the same doubles Kafka computes (nanos x (100.0 / 1e9)); docs/rules.md prints them rounded
    assert nanos_to_percentage(4_000_000) == 4_000_000 * (100.0 / 1e9) == pytest.approx(0.4)
    assert nanos_to_percentage(67_100_000) == pytest.approx(6.71)
    assert nanos_to_percentage(500_000_000) == 50.0
    for k in range(10):
        assert m.record_request_time("User:u", "c", 4_000_000, T0 + 1000 * k) == 0
    assert m.record_request_time("User:u", "c", 67_100_000, T0 + 10500) == 210
    assert m.record_request_time("User:u", "c", 500_000_000, T0 + 11000) == 1000  # capped
    for k in range(1, 11):
        assert m.record_request_time("User:u", "c", 0, T0 + 11000 + 1000 * k) == 1000
    assert m.record_request_time("User:u", "c", 0, T0 + 11000 + 11000) == 0  # the spike expired
    assert m._by_sensor["Request-:c"].quota_metric.metric_name.name == "request-time"


def test_QUO_11_exempt_time_is_recorded_only_when_quotas_are_on() -> None:
    m = ClientRequestQuotaManager(QuotaManagerConfig(), Metrics(), T0)
    m.record_exempt(10_000_000, T0)
    exempt = m.exempt_sensor.metrics[0]
    assert exempt.measure(T0) == 0.0
    m.update_quota(E(None, "c"), 1.0)
    m.record_exempt(10_000_000, T0)
    assert exempt.measure(T0) == pytest.approx(0.1)  # 1.0 %-s over a 10 s window
    m.record_network_time("User:u", "c", 1_000_000_000, T0)  # no check, never raises
    assert m.record_request_time("User:u", "c", 0, T0) == 1000


def test_QUO_13_custom_callback_loaded_by_dotted_path_is_polled_for_resets() -> None:
    callback = load_quota_callback("tests.quotas.test_client_quota_manager.FlatCallback", {"limit": 100})
    assert isinstance(callback, FlatCallback)
    m = _produce(callback=callback)
    assert m.quotas_enabled  # CUSTOM: never short-circuits
    assert _record(m, "u", "c", 900) == 0  # 90/s over the 10 s window, limit 100
    callback.flat_limit = 1000.0
    callback.reset = True
    assert _record(m, "u", "c", 0) == 0
    callback.flat_limit = 10.0
    callback.reset = True
    assert _record(m, "u", "c", 0) > 0
    assert callback.polls >= 3


class FlatCallback(DefaultQuotaCallback):
    """One limit for everyone, changed from the outside (a test double of a real plug-in)."""

    def __init__(self) -> None:
        super().__init__()
        self.flat_limit = 0.0
        self.reset = False
        self.polls = 0

    def configure(self, configs: Mapping[str, object]) -> None:
        self.flat_limit = float(configs["limit"])  # type: ignore[arg-type]

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        return self.flat_limit

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        self.polls += 1
        reset, self.reset = self.reset, False
        return reset


@pytest.mark.parametrize("path", ["no.such.module.Callback", "quotas.callback.Nope", "json:dumps"])
def test_QUO_13_bad_callback_class_is_a_clear_error(path: str) -> None:
    with pytest.raises(QuotaCallbackError, match=r"client\.quota\.callback\.class"):
        load_quota_callback(path)


def test_QUO_13_replica_share_callback_divides_by_replicas() -> None:
    callback = ReplicaShareQuotaCallback()
    m = _produce(callback=callback)
    m.update_quota(E(None, "c"), 3000)
    assert m.quota_limit("User:u", "c") == 3000
    assert _record(m, "u", "c", 20000) == 0  # 2000/s
    assert m.update_cluster_metadata(ClusterMetadata("sinks", ("a", "b", "c")))
    assert m.quota_limit("User:u", "c") == 1000
    assert _record(m, "u", "c", 0) > 0  # the existing sensor was re-bounded, keeping its data
    assert not m.update_cluster_metadata(ClusterMetadata("sinks", ("a", "b", "c")))


class RecordingChannel:
    def __init__(self) -> None:
        self.events: list[str] = []

    def start_throttling(self) -> None:
        self.events.append("start")

    def end_throttling(self) -> None:
        self.events.append("end")


def test_QUO_14_throttle_mutes_until_the_time_is_up_and_records_throttle_time() -> None:
    m = _produce()
    m.update_quota(E(None, "c"), 100)
    channel = RecordingChannel()
    throttled = m.throttle("User:u", "c", 250, channel, T0)
    assert throttled is not None
    assert channel.events == ["start"]
    assert m.throttle_queue.reap(T0 + 249) == 0
    assert m.throttle_queue.reap(T0 + 250) == 1
    assert channel.events == ["start", "end"]
    assert m.throttle_queue.reap(T0 + 10**6) == 0
    assert m._by_sensor["Produce-:c"].throttle_sensor.metrics[0].measure(T0) == 250.0
    assert m.throttle("User:u", "c", 0, channel, T0) is None


def test_STAT_9_QUO_6_manager_sensors_expire_after_an_hour() -> None:
    m = _produce()
    m.update_quota(E(None, "c"), 100)
    _record(m, "u", "c", 1)
    assert m.expire(T0 + 3600_000) == 0
    assert m.expire(T0 + 3600_001) == 2  # the quota and throttle-time sensors
    assert "Produce-:c" not in {s.name for s in m.metrics.sensors()}
    _record(m, "u", "c", 1, 3600_002)  # recreated empty
    assert m._by_sensor["Produce-:c"].quota_metric.measure(T0 + 3600_002) == pytest.approx(0.1)


# -- the cap on entities with sensors (limits.max_quota_entities, issue 17) --------------------------


def _capped(cap: int, limit: float = 1000) -> ClientQuotaManager:
    """A PRODUCE manager keeping at most ``cap`` entities, with a ``<default>`` client-id quota (every
    client id its own entity)."""
    m = _produce(QuotaManagerConfig(max_entities=cap))
    m.update_quota(E(None, DEFAULT), limit)
    return m


def _kept(m: ClientQuotaManager) -> set[str]:
    """The client ids whose quota sensors are registered."""
    prefix = "Produce-:"
    return {s.name.removeprefix(prefix) for s in m.metrics.sensors() if s.name.startswith(prefix)}


def test_a_flood_of_client_ids_never_keeps_more_entities_than_the_cap() -> None:
    m = _capped(50)
    for i in range(1000):
        _record(m, "anonymous", f"flood-{i}", 10, at=i)
        m.throttle("User:anonymous", f"flood-{i}", 5, RecordingChannel(), T0 + i)  # the throttle sensor too
        assert m.entity_count <= 50
        assert len(m.metrics) <= 2 * 50 + 1  # quota and throttle-time sensors, plus the delay queue
        assert len(m._by_client) <= 50
    assert m.entity_count == 50
    assert m.entities_evicted == 950
    assert _kept(m) == {f"flood-{i}" for i in range(950, 1000)}
    assert {s.name for s in m.metrics.sensors()} >= {
        f"ProduceThrottleTime-:flood-{i}" for i in range(950, 1000)
    }


def test_the_least_recently_recorded_entity_is_evicted_first() -> None:
    m = _capped(3)
    for client in ("a", "b", "c", "a"):
        _record(m, "u", client, 1)
    _record(m, "u", "d", 1)
    assert _kept(m) == {"a", "c", "d"}  # b was recorded least recently: all its sensors are gone
    assert m.metrics.get_sensor("ProduceThrottleTime-:b") is None
    m.throttle("User:u", "c", 10, RecordingChannel(), T0)  # a throttle record counts as use
    _record(m, "u", "e", 1)
    assert _kept(m) == {"c", "d", "e"}
    assert m.entities_evicted == 2


@given(st.lists(st.integers(min_value=0, max_value=9), max_size=60), st.integers(min_value=1, max_value=5))
@settings(max_examples=60, deadline=None)
def test_the_entities_kept_are_those_a_least_recently_used_cache_keeps(clients: list[int], cap: int) -> None:
    m = _capped(cap)
    model: OrderedDict[str, None] = OrderedDict()
    created = 0
    for at, client in enumerate(clients):
        _record(m, "u", str(client), 1, at)
        created += str(client) not in model
        model[str(client)] = None
        model.move_to_end(str(client))
        if len(model) > cap:
            model.popitem(last=False)
        assert _kept(m) == set(model)
    assert m.entities_evicted == created - len(model)


def test_an_entity_recorded_during_a_flood_keeps_its_sensors_and_history() -> None:
    m = _capped(10)
    _record(m, "u", "steady", 1)
    steady = m.metrics.get_sensor("Produce-:steady")
    for i in range(500):
        _record(m, "anonymous", f"flood-{i}", 1, at=i)
        if i % 5 == 0:  # the steady client records once for every five new flood entities
            _record(m, "u", "steady", 1, at=i)
    assert m.metrics.get_sensor("Produce-:steady") is steady
    assert "steady" in _kept(m)
    assert m.entities_evicted == 500 + 1 - 10


def _steady_throttles(flood_per_record: int) -> list[int]:
    """The throttles of a client sending twice its quota (2,000 bytes every 100 ms, quota 1,000 B/s)
    to a manager capped at 8 entities, with ``flood_per_record`` new client ids between its records."""
    m = _capped(8, limit=1000)
    answers = []
    for step in range(200):
        at = step * 100
        answers.append(_record(m, "u", "steady", 2000, at))
        for i in range(flood_per_record):
            _record(m, "anonymous", f"flood-{step}-{i}", 10**6, at)
    return answers


def test_an_active_clients_throttling_is_unchanged_by_a_flood_of_other_client_ids() -> None:
    quiet = _steady_throttles(0)
    assert any(quiet)  # the steady client is throttled at all
    flooded = _steady_throttles(7)  # 1,400 flood entities, 7 between two records: fewer than the cap
    assert flooded == quiet


def test_a_flood_past_the_cap_only_ever_shrinks_the_evicted_clients_throttle() -> None:
    quiet = _steady_throttles(0)
    flooded = _steady_throttles(20)  # the steady client is evicted between every two records
    assert all(f <= q for f, q in zip(flooded, quiet, strict=True))
    assert sum(flooded) < sum(quiet)


def test_an_evicted_entity_starts_afresh_so_only_its_own_throttle_shrinks() -> None:
    m = _capped(2, limit=100)
    assert _record(m, "u", "heavy", 10**5) > 0
    evicted = m.metrics.get_sensor("Produce-:heavy")
    _record(m, "u", "x", 1)
    _record(m, "u", "y", 1)  # evicts heavy
    assert "heavy" not in _kept(m)
    assert _record(m, "u", "heavy", 1, at=1) == 0  # its history is gone: recorded into new sensors
    fresh = m.metrics.get_sensor("Produce-:heavy")
    assert fresh is not None
    assert fresh is not evicted


def test_a_users_many_client_ids_are_one_entity_and_a_bounded_lookup_cache() -> None:
    m = _produce(QuotaManagerConfig(max_entities=4))
    m.update_quota(E("u", None), 1000)  # a user quota: every client id of u shares the sensors
    for i in range(100):
        _record(m, "u", f"c{i}", 1, at=i)
        assert len(m._by_client) <= 4
    assert m.entity_count == 1
    assert m.entities_evicted == 0
    one_client = _produce()
    one_client.update_quota(E("u", None), 1000)
    for i in range(100):
        _record(one_client, "u", "c", 1, at=i)
    assert m._by_sensor["Produce-u:"].quota_metric.measure(T0 + 100) == pytest.approx(
        one_client._by_sensor["Produce-u:"].quota_metric.measure(T0 + 100)
    )
