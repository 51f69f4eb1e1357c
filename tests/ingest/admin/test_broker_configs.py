"""Dynamic broker configs (connection quotas) through the config log: applied at run time on every
replica, a raised limit waking the acceptors that wait, a removed key restoring the static value; and
the admin's Kafka answers (INVALID_REQUEST, INVALID_CONFIG, CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower
from ingest.admin.dynamic_configs import BrokerConfigChange, DynamicBrokerConfigs
from ingest.admin.operations import AlterClientQuotasResult, QuotaAlteration, SinkAdmin, SuperUserAuthorizer
from quotas import (
    DEFAULT,
    ClientQuotaEntity,
    ConnectionQuotaConfig,
    ConnectionQuotas,
    DefaultQuotaCallback,
    Metrics,
    QuotaConfig,
    QuotaType,
    create_quota_managers,
)
from subscriptions import ClientContext, ClientMetricsManager, Errors, SubscriptionStore
from subscriptions.admin import ConfigOp
from tests.support.clock import FakeClock

ADMIN = ClientContext(principal="User:admin")


def _connections(**config: object) -> ConnectionQuotas:
    connections = ConnectionQuotas(ConnectionQuotaConfig(**config), Metrics(), FakeClock())  # type: ignore[arg-type]
    connections.add_listener("KAFKA", max_connections=100)
    return connections


async def test_raising_max_connections_wakes_the_waiting_acceptor_and_removing_it_restores_the_static() -> (
    None
):
    connections = _connections(max_connections=1)
    configs = DynamicBrokerConfigs()
    configs.bind(connections)
    await connections.inc("KAFKA", "10.0.0.1")
    waiting = asyncio.create_task(connections.inc("KAFKA", "10.0.0.2"))
    await asyncio.sleep(0)
    assert not waiting.done()
    configs.set(BrokerConfigChange("max.connections", "2"))
    await asyncio.wait_for(waiting, 5)  # a hang guard: the raise wakes it at once
    assert connections.total == 2
    configs.set(BrokerConfigChange("max.connections", None))
    assert connections.limits()["max.connections"] == 1


def test_listener_and_per_ip_keys_reach_the_connection_quotas() -> None:
    connections = _connections(max_connections_per_ip=10)
    configs = DynamicBrokerConfigs()
    configs.set(BrokerConfigChange("listener.name.kafka.max.connections", "7"))  # before the bind: kept
    configs.bind(connections)
    configs.set(BrokerConfigChange("max.connections.per.ip.overrides", "10.0.0.1:3,10.0.0.2:4"))
    configs.set(BrokerConfigChange("listener.name.kafka.max.connection.creation.rate", "50"))
    limits = connections.limits()
    assert limits["listener.name.kafka.max.connections"] == 7
    assert limits["listener.name.kafka.max.connection.creation.rate"] == 50
    assert limits["max.connections.per.ip.overrides"] == {"10.0.0.1": 3, "10.0.0.2": 4}
    assert limits["max.connections.per.ip"] == 10  # static, untouched
    assert configs.effective()["max.connections.per.ip.overrides"] == "10.0.0.1:3,10.0.0.2:4"


def _replica(tmp_path: Path, name: str) -> SinkAdmin:
    clock = FakeClock()
    store, quotas = SubscriptionStore(), create_quota_managers(QuotaConfig(), clock)
    follower = ConfigLogFollower(
        ConfigLog(str(tmp_path / "config_log"), replica_id=name), ConfigImage(store, quotas)
    )
    quotas.connections.add_listener("KAFKA")
    follower.image.broker_configs.bind(quotas.connections)
    return SinkAdmin(
        follower, ClientMetricsManager(store), quotas, SuperUserAuthorizer(["User:admin"]), clock.now_ms
    )


async def test_a_change_applies_on_every_replica_through_the_config_log(tmp_path: Path) -> None:
    one, two = _replica(tmp_path, "r1"), _replica(tmp_path, "r2")
    ops = [
        ("max.connections", ConfigOp.SET, "500"),
        ("listener.name.kafka.max.connections", ConfigOp.SET, "200"),
    ]
    assert await one.broker_configs.alter(ADMIN, ops) == (Errors.NONE, None)
    await two.follower.catch_up()
    for replica in (one, two):
        limits = replica.quotas.connections.limits()
        assert (limits["max.connections"], limits["listener.name.kafka.max.connections"]) == (500, 200)
    error, described = two.broker_configs.describe(ADMIN)
    assert error is Errors.NONE
    assert described["max.connections"] == ("500", True)
    assert described["max.connections.per.ip"] == ("1000", False)  # the sink's static default
    replaced = await two.broker_configs.alter(ADMIN, [("max.connections", ConfigOp.SET, "400")], replace=True)
    assert replaced == (Errors.NONE, None)
    await one.follower.catch_up()
    assert one.quotas.connections.limits()["listener.name.kafka.max.connections"] == 2147483647  # removed


async def test_kafkas_answers_for_bad_keys_values_operations_and_principals(tmp_path: Path) -> None:
    admin = _replica(tmp_path, "r1")
    cases = [
        (
            [("log.retention.ms", ConfigOp.SET, "1")],
            "Cannot update these configs dynamically: log.retention.ms",
        ),
        ([("max.connections", ConfigOp.SET, "many")], "Not a number of type INT"),
        ([("max.connection.creation.rate", ConfigOp.SET, "-1")], "Value must be at least 0"),
        ([("max.connection.creation.rate", ConfigOp.SET, "0")], "Invalid dynamic configuration"),
        (
            [("max.connections.per.ip.overrides", ConfigOp.SET, "10.0.0.1")],
            "max.connections.per.ip.overrides",
        ),
        ([("max.connections.per.ip.overrides", ConfigOp.SET, "10.0.0.1:x")], 'For input string: "x"'),
    ]
    for ops, message in cases:  # every refused value or key: INVALID_REQUEST, as a broker (KF3-C-11)
        error, text = await admin.broker_configs.alter(ADMIN, ops)
        assert error is Errors.INVALID_REQUEST
        assert text is not None
        assert message in text
    error, text = await admin.broker_configs.alter(ADMIN, [("max.connections", ConfigOp.APPEND, "1")])
    assert (error, text) == (
        Errors.INVALID_CONFIG,
        "Config value append is not allowed for config key: max.connections",
    )
    stranger = ClientContext(principal="User:bob")
    assert (await admin.broker_configs.alter(stranger, [("max.connections", ConfigOp.SET, "1")]))[0] is (
        Errors.CLUSTER_AUTHORIZATION_FAILED
    )
    assert admin.broker_configs.describe(stranger) == (Errors.CLUSTER_AUTHORIZATION_FAILED, {})
    assert admin.follower.image.broker_configs.values == {}


async def test_AUD_C17_the_quota_callback_class_is_not_a_dynamic_broker_config(tmp_path: Path) -> None:
    """A documented difference: Kafka can change ``client.quota.callback.class`` at run time; the sink
    reads it at start and refuses it as a dynamic config, with Kafka's answer for such a key."""
    admin = _replica(tmp_path, "r1")
    ops = [("client.quota.callback.class", ConfigOp.SET, "quotas.callback.ReplicaShareQuotaCallback")]
    error, text = await admin.broker_configs.alter(ADMIN, ops)
    assert error is Errors.INVALID_REQUEST
    assert text is not None
    assert "Cannot update these configs dynamically: client.quota.callback.class" in text
    assert admin.follower.log.latest_version() == -1


