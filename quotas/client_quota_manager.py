"""Byte-rate quotas per (user, client-id) entity: Kafka's ``ClientQuotaManager`` (docs/rules.md QUO-3..QUO-10,
QUO-14).

One manager per quota type: PRODUCE (``producer_byte_rate``, bytes pushed to the sink) and FETCH
(``consumer_byte_rate``, bytes served back). Each client records into the sensor its quota metric tags
name (shared by every client with the same tags); a violation is answered with the time the client
must wait (``throttle.throttle_time_ms``). While no quota has ever been set (the QUO-3 mask is 0)
recording does nothing. Limit changes apply to existing sensors without resetting what they recorded.

The entities a manager keeps sensors for are chosen by clients (a ``<default>`` client-id quota gives
every client id its own), so they are capped: at most ``max_entities`` (``limits.max_quota_entities``)
per manager. A new entity over the cap evicts the one recorded least recently, removing all of its
sensors (counted in ``entities_evicted``); Kafka has no cap and keeps them until an hour without
records. Eviction only forgets the evicted entity's own rate history, so it can only make that
entity's next throttle smaller, never another entity's larger. The lookups from (user, client-id) to
sensors are a cache of as many entries, the oldest dropped first.

The request-time quota (``ClientRequestQuotaManager``) is this manager with a bounded throttle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from quotas.callback import ClientQuotaCallback, DefaultQuotaCallback
from quotas.entities import CUSTOM, ClientQuotaEntity, ClusterMetadata, QuotaType
from quotas.java import DOUBLE_MAX, INT_MAX, LONG_MAX
from quotas.sensor import KafkaMetric, MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import Avg, MetricConfig, Quota, Rate
from quotas.throttle import bounded_throttle_time_ms
from quotas.throttling import ThrottleCallback, ThrottledChannel, ThrottleQueue

__all__ = ["ClientQuotaManager", "ClientSensors", "QuotaManagerConfig"]

INACTIVE_SENSOR_EXPIRATION_MS: Final = 3600 * 1000
"""Quota and throttle-time sensors are dropped after an hour without records (QUO-6)."""
NO_LIMIT: Final = float(LONG_MAX)
"""The bound of a quota sensor no quota applies to (QUO-5)."""
DEFAULT_MAX_QUOTA_ENTITIES: Final = 50_000
"""Entities kept with sensors per quota type unless told otherwise (``limits.max_quota_entities``)."""


@dataclass(frozen=True, slots=True)
class QuotaManagerConfig:
    """``quota.window.num`` x ``quota.window.size.seconds`` (or the controller's pair), and the most
    entities kept with sensors (``limits.max_quota_entities``)."""

    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1
    max_entities: int = DEFAULT_MAX_QUOTA_ENTITIES
    metrics_num_samples: int = 2
    metrics_sample_window_ms: int = 30_000
    """The registry's default window (``metrics.num.samples`` x ``metrics.sample.window.ms``), which
    Kafka's throttle-time sensors use: a throttle stays visible for 30 to 60 s (AUD-G4)."""

    @property
    def window_ms(self) -> int:
        return self.quota_window_size_seconds * 1000

    @property
    def throttle_time_config(self) -> MetricConfig:
        return MetricConfig(samples=self.metrics_num_samples, time_window_ms=self.metrics_sample_window_ms)

    def metric_config(self, limit: float | None) -> MetricConfig:
        bound = NO_LIMIT if limit is None else float(limit)
        return MetricConfig(samples=self.num_quota_samples, time_window_ms=self.window_ms, quota=Quota(bound))


@dataclass(slots=True)
class ClientSensors:
    """The sensors one set of quota metric tags (one entity, ``name``) records into."""

    name: str
    tags: Mapping[str, str]
    quota_sensor: Sensor
    quota_metric: KafkaMetric
    throttle_sensor: Sensor
    evicted: bool = False
    """Set when the cap evicted this entity: lookups still pointing here must look up afresh."""


class ClientQuotaManager:
    """Quotas of one type for (user, client-id) entities, with throttling."""

    rate_metric_name = "byte-rate"
    max_throttle_time_ms: int = INT_MAX
    """Byte-rate throttles are not capped (beyond the int32 the response field holds)."""

    def __init__(
        self,
        quota_type: QuotaType,
        config: QuotaManagerConfig,
        metrics: Metrics,
        now_ms: int,
        callback: ClientQuotaCallback | None = None,
    ) -> None:
        self.quota_type = quota_type
        self.config = config
        self.metrics = metrics
        self._custom = callback is not None and type(callback) is not DefaultQuotaCallback
        self.callback: ClientQuotaCallback = callback if callback is not None else DefaultQuotaCallback()
        self._mask = CUSTOM if self._custom else 0
        self._by_client: OrderedDict[tuple[str, str], ClientSensors] = OrderedDict()
        self._by_sensor: OrderedDict[str, ClientSensors] = OrderedDict()
        """The entities, least recently recorded first."""
        self.entities_evicted = 0
        """Entities whose sensors were removed to keep at most ``config.max_entities``."""
        self.throttle_queue = ThrottleQueue(quota_type.value, metrics, now_ms)

    # -- recording --------------------------------------------------------------------------

    @property
    def entity_count(self) -> int:
        """The entities with sensors now (at most ``config.max_entities``)."""
        return len(self._by_sensor)

    @property
    def quotas_enabled(self) -> bool:
        """False while no quota of this type has ever been set (QUO-3)."""
        return self._mask != 0

    def record_and_get_throttle_time_ms(
        self, principal: str, client_id: str, value: float, now_ms: int
    ) -> int:
        """Record ``value`` for this client; the throttle time if its quota is now violated (QUO-7)."""
        if not self._mask:
            return 0
        sensors = None if self._custom else self._by_client.get((principal, client_id))
        if sensors is None or sensors.evicted:
            sensors = self._sensors_for(principal, client_id, now_ms)
        else:
            self._by_sensor.move_to_end(sensors.name)
        try:
            sensors.quota_sensor.record(value, now_ms)
        except QuotaViolationError as violation:
            return self._throttle_time_ms(violation, now_ms)
        return 0

    def unrecord(self, principal: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back ``value`` without a quota check (a fetch that was not served, QUO-9)."""
        if self._mask:
            self._sensors_for(principal, client_id, now_ms).quota_sensor.record(-value, now_ms, check=False)

    def _throttle_time_ms(self, violation: QuotaViolationError, now_ms: int) -> int:
        """STAT-8 over the violated rate's window at this instant, capped at the manager's maximum."""
        rate = violation.metric.stat
        assert isinstance(rate, Rate)
        window_ms = rate.window_size(violation.metric.config, now_ms)
        return bounded_throttle_time_ms(
            violation.value, violation.bound, window_ms, self.max_throttle_time_ms
        )

    def max_value_in_quota_window(self, principal: str, client_id: str, now_ms: int) -> float:
        """The most one request may carry: ``limit x (samples - 1) x window_s`` (QUO-10)."""
        if not self._mask:
            return DOUBLE_MAX
        limit = self.callback.quota_limit(
            self.quota_type, self._sensors_for(principal, client_id, now_ms).tags
        )
        if limit is None:
            return DOUBLE_MAX
        return limit * (self.config.num_quota_samples - 1) * self.config.quota_window_size_seconds

    def quota_limit(self, principal: str, client_id: str) -> float | None:
        """The limit that applies to this client now, if any."""
        return self.callback.quota_limit(self.quota_type, self.metric_tags(principal, client_id))

    def metric_tags(self, principal: str, client_id: str) -> Mapping[str, str]:
        """The tags of the quota entity this client records into (QUO-4): its sensors' when it has
        them (the default callback's tags change only with a quota, which re-creates the sensors)."""
        sensors = None if self._custom else self._by_client.get((principal, client_id))
        if sensors is not None:
            return sensors.tags
        return self.callback.quota_metric_tags(self.quota_type, principal, client_id)

    def sensor_name(self, principal: str, client_id: str) -> str:
        """The name of the quota sensor this client records into, Kafka's ``<quota type>-<tag values>``
        (``Produce-alice:`` for a ``<user>`` quota): clients with the same name share one quota, and so
        one throttle (``ingest.push.holds``)."""
        return _sensor_name(self.quota_type, self.metric_tags(principal, client_id))

    # -- throttling -------------------------------------------------------------------------

    def throttle(
        self, principal: str, client_id: str, throttle_ms: int, callback: ThrottleCallback, now_ms: int
    ) -> ThrottledChannel | None:
        """Mute the client for ``throttle_ms`` and record the throttle time (QUO-14)."""
        if throttle_ms <= 0:
            return None
        self.record_throttle_time(principal, client_id, throttle_ms, now_ms)
        return self.throttle_queue.throttle(callback, throttle_ms, now_ms)

    def record_throttle_time(self, principal: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """Record a throttle the client was told of in its ``throttle-time`` sensor."""
        if self._mask and throttle_ms > 0:
            self._sensors_for(principal, client_id, now_ms).throttle_sensor.record(throttle_ms, now_ms)

    # -- configuration ----------------------------------------------------------------------

    def update_quota(self, entity: ClientQuotaEntity, limit: float | None) -> None:
        """Set (or with None, remove) the quota of ``entity``, then re-bound existing sensors (QUO-8)."""
        if limit is None:
            self.callback.remove_quota(self.quota_type, entity)
        else:
            self.callback.update_quota(self.quota_type, entity, limit)
        if not self._custom:
            assert isinstance(self.callback, DefaultQuotaCallback)
            self._mask = self.callback.quota_types_enabled(self.quota_type)
        self._by_client.clear()  # the tags a client maps to may have changed
        self.update_quota_metric_configs()

    def update_quota_metric_configs(self) -> None:
        """Give every existing quota sensor the limit its tags resolve to now, keeping its data."""
        for sensors in list(self._by_sensor.values()):
            limit = self.callback.quota_limit(self.quota_type, sensors.tags)
            config = self.config.metric_config(limit)
            if sensors.quota_metric.config != config:
                sensors.quota_sensor.reconfigure(sensors.quota_metric, config)

    def update_cluster_metadata(self, cluster: ClusterMetadata) -> bool:
        """Tell the callback about the cluster; re-read every limit if it says they changed."""
        changed = self.callback.update_cluster_metadata(cluster)
        if changed:
            self.quota_limits_changed()
        return changed

    def quota_limits_changed(self) -> None:
        """The callback's limits changed: look every client up afresh and re-bound every sensor."""
        self._by_client.clear()
        self.update_quota_metric_configs()

    def expire(self, now_ms: int) -> int:
        """Drop this manager's sensors after an hour without records (STAT-9); return how many.

        Each sensor expires on its own, as in Kafka; a client whose quota or throttle-time sensor
        went is looked up afresh next time (the other sensor, if alive, keeps its data).
        """
        removed = 0
        for name, sensors in list(self._by_sensor.items()):
            gone = [s for s in (sensors.quota_sensor, sensors.throttle_sensor) if s.has_expired(now_ms)]
            if gone:
                for sensor in gone:
                    self.metrics.remove_sensor(sensor.name)
                del self._by_sensor[name]
                removed += len(gone)
        self._by_client.clear()
        return removed

    def close(self) -> None:
        self.throttle_queue.close()

    # -- sensors ----------------------------------------------------------------------------

    def _sensors_for(self, principal: str, client_id: str, now_ms: int) -> ClientSensors:
        """The sensors of this client, created on first use (every lookup polls a custom callback
        for a reset, QUO-13)."""
        if self._custom and self.callback.quota_reset_required(self.quota_type):
            self._by_client.clear()
            self.update_quota_metric_configs()
        key = (principal, client_id)
        sensors = self._by_client.get(key)
        if sensors is None or sensors.evicted:
            tags = self.callback.quota_metric_tags(self.quota_type, principal, client_id)
            name = _sensor_name(self.quota_type, tags)
            sensors = self._by_sensor.get(name)
            if sensors is None:
                if len(self._by_sensor) >= self.config.max_entities:
                    self._evict_least_recent()
                sensors = self._create_sensors(name, tags, now_ms)
                self._by_sensor[name] = sensors
            self._by_client[key] = sensors
            if len(self._by_client) > self.config.max_entities:
                self._by_client.popitem(last=False)
        self._by_sensor.move_to_end(sensors.name)
        return sensors

    def _evict_least_recent(self) -> None:
        """Remove every sensor of the entity recorded least recently, and count it."""
        _, sensors = self._by_sensor.popitem(last=False)
        sensors.evicted = True
        self.metrics.remove_sensor(sensors.quota_sensor.name)
        self.metrics.remove_sensor(sensors.throttle_sensor.name)
        self.entities_evicted += 1

    def _create_sensors(self, name: str, tags: Mapping[str, str], now_ms: int) -> ClientSensors:
        group = self.quota_type.value
        suffix = _sensor_suffix(tags)
        config = self.config.metric_config(self.callback.quota_limit(self.quota_type, tags))
        quota_sensor, created = self.metrics.sensor(name, now_ms, config, INACTIVE_SENSOR_EXPIRATION_MS)
        if created:
            self._add_quota_metrics(quota_sensor, tags)
        throttle_sensor, created = self.metrics.sensor(
            f"{group}ThrottleTime-{suffix}",
            now_ms,
            self.config.throttle_time_config,
            INACTIVE_SENSOR_EXPIRATION_MS,
        )
        if created:
            throttle_sensor.add(MetricName.of("throttle-time", group, tags), Avg())
        return ClientSensors(name, tags, quota_sensor, quota_sensor.metrics[0], throttle_sensor)

    def _add_quota_metrics(self, sensor: Sensor, tags: Mapping[str, str]) -> None:
        """Give a new quota sensor its metrics; the first one carries the quota."""
        sensor.add(MetricName.of(self.rate_metric_name, self.quota_type.value, tags), Rate())


def _sensor_suffix(tags: Mapping[str, str]) -> str:
    """Kafka's ``metricTagsToSensorSuffix``: the tag values joined with ``:``."""
    return ":".join(tags.values())


def _sensor_name(quota_type: QuotaType, tags: Mapping[str, str]) -> str:
    return f"{quota_type.value}-{_sensor_suffix(tags)}"
