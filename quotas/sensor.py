"""Sensors and the metrics registry (Kafka's ``Sensor``, ``KafkaMetric`` and ``Metrics``; STAT-7,
STAT-9 in docs/rules.md).

A ``Sensor`` records a value into every stat it holds and then checks each metric that has a quota,
raising ``QuotaViolationError`` with the observed value and the bound (the record is not rolled back;
callers unrecord explicitly where Kafka does). The ``Metrics`` registry creates sensors on first use,
removes them after their inactivity expiry, and publishes every metric's value. Sensors are recorded
from one thread, the event loop's (Kafka synchronizes each sensor because its request handlers are
threads); the registry's lock guards creation, removal, expiry and reads, so publishing the values
must also happen on that thread (the front end's ``/metrics`` handler runs on the loop).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from quotas.stats import Measurable, MetricConfig, Rate, TokenBucket

__all__ = ["KafkaMetric", "MetricName", "Metrics", "QuotaViolationError", "Sensor"]


class MetricName(NamedTuple):
    """A metric's identity: name, group and tags (kept as sorted pairs so it is hashable)."""

    name: str
    group: str
    tags: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, name: str, group: str, tags: Mapping[str, str] | None = None) -> MetricName:
        return cls(name, group, tuple(sorted((tags or {}).items())))

    @property
    def tag_map(self) -> dict[str, str]:
        return dict(self.tags)


class QuotaViolationError(Exception):
    """A metric's value broke its quota: ``value`` observed against ``bound``."""

    def __init__(self, metric: KafkaMetric, value: float, bound: float) -> None:
        super().__init__(metric, value, bound)
        self.metric = metric
        self.value = value
        self.bound = bound

    def __str__(self) -> str:  # formatted only when shown: violations are common on the hot path
        name = self.metric.metric_name
        return f"{name.name} {name.tag_map} is {self.value}, bound {self.bound}"


class KafkaMetric:
    """A named measurable with its (replaceable) config."""

    __slots__ = ("config", "metric_name", "stat")

    def __init__(self, metric_name: MetricName, stat: Measurable, config: MetricConfig) -> None:
        self.metric_name = metric_name
        self.stat = stat
        self.config = config

    def measure(self, now_ms: int) -> float:
        return self.stat.measure(self.config, now_ms)


