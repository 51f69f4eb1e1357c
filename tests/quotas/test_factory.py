"""QUO-1, QUO-2 and CONN-1 through the config and the manager bundle."""

from __future__ import annotations

import asyncio
import math
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest.config import SinkConfig
from ingest.limits import RequestLimits
from ingest.push.admission import Admission
from ingest.push.metrics import RequestMetrics, metrics_exposition
from quotas.callback import DefaultQuotaCallback, ReplicaShareQuotaCallback
from quotas.config import QuotaConfig, QuotaConfigError
from quotas.connection_quotas import ConnectionThrottledError
from quotas.entities import DEFAULT, ClientQuotaEntity, ClusterMetadata, QuotaEntityError, QuotaType
from quotas.factory import create_quota_managers
from quotas.sensor import MetricName
from subscriptions import ClientMetricsManager, SubscriptionStore
from tests.support.clock import T0, FakeClock

E = ClientQuotaEntity


def test_QUO_1_defaults_are_kafkas_but_connections_per_ip_are_bounded() -> None:
    config = QuotaConfig.default()
    assert (config.num_quota_samples, config.quota_window_size_seconds) == (11, 1)
    assert (config.num_controller_quota_samples, config.controller_quota_window_size_seconds) == (11, 1)
    assert config.max_connections == 2**31 - 1
    assert config.max_connections_per_ip == 1000  # Kafka has none; one address cannot take every socket
    assert config.client_quota_callback_class is None
    assert config.validate() == []


def test_QUO_1_from_mapping_reads_kafka_keys() -> None:
    config = QuotaConfig.from_mapping(
        {
            "quota.window.num": "5",
            "controller.quota.window.size.seconds": 2,
            "max.connections.per.ip.overrides": "127.0.0.1:3",
            "client.quota.callback.class": "quotas.callback.ReplicaShareQuotaCallback",
        }
    )
    assert config.num_quota_samples == 5
    assert config.controller_quota_window_size_seconds == 2
    assert config.max_connections_per_ip_overrides == {"127.0.0.1": 3}


def test_QUO_1_every_problem_is_reported_at_once() -> None:
    with pytest.raises(QuotaConfigError) as info:
        QuotaConfig.from_mapping(
            {
                "quota.window.num": 0,
                "max.connections": "many",
                "bogus.key": 1,
                "max.connections.per.ip.overrides": "x",
            }
        )
    assert len(info.value.problems) == 4


def test_QUO_1_managers_use_their_windows() -> None:
    managers = create_quota_managers(
        QuotaConfig(
            num_quota_samples=5, num_controller_quota_samples=7, controller_quota_window_size_seconds=2
        ),
        FakeClock(),
    )
    assert managers.produce.config.num_quota_samples == 5
    assert managers.request.max_throttle_time_ms == 1000
    assert managers.controller_mutation.config.num_quota_samples == 7
    assert managers.controller_mutation.config.window_ms == 2000


def test_QUO_2_alter_routes_each_key_to_its_manager() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.alter(E("alice", None), "producer_byte_rate", 1000)
    managers.alter(E(None, DEFAULT), "consumer_byte_rate", 2000)
    managers.alter(E(DEFAULT, DEFAULT), "request_percentage", 50.5)
    managers.alter(E("alice", "c"), "controller_mutation_rate", 3.5)
    assert managers.produce.quota_limit("User:alice", "x") == 1000
    assert managers.fetch.quota_limit("User:bob", "x") == 2000
    assert managers.request.quota_limit("User:bob", "x") == 50.5
    assert managers.controller_mutation.quota_limit("User:alice", "c") == 3.5
    assert managers.produce.quota_limit("User:bob", "x") is None
    managers.alter(E("alice", None), "producer_byte_rate", None)
    assert managers.produce.quota_limit("User:alice", "x") is None