class ScaledQuotaCallback(DefaultQuotaCallback):
    """A reconfigurable callback (Kafka's ``Reconfigurable``): every limit times ``quota.scale``."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.0
        self.reconfigured: list[dict[str, object]] = []
        self._reset = False

    def configure(self, configs: Mapping[str, object]) -> None:
        self.scale = float(str(configs.get("quota.scale", 1.0)))

    def reconfigurable_configs(self) -> set[str]:
        return {"quota.scale", "max.connections"}  # a broker key it shares stays the broker's

    def validate_reconfiguration(self, configs: Mapping[str, object]) -> None:
        if float(str(configs["quota.scale"])) <= 0:
            raise ValueError("quota.scale must be above 0")

    def reconfigure(self, configs: Mapping[str, object]) -> None:
        self.reconfigured.append(dict(configs))
        self.configure(configs)
        self._reset = True

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        reset, self._reset = self._reset, False
        return reset

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        limit = super().quota_limit(quota_type, metric_tags)
        return None if limit is None else limit * self.scale


def _reconfigurable_replica(tmp_path: Path, name: str) -> tuple[SinkAdmin, ScaledQuotaCallback]:
    clock = FakeClock()
    callback = ScaledQuotaCallback()
    configs = {"quota.scale": "1.0", "node.id": 1}
    callback.configure(configs)
    store, quotas = SubscriptionStore(), create_quota_managers(QuotaConfig(), clock, callback=callback)
    follower = ConfigLogFollower(
        ConfigLog(str(tmp_path / "config_log"), replica_id=name), ConfigImage(store, quotas)
    )
    quotas.connections.add_listener("KAFKA")
    follower.image.broker_configs.bind(quotas.connections, callback, configs)
    admin = SinkAdmin(
        follower, ClientMetricsManager(store), quotas, SuperUserAuthorizer(["User:admin"]), clock.now_ms
    )
    return admin, callback


async def test_KF3_K4_a_reconfigurable_quota_callbacks_own_keys_change_at_run_time_on_every_replica(
    tmp_path: Path,
) -> None:
    """Kafka's ``DynamicClientQuotaCallback``: a ``Reconfigurable`` callback's ``reconfigurableConfigs``
    are dynamic broker configs, validated by its ``validateReconfiguration`` and applied with
    ``reconfigure`` (through ``DynamicBrokerConfig.maybeReconfigure``: the whole configs, when one of
    its keys changed), and Kafka's quota managers re-read limits when it says ``quotaResetRequired``."""
    (one, first), (two, second) = (
        _reconfigurable_replica(tmp_path, "r1"),
        _reconfigurable_replica(tmp_path, "r2"),
    )
    assert await one.alter_client_quotas(
        ADMIN, [QuotaAlteration(ClientQuotaEntity(user=DEFAULT), [("producer_byte_rate", 1000.0)])]
    ) == AlterClientQuotasResult([(ClientQuotaEntity(user=DEFAULT), Errors.NONE, None)])
    assert await one.broker_configs.alter(ADMIN, [("quota.scale", ConfigOp.SET, "0.5")]) == (
        Errors.NONE,
        None,
    )
    await two.follower.catch_up()
    for admin, callback in ((one, first), (two, second)):
        assert callback.reconfigured == [{"quota.scale": "0.5", "node.id": 1}]
        assert admin.broker_configs.describe(ADMIN)[1]["quota.scale"] == ("0.5", True)
        assert admin.quotas.produce.quota_limit("User:carol", "app") == 500.0
    error, text = await two.broker_configs.alter(ADMIN, [("quota.scale", ConfigOp.SET, "-1")])
    assert (error, text) == (
        Errors.INVALID_REQUEST,
        "Invalid value org.apache.kafka.common.config.ConfigException: quota.scale must be above 0 for "
        "configuration Invalid dynamic configuration",
    )
    three, third = _reconfigurable_replica(tmp_path, "r3")  # a replica that starts now
    await three.follower.catch_up()
    assert third.reconfigured == [{"quota.scale": "0.5", "node.id": 1}]
    assert await one.broker_configs.alter(ADMIN, [("max.connections", ConfigOp.SET, "9")]) == (
        Errors.NONE,
        None,
    )
    assert len(first.reconfigured) == 1  # not one of its keys: not reconfigured
    assert await two.broker_configs.alter(ADMIN, [("quota.scale", ConfigOp.DELETE, None)]) == (
        Errors.NONE,
        None,
    )
    await one.follower.catch_up()
    assert first.reconfigured[-1] == {"quota.scale": "1.0", "node.id": 1}  # what configure got
    assert "quota.scale" not in one.follower.image.broker_configs.values
