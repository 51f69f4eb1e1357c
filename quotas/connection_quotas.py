"""Connection quotas: Kafka's ``ConnectionQuotas`` (docs/rules.md CONN-1..CONN-6).

Counts (broker-wide ``max.connections``, per listener, per IP with ``max.connections.per.ip`` and its
overrides) and creation rates (broker-wide ``max.connection.creation.rate``, per listener, per IP via
the ``connection_creation_rate`` quota). Accepting a connection (``inc``) records it in the broker and
listener rates, waits while those are over quota or no slot is free, then checks the IP rate (a
violation un-records the connection everywhere and rejects it with a throttle) and finally counts it
(over the per-IP limit it is rejected but stays counted until the caller closes it with ``dec``, as
in Kafka). The inter-broker listener, when more than one listener exists, is protected: it ignores
the broker-wide limits. Every connection throttle is capped at one quota window. The keys
(``ConnectionQuotaConfig``) and their parsing are ``quotas.config``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from quotas.clock import Clock
from quotas.config import DISABLED, ConnectionQuotaConfig, canonical_ip
from quotas.entities import IP_TAG
from quotas.java import INT_MAX
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import Avg, Gauge, MetricConfig, Quota, Rate
from quotas.throttle import bounded_throttle_time_ms

__all__ = ["ConnectionQuotas", "ConnectionThrottledError", "TooManyConnectionsError"]

GROUP: Final = "socket-server-metrics"
IP_SENSOR_EXPIRY_MS: Final = 3600 * 1000


class TooManyConnectionsError(Exception):
    """The IP already has its maximum number of connections (the connection stays counted)."""

    def __init__(self, ip: str, limit: int) -> None:
        super().__init__(f"Too many connections from {ip} (maximum = {limit})")
        self.ip = ip
        self.limit = limit


class ConnectionThrottledError(Exception):
    """The IP's connection-creation rate is over its quota; close the socket after the throttle."""

    def __init__(self, ip: str, start_ms: int, throttle_ms: int) -> None:
        super().__init__(f"{ip} throttled for {throttle_ms} ms")
        self.ip = ip
        self.start_ms = start_ms
        self.throttle_ms = throttle_ms

    def should_close(self, now_ms: int) -> bool:
        """The acceptor closes the throttled socket once strictly past the throttle (CONN-3)."""
        return now_ms > self.start_ms + self.throttle_ms


@dataclass(slots=True)
class _Listener:
    name: str
    max_connections: int
    rate_sensor: Sensor
    throttle_sensor: Sensor
    ip_throttle_sensor: Sensor
    count: int = 0