async def test_QUO_2_ip_quota_goes_to_connection_quotas() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.connections.add_listener("EXTERNAL")
    managers.alter(E(ip="127.0.0.1"), "connection_creation_rate", 1)
    for _ in range(11):  # 11 over the padded 10 s window is 1.1/s
        try:
            await managers.connections.inc("EXTERNAL", "127.0.0.1")
        except ConnectionThrottledError:
            break
    else:
        pytest.fail("the IP quota was not applied")


@pytest.mark.parametrize(
    ("entity", "key", "value", "message"),
    [
        (E(), "producer_byte_rate", 1, "empty"),
        (E("", None), "producer_byte_rate", 1, "empty client quota entity name"),
        (E("u", None), "bogus", 1, "Invalid configuration key"),
        (E("u", None), "connection_creation_rate", 1, "Invalid configuration key"),
        (E(ip="1.2.3.4"), "producer_byte_rate", 1, "Invalid configuration key"),
        (E("u", None, "1.2.3.4"), "connection_creation_rate", 1, "IP entity should not be combined"),
        (E(ip="not-an-ip"), "connection_creation_rate", 1, "not a valid IP"),
        (E("u", None), "producer_byte_rate", 0, "greater than 0"),
        (E("u", None), "producer_byte_rate", -5, "greater than 0"),
        (E("u", None), "producer_byte_rate", 1.5, "producer_byte_rate cannot be a fractional value"),
        (E("u", None), "producer_byte_rate", 2.0**64, "too large"),
        (E(ip=DEFAULT), "connection_creation_rate", 2**31, "too large"),
        (E("u", None), "request_percentage", float("nan"), "Invalid value"),
    ],
)
def test_QUO_2_invalid_alterations_are_rejected(
    entity: ClientQuotaEntity, key: str, value: float, message: str
) -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    with pytest.raises(QuotaEntityError, match=message):
        managers.alter(entity, key, value)


def test_KF3_Q4_removing_a_key_the_entity_cannot_have_removes_nothing_and_is_no_error() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.alter(E("u", None), "bogus", None)
    managers.alter(E(ip="1.2.3.4"), "producer_byte_rate", None)
    with pytest.raises(QuotaEntityError, match="empty client quota entity name"):
        managers.alter(E("", None), "bogus", None)  # the entity is still checked


def test_QUO_2_integral_values_tolerate_tiny_fractions() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.alter(E("u", None), "producer_byte_rate", 1000.0000001)
    assert managers.produce.quota_limit("User:u", "c") == 1000.0000001  # stored as given, as Kafka's double


def test_QUO_13_callback_class_from_config_is_shared_by_the_managers() -> None:
    config = QuotaConfig(client_quota_callback_class="quotas.callback.ReplicaShareQuotaCallback")
    managers = create_quota_managers(config, FakeClock())
    assert isinstance(managers.callback, ReplicaShareQuotaCallback)
    assert all(m.callback is managers.callback for m in managers.client_managers())
    managers.alter(E(None, "c"), "producer_byte_rate", 900)
    assert managers.update_cluster_metadata(ClusterMetadata("sinks", ("a", "b", "c")))
    assert managers.manager(QuotaType.PRODUCE).quota_limit("User:u", "c") == 300


def test_AUD_C14_every_manager_re_bounds_its_existing_sensors_when_the_shared_callback_says_so() -> None:
    config = QuotaConfig(client_quota_callback_class="quotas.callback.ReplicaShareQuotaCallback")
    clock = FakeClock()
    managers = create_quota_managers(config, clock)
    managers.alter(E(None, "c"), "producer_byte_rate", 900)
    managers.alter(E(None, "c"), "request_percentage", 300)
    managers.produce.record_and_get_throttle_time_ms("User:u", "c", 1, T0)  # sensors exist before
    managers.request.record_request_time("User:u", "c", 1, T0)
    assert managers.update_cluster_metadata(ClusterMetadata("sinks", ("a", "b", "c")))
    bounds = {
        (metric.metric_name.group, metric.metric_name.name): metric.config.quota.bound
        for sensor in managers.metrics.sensors()
        for metric in sensor.metrics
        if metric.config.quota is not None and metric.metric_name.name in ("byte-rate", "request-time")
    }
    assert bounds == {("Produce", "byte-rate"): 300.0, ("Request", "request-time"): 100.0}