class Sensor:
    """Records values into its metrics and enforces their quotas (STAT-7)."""

    __slots__ = (
        "_fast",
        "_metrics",
        "_parents",
        "_quota_metrics",
        "config",
        "inactive_expiry_ms",
        "last_record_ms",
        "name",
    )

    def __init__(
        self,
        name: str,
        config: MetricConfig,
        now_ms: int,
        inactive_expiry_ms: int | None = None,
        *,
        parents: Iterable[Sensor] = (),
    ) -> None:
        self.name = name
        self.config = config
        self.inactive_expiry_ms = inactive_expiry_ms
        self.last_record_ms = now_ms
        self._metrics: list[KafkaMetric] = []
        self._quota_metrics: list[KafkaMetric] = []
        self._parents = tuple(parents)
        self._fast: tuple[KafkaMetric, Rate, MetricConfig, float, bool] | None = None

    @property
    def metrics(self) -> tuple[KafkaMetric, ...]:
        return tuple(self._metrics)

    def add(
        self, metric_name: MetricName, stat: Measurable, config: MetricConfig | None = None
    ) -> KafkaMetric:
        metric = KafkaMetric(metric_name, stat, config or self.config)
        self._metrics.append(metric)
        self._refresh_quota_metrics()
        return metric

    def reconfigure(self, metric: KafkaMetric, config: MetricConfig) -> None:
        """Replace a metric's config (e.g. a new quota bound) without touching recorded data."""
        metric.config = config
        self._refresh_quota_metrics()

    def _refresh_quota_metrics(self) -> None:
        self._quota_metrics = [m for m in self._metrics if m.config.quota is not None]
        only = self._metrics[0] if len(self._metrics) == 1 else None
        self._fast = None
        if (
            only is not None
            and only.config.quota is not None
            and isinstance(only.stat, Rate)
            and not self._parents
        ):
            # the usual quota sensor: one bounded rate; refreshed whenever its config changes
            self._fast = (only, only.stat, only.config, only.config.quota.bound, only.config.quota.upper)

    def record(self, value: float, now_ms: int, check: bool = True) -> None:
        """Record into every metric, then (if ``check``) raise on the first violated quota."""
        self.last_record_ms = now_ms
        fast = self._fast
        if fast is not None and check:
            metric, rate, config, bound, upper = fast
            measured = rate.record_and_measure(config, value, now_ms)
            if not (measured <= bound if upper else measured >= bound):
                raise QuotaViolationError(metric, measured, bound)
            return
        for metric in self._metrics:
            metric.stat.record(metric.config, value, now_ms)
        if check and self._quota_metrics:
            self.check_quotas(now_ms)
        for parent in self._parents:
            parent.record(value, now_ms, check)

    def check_quotas(self, now_ms: int) -> None:
        """Raise QuotaViolationError if a quota is violated now (nothing is recorded)."""
        for metric in self._quota_metrics:
            quota = metric.config.quota
            assert quota is not None
            value = metric.stat.measure(metric.config, now_ms)
            if isinstance(metric.stat, TokenBucket):
                if value < 0:
                    raise QuotaViolationError(metric, value, quota.bound)
            elif not quota.acceptable(value):
                raise QuotaViolationError(metric, value, quota.bound)

    def has_expired(self, now_ms: int) -> bool:
        """Inactive for strictly longer than its expiry (STAT-9)."""
        expiry = self.inactive_expiry_ms
        return expiry is not None and now_ms - self.last_record_ms > expiry


class Metrics:
    """The registry: sensors by name, metrics by name, expiry of inactive sensors."""

    def __init__(self, default_config: MetricConfig | None = None) -> None:
        self.default_config = default_config or MetricConfig()
        self._sensors: dict[str, Sensor] = {}
        self._lock = threading.Lock()

    def get_sensor(self, name: str) -> Sensor | None:
        return self._sensors.get(name)

    def sensor(
        self,
        name: str,
        now_ms: int,
        config: MetricConfig | None = None,
        inactive_expiry_ms: int | None = None,
        parents: Iterable[Sensor] = (),
    ) -> tuple[Sensor, bool]:
        """Get or create sensor ``name``; also say whether it was created (so the caller adds its
        metrics). Creation is guarded, so concurrent callers get the same sensor."""
        sensor = self._sensors.get(name)
        if sensor is not None:
            return sensor, False
        with self._lock:
            sensor = self._sensors.get(name)
            if sensor is not None:
                return sensor, False
            sensor = Sensor(
                name,
                config or self.default_config,
                now_ms,
                inactive_expiry_ms,
                parents=parents,
            )
            self._sensors[name] = sensor
            return sensor, True

    def remove_sensor(self, name: str) -> bool:
        with self._lock:
            return self._sensors.pop(name, None) is not None

    def expire(self, now_ms: int) -> list[str]:
        """Remove every sensor inactive past its expiry; return their names (STAT-9)."""
        with self._lock:
            expired = [name for name, s in self._sensors.items() if s.has_expired(now_ms)]
            for name in expired:
                del self._sensors[name]
        return expired

    def sensors(self) -> list[Sensor]:
        with self._lock:
            return list(self._sensors.values())

    def values(self, now_ms: int) -> dict[MetricName, float]:
        """Every metric's current value, for publishing."""
        with self._lock:
            return {m.metric_name: m.measure(now_ms) for s in self._sensors.values() for m in s._metrics}

    def __len__(self) -> int:
        return len(self._sensors)
