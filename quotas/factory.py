"""Builds every quota manager of one sink process as one bundle with a single ``close()``.

``QuotaManagers`` holds the byte-rate managers (PRODUCE for pushed bytes, FETCH for bytes served
back), the request-time manager, the mutation-quota manager, the connection quotas and the shared
metrics registry; ``alter`` routes an AlterClientQuotas-style change to the manager that owns the key;
``run_reapers`` runs the one reaper task per quota type; ``expire`` drops idle sensors. Each client
manager keeps sensors for at most ``max_quota_entities`` entities (``limits.max_quota_entities``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace

from quotas.callback import ClientQuotaCallback, load_quota_callback
from quotas.client_quota_manager import DEFAULT_MAX_QUOTA_ENTITIES, ClientQuotaManager, QuotaManagerConfig
from quotas.clock import Clock
from quotas.config import QuotaConfig, QuotaConfigError
from quotas.connection_quotas import ConnectionQuotas
from quotas.controller_mutation_quota_manager import ControllerMutationQuotaManager
from quotas.entities import (
    CONNECTION_CREATION_RATE,
    DEFAULT,
    ClientQuotaEntity,
    ClusterMetadata,
    QuotaType,
    validate_quota,
)
from quotas.java import sanitize
from quotas.request_quota_manager import ClientRequestQuotaManager
from quotas.sensor import MetricName, Metrics

__all__ = ["QuotaManagers", "create_quota_managers"]


@dataclass(frozen=True, slots=True)
class QuotaManagers:
    config: QuotaConfig
    metrics: Metrics
    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientRequestQuotaManager
    controller_mutation: ControllerMutationQuotaManager
    connections: ConnectionQuotas
    callback: ClientQuotaCallback | None

    def client_managers(self) -> tuple[ClientQuotaManager, ...]:
        return (self.produce, self.fetch, self.request, self.controller_mutation)

    def manager(self, quota_type: QuotaType) -> ClientQuotaManager:
        return {m.quota_type: m for m in self.client_managers()}[quota_type]

    def alter(self, entity: ClientQuotaEntity, key: str, value: float | None) -> None:
        """Set (or with None remove) one quota of one entity, named as AlterClientQuotas names it
        (the user's principal name as is); raise QuotaEntityError (42) first if Kafka's controller
        would refuse it."""
        validate_quota(entity, key, value)
        if entity.user is not None and entity.user != DEFAULT:
            entity = replace(entity, user=sanitize(entity.user))  # sensors are tagged sanitized
        if key == CONNECTION_CREATION_RATE:
            ip = None if entity.ip == DEFAULT else entity.ip
            self.connections.update_ip_connection_rate_quota(ip, None if value is None else int(value))
            return
        for manager in self.client_managers():
            if manager.quota_type.config_key == key:
                manager.update_quota(entity, value)

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        """Tell each callback about the cluster once (the managers usually share one), and have every
        manager whose callback says the limits changed re-read them (KIP-257; AUD-C14: asking a
        shared callback once per manager re-bounded only the first manager's sensors)."""
        answers: dict[int, bool] = {}
        for manager in self.client_managers():
            key = id(manager.callback)
            if key not in answers:
                answers[key] = manager.callback.update_cluster_metadata(cluster)
            if answers[key]:
                manager.quota_limits_changed()
        return any(answers.values())

    def expire(self, now_ms: int) -> int:
        """Drop sensors idle past their expiry (call every 30 s, as Kafka's expiry task does)."""
        removed = sum(m.expire(now_ms) for m in self.client_managers())
        removed += len(self.metrics.expire(now_ms))
        self.connections.prune()
        return removed

    async def run_reapers(self, clock: Clock) -> None:
        """One reaper per quota type, until ``close()``."""
        await asyncio.gather(*(m.throttle_queue.run(clock) for m in self.client_managers()))

    def values(self, now_ms: int) -> dict[MetricName, float]:
        """Every sensor's metrics, for ``/metrics``."""
        return self.metrics.values(now_ms)

    def close(self) -> None:
        """Unmute every throttled client, stop the reapers, close the callback."""
        for manager in self.client_managers():
            manager.close()
        if self.callback is not None:
            self.callback.close()


def create_quota_managers(
    config: QuotaConfig,
    clock: Clock,
    *,
    inter_broker_listener: str | None = None,
    callback: ClientQuotaCallback | None = None,
    max_quota_entities: int = DEFAULT_MAX_QUOTA_ENTITIES,
    callback_configs: Mapping[str, object] | None = None,
) -> QuotaManagers:
    """Build every manager from ``config`` (raising QuotaConfigError for a bad config), each keeping
    sensors for at most ``max_quota_entities`` entities. A configured callback class is given
    ``callback_configs`` (the sink's configuration, Kafka's ``configure(configs)``; AUD-C16),
    else ``config``'s keys."""
    problems = config.validate()
    if problems:
        raise QuotaConfigError(problems)
    if callback is None and config.client_quota_callback_class:
        configs = config.as_mapping() if callback_configs is None else callback_configs
        callback = load_quota_callback(config.client_quota_callback_class, configs)
    now = clock.now_ms()
    metrics = Metrics()
    client = QuotaManagerConfig(
        config.num_quota_samples,
        config.quota_window_size_seconds,
        max_quota_entities,
        config.metrics_num_samples,
        config.metrics_sample_window_ms,
    )
    controller = QuotaManagerConfig(
        config.num_controller_quota_samples,
        config.controller_quota_window_size_seconds,
        max_quota_entities,
        config.metrics_num_samples,
        config.metrics_sample_window_ms,
    )
    return QuotaManagers(
        config=config,
        metrics=metrics,
        produce=ClientQuotaManager(QuotaType.PRODUCE, client, metrics, now, callback),
        fetch=ClientQuotaManager(QuotaType.FETCH, client, metrics, now, callback),
        request=ClientRequestQuotaManager(client, metrics, now, callback),
        controller_mutation=ControllerMutationQuotaManager(controller, metrics, now, callback),
        connections=ConnectionQuotas(
            config.connection_config(), metrics, clock, inter_broker_listener=inter_broker_listener
        ),
        callback=callback,
    )