class Channel:
    def __init__(self) -> None:
        self.muted = 0
        self.unmuted = 0

    def start_throttling(self) -> None:
        self.muted += 1

    def end_throttling(self) -> None:
        self.unmuted += 1


async def test_QUO_14_reapers_unmute_when_the_throttle_ends() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    reapers = asyncio.create_task(managers.run_reapers(clock))
    channels = [Channel() for _ in range(3)]
    start = clock.now_ms()
    managers.produce.throttle("User:u", "c", 300, channels[0], start)
    managers.request.throttle("User:u", "c", 100, channels[1], start)
    managers.fetch.throttle("User:u", "c", 200, channels[2], start)
    for _ in range(20):
        await asyncio.sleep(0)
    assert [(c.muted, c.unmuted) for c in channels] == [(1, 1)] * 3
    assert clock.now_ms() >= start + 300
    managers.close()
    await asyncio.wait_for(reapers, 1)


def test_QUO_14_close_unmutes_everyone_still_throttled() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    channel = Channel()
    managers.produce.throttle("User:u", "c", 10_000, channel, clock.now_ms())
    assert (channel.muted, channel.unmuted) == (1, 0)
    managers.close()
    assert (channel.muted, channel.unmuted) == (1, 1)
    late = Channel()
    managers.produce.throttle("User:u", "c", 10_000, late, clock.now_ms())  # after close: at once
    assert (late.muted, late.unmuted) == (1, 1)


def test_STAT_9_expire_drops_idle_sensors_of_every_manager() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.alter(E(None, "c"), "producer_byte_rate", 100)
    managers.produce.record_and_get_throttle_time_ms("User:u", "c", 1, clock.now_ms())
    before = len(managers.metrics)
    assert managers.expire(clock.now_ms() + 3600_001) >= 1
    assert len(managers.metrics) < before


async def test_sensors_are_published_with_kafka_like_names_and_tags() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.connections.add_listener("EXTERNAL")
    for key in ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"):
        managers.alter(E("alice", None), key, 1000)
    now = clock.now_ms()
    managers.produce.record_and_get_throttle_time_ms("User:alice", "c", 100, now)
    managers.fetch.record_and_get_throttle_time_ms("User:alice", "c", 100, now)
    managers.request.record_request_time("User:alice", "c", 1_000_000, now)
    managers.request.record_exempt(1_000_000, now)
    managers.controller_mutation.record("User:alice", "c", 1, now)
    managers.produce.throttle("User:alice", "c", 50, Channel(), now)
    await managers.connections.inc("EXTERNAL", "127.0.0.1")
    published = {(n.group, n.name, n.tags) for n in managers.values(now)}
    alice = (("client-id", ""), ("user", "alice"))
    for expected in [
        ("Produce", "byte-rate", alice),
        ("Produce", "throttle-time", alice),
        ("Fetch", "byte-rate", alice),
        ("Request", "request-time", alice),
        ("Request", "exempt-request-time", ()),
        ("ControllerMutation", "tokens", alice),
        ("ControllerMutation", "mutation-rate", alice),
        ("ControllerMutation", "throttle-time", alice),
        ("Produce", "queue-size", ()),
        ("socket-server-metrics", "connection-count", (("listener", "EXTERNAL"),)),
        ("socket-server-metrics", "connection-accept-rate", (("listener", "EXTERNAL"),)),
        ("socket-server-metrics", "broker-connection-accept-rate", ()),
    ]:
        assert expected in published, expected
    values = {(n.group, n.name): v for n, v in managers.values(now).items()}
    assert values["Produce", "queue-size"] == 1.0
    assert values["socket-server-metrics", "connection-count"] == 1.0


def test_every_client_manager_keeps_at_most_max_quota_entities() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock(), max_quota_entities=3)
    assert {m.config.max_entities for m in managers.client_managers()} == {3}
    default = create_quota_managers(QuotaConfig(), FakeClock())
    assert default.produce.config.max_entities == RequestLimits().max_quota_entities