class ConnectionQuotas:
    """Connection counts and creation-rate quotas of one sink process."""

    def __init__(
        self,
        config: ConnectionQuotaConfig,
        metrics: Metrics,
        clock: Clock,
        *,
        inter_broker_listener: str | None = None,
    ) -> None:
        problems = config.validate()
        if problems:
            raise ValueError("; ".join(problems))
        self.config = config
        self.metrics = metrics
        self._clock = clock
        self.inter_broker_listener = inter_broker_listener
        self.max_throttle_time_ms = config.quota_window_size_seconds * 1000
        self._max_connections = config.max_connections
        self._max_connections_per_ip = config.max_connections_per_ip
        self._per_ip_overrides = {
            canonical_ip(ip): n for ip, n in config.max_connections_per_ip_overrides.items()
        }
        self._counts: dict[str, int] = {}
        self._total = 0
        self._listeners: dict[str, _Listener] = {}
        self._rate_per_ip: dict[str, int] = {}
        self._default_rate_per_ip = DISABLED
        self._ip_sensors: dict[str, Sensor] = {}
        self._slot_freed = asyncio.Event()
        now = clock.now_ms()
        self._broker_rate, _ = metrics.sensor(
            "Connection-Accept-Rate", now, self._rate_config(config.max_connection_creation_rate)
        )
        if not self._broker_rate.metrics:
            self._broker_rate.add(MetricName.of("broker-connection-accept-rate", GROUP), Rate())

    # -- configuration ----------------------------------------------------------------------

    def _rate_config(self, limit: int) -> MetricConfig:
        return MetricConfig(
            samples=self.config.num_quota_samples,
            time_window_ms=self.config.quota_window_size_seconds * 1000,
            quota=Quota(float(limit)),
        )

    def add_listener(
        self, name: str, *, max_connections: int = DISABLED, max_connection_creation_rate: int = DISABLED
    ) -> None:
        """Register a listener with its ``listener.name.<l>.max.connections`` and creation rate."""
        if max_connection_creation_rate <= 0:
            raise ValueError(f"listener.name.{name}.max.connection.creation.rate must be > 0")
        now = self._clock.now_ms()
        tags = {"listener": name}
        rate, _ = self.metrics.sensor(
            f"Connection-Accept-Rate-{name}", now, self._rate_config(max_connection_creation_rate)
        )
        if not rate.metrics:
            rate.add(MetricName.of("connection-accept-rate", GROUP, tags), Rate())
        avg_config = MetricConfig(
            samples=self.config.metrics_num_samples, time_window_ms=self.config.metrics_sample_window_ms
        )
        throttle, _ = self.metrics.sensor(f"ConnectionAcceptThrottleTime-{name}", now, avg_config)
        if not throttle.metrics:
            throttle.add(MetricName.of("connection-accept-throttle-time", GROUP, tags), Avg())
        ip_throttle, _ = self.metrics.sensor(f"IpConnectionAcceptThrottleTime-{name}", now, avg_config)
        if not ip_throttle.metrics:
            ip_throttle.add(MetricName.of("ip-connection-accept-throttle-time", GROUP, tags), Avg())
        listener = _Listener(name, max_connections, rate, throttle, ip_throttle)
        count, _ = self.metrics.sensor(f"ConnectionCount-{name}", now)
        if not count.metrics:
            count.add(MetricName.of("connection-count", GROUP, tags), Gauge(lambda: listener.count))
        self._listeners[name] = listener
        self._slot_freed.set()  # a second listener makes the inter-broker one protected (CONN-2)

    def remove_listener(self, name: str) -> None:
        listener = self._listeners.pop(name)
        for sensor in (listener.rate_sensor, listener.throttle_sensor, listener.ip_throttle_sensor):
            self.metrics.remove_sensor(sensor.name)
        self.metrics.remove_sensor(f"ConnectionCount-{name}")
        self._slot_freed.set()

    def update_max_connections(self, max_connections: int) -> None:
        """``max.connections`` at run time; a raised limit wakes the acceptors waiting for a slot."""
        self._max_connections = max_connections
        self._slot_freed.set()

    def update_max_connections_per_ip(
        self, max_connections_per_ip: int, overrides: Mapping[str, int]
    ) -> None:
        """``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` at run time (Kafka's
        ``updateMaxConnectionsPerIp``); connections already open are not closed."""
        self._max_connections_per_ip = max_connections_per_ip
        self._per_ip_overrides = {canonical_ip(ip): n for ip, n in overrides.items()}

    def update_broker_max_connection_rate(self, rate: int) -> None:
        """``max.connection.creation.rate`` at run time; the sensor keeps what it recorded."""
        self._broker_rate.reconfigure(self._broker_rate.metrics[0], self._rate_config(rate))
        self._slot_freed.set()

    def update_listener(self, name: str, *, max_connections: int, max_connection_creation_rate: int) -> None:
        """``listener.name.<l>.max.connections`` and ``.max.connection.creation.rate`` at run time (Kafka's
        ``ListenerConnectionQuota.reconfigure``); a raised limit wakes the listener's waiting acceptors."""
        listener = self._listener(name)
        listener.max_connections = max_connections
        listener.rate_sensor.reconfigure(
            listener.rate_sensor.metrics[0], self._rate_config(max_connection_creation_rate)
        )
        self._slot_freed.set()

    @property
    def listener_names(self) -> tuple[str, ...]:
        return tuple(self._listeners)

    def limits(self) -> dict[str, int | dict[str, int]]:
        """The limits in force, by Kafka key (the listeners' as ``listener.name.<l>.*``, lower case)."""
        limits: dict[str, int | dict[str, int]] = {
            "max.connections": self._max_connections,
            "max.connections.per.ip": self._max_connections_per_ip,
            "max.connections.per.ip.overrides": dict(self._per_ip_overrides),
            "max.connection.creation.rate": int(self._bound(self._broker_rate)),
        }
        for name, listener in self._listeners.items():
            prefix = f"listener.name.{name.lower()}."
            limits[prefix + "max.connections"] = listener.max_connections
            limits[prefix + "max.connection.creation.rate"] = int(self._bound(listener.rate_sensor))
        return limits

    @staticmethod
    def _bound(sensor: Sensor) -> float:
        quota = sensor.metrics[0].config.quota
        return INT_MAX if quota is None else quota.bound

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        """Set or remove (``rate=None``) the ``connection_creation_rate`` of one IP, or with
        ``ip=None`` the default of every IP; existing sensors keep their data (CONN-6)."""
        if ip is None:
            self._default_rate_per_ip = DISABLED if rate is None else rate
            targets = list(self._ip_sensors)
        else:
            ip = canonical_ip(ip)
            if rate is None:
                self._rate_per_ip.pop(ip, None)
            else:
                self._rate_per_ip[ip] = rate
            targets = [ip] if ip in self._ip_sensors else []
        for address in targets:
            sensor = self._ip_sensors[address]
            sensor.reconfigure(sensor.metrics[0], self._rate_config(self.connection_rate_for_ip(address)))

    def connection_rate_for_ip(self, ip: str) -> int:
        return self._rate_per_ip.get(ip, self._default_rate_per_ip)

    # -- state ------------------------------------------------------------------------------

    def get(self, ip: str) -> int:
        return self._counts.get(canonical_ip(ip), 0)

    @property
    def total(self) -> int:
        return self._total

    def listener_count(self, listener: str) -> int:
        return self._listener(listener).count

    def protected(self, listener: str) -> bool:
        """The inter-broker listener is protected while another listener exists (CONN-2)."""
        return listener == self.inter_broker_listener and len(self._listeners) > 1

    def max_connections_exceeded(self, listener: str) -> bool:
        """Over the broker-wide count: close the least recently used connection (CONN-4)."""
        return self._total > self._max_connections and not self.protected(listener)

    def _listener(self, name: str) -> _Listener:
        try:
            return self._listeners[name]
        except KeyError:
            raise ValueError(f"unknown listener {name!r}") from None

    def _slot_available(self, listener: _Listener) -> bool:
        if listener.count >= listener.max_connections:
            return False
        return self.protected(listener.name) or self._total < self._max_connections

    # -- accepting and closing --------------------------------------------------------------

    async def inc(self, listener_name: str, ip: str) -> None:
        """Accept a connection from ``ip`` on the listener, waiting for the creation rates and a
        free slot (CONN-3); raise ConnectionThrottledError or TooManyConnectionsError."""
        listener = self._listener(listener_name)
        ip = canonical_ip(ip)
        start = self._clock.now_ms()
        throttle_ms = self._record_connection_and_get_throttle_ms(listener, start)
        if throttle_ms > 0 or not self._slot_available(listener):
            end = start + throttle_ms
            while True:
                remaining = end - self._clock.now_ms()
                if remaining <= 0 and self._slot_available(listener):
                    break
                self._slot_freed.clear()
                await self._clock.wait(self._slot_freed, remaining if remaining > 0 else None)
        self._record_ip_connection_maybe_throttle(listener, ip)
        self._count(listener, ip)

    def dec(self, listener_name: str, ip: str) -> None:
        """A connection closed: free its slot and wake waiting acceptors (also after its listener
        was removed)."""
        listener = self._listeners.get(listener_name)
        ip = canonical_ip(ip)
        count = self._counts.get(ip)
        if count is None:
            raise ValueError(
                f"Attempted to decrease connection count for address with no connections, address: {ip}"
            )
        if count == 1:
            del self._counts[ip]
        else:
            self._counts[ip] = count - 1
        self._total -= 1
        if listener is not None:
            listener.count -= 1
        self._slot_freed.set()

    def prune(self) -> int:
        """Forget IP sensors the registry expired (after an hour without connections)."""
        gone = [
            ip
            for ip, sensor in self._ip_sensors.items()
            if self.metrics.get_sensor(sensor.name) is not sensor
        ]
        for ip in gone:
            del self._ip_sensors[ip]
        return len(gone)

    def _count(self, listener: _Listener, ip: str) -> None:
        previous = self._counts.get(ip, 0)
        self._counts[ip] = previous + 1
        self._total += 1
        listener.count += 1
        limit = self._per_ip_overrides.get(ip, self._max_connections_per_ip)
        if previous >= limit:
            raise TooManyConnectionsError(ip, limit)

    def _record_and_get_throttle_ms(self, sensor: Sensor, now_ms: int) -> int:
        try:
            sensor.record(1.0, now_ms)
        except QuotaViolationError as violation:
            rate = violation.metric.stat
            assert isinstance(rate, Rate)
            window = rate.window_size(violation.metric.config, now_ms)
            return bounded_throttle_time_ms(
                violation.value, violation.bound, window, self.max_throttle_time_ms
            )
        return 0

    def _record_connection_and_get_throttle_ms(self, listener: _Listener, now_ms: int) -> int:
        broker_throttle = 0
        if not self.protected(listener.name):
            broker_throttle = self._record_and_get_throttle_ms(self._broker_rate, now_ms)
        throttle = max(broker_throttle, self._record_and_get_throttle_ms(listener.rate_sensor, now_ms), 0)
        if throttle > 0:
            listener.throttle_sensor.record(throttle, now_ms)
        return throttle

    def _record_ip_connection_maybe_throttle(self, listener: _Listener, ip: str) -> None:
        rate = self.connection_rate_for_ip(ip)
        if rate == DISABLED:
            return
        now = self._clock.now_ms()
        sensor = self._ip_sensors.get(ip)
        if sensor is None or self.metrics.get_sensor(sensor.name) is not sensor:
            sensor, created = self.metrics.sensor(
                f"Connection-Accept-Rate-{ip}", now, self._rate_config(rate), IP_SENSOR_EXPIRY_MS
            )
            if created:
                sensor.add(MetricName.of("connection-accept-rate", GROUP, {IP_TAG: ip}), Rate())
            self._ip_sensors[ip] = sensor
        throttle_ms = self._record_and_get_throttle_ms(sensor, now)
        if throttle_ms > 0:
            sensor.record(-1.0, now, check=False)
            listener.rate_sensor.record(-1.0, now, check=False)
            if not self.protected(listener.name):
                self._broker_rate.record(-1.0, now, check=False)
            listener.ip_throttle_sensor.record(throttle_ms, now)
            raise ConnectionThrottledError(ip, now, throttle_ms)
