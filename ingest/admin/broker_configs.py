"""The dynamic broker configs as Kafka's admin APIs change them: BROKER resources of DescribeConfigs,
IncrementalAlterConfigs and AlterConfigs (``kafka-configs.sh --entity-type brokers --entity-default
--alter --add-config max.connections=...``), through the config log, applied on every replica
(``dynamic_configs``) without a restart.

Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS (super users; else
CLUSTER_AUTHORIZATION_FAILED). Kafka's answers, as a Kafka 4.4 broker gives them (KF3-C-11):
INVALID_REQUEST for a key that cannot change at run time or a value it refuses, in the broker's words;
INVALID_CONFIG for an APPEND/SUBTRACT (these keys are not lists). The cluster default
(resource name ``""``) and this node's id name the same scope here: every replica is one "broker" that
applies every change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ingest.admin.config_log import ConfigLogError, ConfigLogFollower
from ingest.admin.dynamic_configs import BrokerConfigChange, DynamicBrokerConfigs
from subscriptions import ClientContext, Errors
from subscriptions.admin import ConfigOp, Operation

__all__ = ["BrokerConfigAdmin"]


class BrokerConfigAdmin:
    """Describe and alter the dynamic broker configs, through the config log."""

    def __init__(
        self,
        follower: ConfigLogFollower,
        authorize: Callable[[ClientContext, Operation], bool],
        now_ms: Callable[[], int],
    ) -> None:
        self.follower = follower
        self._authorize = authorize
        self._now_ms = now_ms

    @property
    def configs(self) -> DynamicBrokerConfigs:
        return self.follower.image.broker_configs

    def describe(self, client: ClientContext) -> tuple[Errors, dict[str, tuple[str, bool]]]:
        """Every key: (value in force, whether the config log set it)."""
        if not self._authorize(client, "DESCRIBE_CONFIGS"):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, {}
        dynamic = self.configs.values
        return Errors.NONE, {key: (value, key in dynamic) for key, value in self.configs.effective().items()}

    async def alter(
        self,
        client: ClientContext,
        ops: Sequence[tuple[str, ConfigOp, str | None]],
        *,
        replace: bool = False,
        validate_only: bool = False,
    ) -> tuple[Errors, str | None]:
        """IncrementalAlterConfigs (SET, DELETE), or with ``replace`` AlterConfigs (the given keys set,
        every other dynamic key removed)."""
        if not self._authorize(client, "ALTER_CONFIGS"):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed (ALTER_CONFIGS)"
        changes: dict[str, str | None] = dict.fromkeys(self.configs.values) if replace else {}
        for key, op, value in ops:
            if op in (ConfigOp.APPEND, ConfigOp.SUBTRACT):
                verb = "append" if op is ConfigOp.APPEND else "subtract"
                return Errors.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {key}"
            changes[key] = None if op is ConfigOp.DELETE else (value or "")
        if (problem := self.configs.problem(changes)) is not None:
            return Errors.INVALID_REQUEST, problem
        if validate_only or not changes:
            return Errors.NONE, None
        records = [BrokerConfigChange(key, value) for key, value in changes.items()]
        try:
            await self.follower.write_absolute(records, client.principal, self._now_ms())
        except ConfigLogError as exc:
            return exc.error, str(exc)
        return Errors.NONE, None