def test_quota_entities_kept_and_evicted_are_on_the_metrics_page() -> None:
    """Issue 17 item 6: a flood of client ids under a <default> client-id quota is capped, and the
    evictions are counted in /metrics by quota type."""
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock, max_quota_entities=2)
    managers.alter(E(client_id=DEFAULT), "producer_byte_rate", 1000)
    for i in range(5):
        managers.produce.record_and_get_throttle_time_ms("User:ANONYMOUS", f"c{i}", 10, clock.now_ms())
    render = metrics_exposition(
        ClientMetricsManager(SubscriptionStore()), managers, RequestMetrics(Admission(1, 1)), clock.now_ms
    )
    families = {f.name: f for f in text_string_to_metric_families(render().decode())}
    kept = {s.labels["quota_type"]: s.value for s in families["telemetry_sink_quota_entities"].samples}
    evicted = {
        s.labels["quota_type"]: s.value
        for s in families["telemetry_sink_quota_entities_evicted"].samples
        if s.name == "telemetry_sink_quota_entities_evicted_total"
    }
    assert kept == {"Produce": 2, "Fetch": 0, "Request": 0, "ControllerMutation": 0}
    assert evicted == {"Produce": 3, "Fetch": 0, "Request": 0, "ControllerMutation": 0}
    clients = {s.labels["client_id"] for s in families["kafka_server_produce_byte_rate"].samples}
    assert clients == {"c3", "c4"}


def test_AUD_G4_throttle_time_is_averaged_over_kafkas_registry_window_and_configurable() -> None:
    """A throttle stays on the throttle-time sensor for metrics.num.samples x metrics.sample.window.ms
    (2 x 30 s), as in Kafka, not the quota's 11 x 1 s: the 30 s quota snapshots see every throttle."""
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.alter(E("alice", None), "producer_byte_rate", 1000)
    managers.produce.record_and_get_throttle_time_ms("User:alice", "c", 10, T0)
    managers.produce.throttle("User:alice", "c", 5000, Channel(), T0)
    alice = (("client-id", ""), ("user", "alice"))

    def throttle_time(now: int) -> float:
        return managers.values(now)[MetricName("throttle-time", "Produce", alice)]

    assert throttle_time(T0 + 11_000) == 5000.0  # the old 11 x 1 s window had forgotten it here
    assert throttle_time(T0 + 59_999) == 5000.0
    assert math.isnan(throttle_time(T0 + 60_000))
    short = QuotaConfig.from_mapping({"metrics.num.samples": 2, "metrics.sample.window.ms": 1000})
    assert (short.metrics_num_samples, short.metrics_sample_window_ms) == (2, 1000)
    assert create_quota_managers(short, clock).produce.config.throttle_time_config.time_window_ms == 1000


class RecordingCallback(DefaultQuotaCallback):
    """A callback class loaded by dotted path that keeps what ``configure`` was given."""

    configured: ClassVar[list[dict[str, object]]] = []

    def configure(self, configs: dict[str, object]) -> None:
        RecordingCallback.configured.append(configs)


def test_AUD_C16_a_callback_class_is_configured_with_the_sinks_configuration() -> None:
    path = "tests.quotas.test_factory:RecordingCallback"
    RecordingCallback.configured.clear()
    create_quota_managers(QuotaConfig(client_quota_callback_class=path), FakeClock())
    assert RecordingCallback.configured[-1]["quota.window.num"] == 11  # by default, the quota keys
    assert RecordingCallback.configured[-1]["client.quota.callback.class"] == path
    sink = SinkConfig.from_document(
        {
            "replica_id": "sink-7",
            "kafka_listener": {"node_id": 3},
            "quotas": {"client.quota.callback.class": path},
        }
    )
    create_quota_managers(sink.quotas, FakeClock(), callback_configs=sink.callback_configs())
    given = RecordingCallback.configured[-1]
    assert (given["node.id"], given["replica.id"], given["max.connections.per.ip"]) == (3, "sink-7", 1000)
