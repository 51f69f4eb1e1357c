"""Quota configuration under Kafka's key names and defaults (docs/rules.md QUO-1, CONN-1).

| key | default | meaning |
|---|---|---|
| ``quota.window.num`` | 11 | samples kept by byte-rate, request and connection-rate sensors |
| ``quota.window.size.seconds`` | 1 | length of one sample; also the cap on request and connection throttles |
| ``controller.quota.window.num`` | 11 | samples of the mutation quota (its burst is num x size x rate) |
| ``controller.quota.window.size.seconds`` | 1 | length of one mutation-quota sample |
| ``max.connections`` | 2147483647 | connections across all listeners (the protected listener excepted) |
| ``max.connections.per.ip`` | 1000 | connections from one IP (Kafka: 2147483647, see below) |
| ``max.connections.per.ip.overrides`` | "" | ``host:count`` exceptions, comma separated |
| ``max.connection.creation.rate`` | 2147483647 | new connections per second across all listeners |
| ``client.quota.callback.class`` | none | a ``ClientQuotaCallback`` class by dotted path (KIP-257) |
| ``metrics.num.samples`` | 2 | samples of the throttle-time sensors (Kafka's metric registry default) |
| ``metrics.sample.window.ms`` | 30000 | length of one of their samples: a throttle stays visible 30 to 60 s |

``max.connections.per.ip`` is finite by default, unlike Kafka's: a client process keeps one or two
connections, and a thousand from one address is never met by a fleet of well-behaved clients (even
behind one NAT), while it keeps one host from taking every file descriptor of the sink
(``DEFAULT_MAX_CONNECTIONS_PER_IP``; 2147483647 switches it off).

Per-entity quotas (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``, ``connection_creation_rate``) are not config keys: they are set on
entities (``QuotaManagers.alter``), like Kafka's AlterClientQuotas.

The connection keys reach ``ConnectionQuotas`` as a ``ConnectionQuotaConfig``
(``QuotaConfig.connection_config``; Kafka's ``SocketServerConfigs``), and
``parse_per_ip_overrides`` reads ``max.connections.per.ip.overrides`` here and in dynamic broker
configs. As Kafka's config classes, this module imports no quota manager (an import contract in
``pyproject.toml`` checks it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from quotas.errors import INVALID_CONFIG, QuotaError
from quotas.java import INT_MAX

__all__ = [
    "DEFAULT_MAX_CONNECTIONS_PER_IP",
    "DISABLED",
    "ConnectionQuotaConfig",
    "QuotaConfig",
    "QuotaConfigError",
    "canonical_ip",
    "parse_per_ip_overrides",
]

DEFAULT_MAX_CONNECTIONS_PER_IP: Final = 1000
"""The sink's ``max.connections.per.ip`` unless configured (see the module docstring)."""
DISABLED: Final = INT_MAX
"""A connection limit or rate of ``2147483647`` means none (Kafka's default for all of them)."""

_INT_KEYS: Final = {
    "quota.window.num": ("num_quota_samples", 1),
    "quota.window.size.seconds": ("quota_window_size_seconds", 1),
    "controller.quota.window.num": ("num_controller_quota_samples", 1),
    "controller.quota.window.size.seconds": ("controller_quota_window_size_seconds", 1),
    "max.connections": ("max_connections", 0),
    "max.connections.per.ip": ("max_connections_per_ip", 0),
    "max.connection.creation.rate": ("max_connection_creation_rate", 0),
    "metrics.num.samples": ("metrics_num_samples", 1),
    "metrics.sample.window.ms": ("metrics_sample_window_ms", 1),
}


def canonical_ip(address: str) -> str:
    """The canonical text of an IP address (``::1`` and ``0:0:0:0:0:0:0:1`` are the same IP)."""
    return str(ipaddress.ip_address(address))


def parse_per_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: a comma list of ``host:count`` (IPv6 may be bracketed)."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"Invalid max.connections.per.ip.overrides entry {item!r}: expected host:count")
        overrides[canonical_ip(host.strip().strip("[]"))] = int(count)
    return overrides


@dataclass(frozen=True, slots=True)
class ConnectionQuotaConfig:
    """Kafka's connection-quota keys (CONN-1); listener limits are set per listener."""

    max_connections: int = DISABLED
    max_connections_per_ip: int = DISABLED
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = DISABLED
    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1
    metrics_num_samples: int = 2
    metrics_sample_window_ms: int = 30_000
    """The throttle-time sensors' window, as Kafka's registry default (AUD-G4)."""

    def validate(self) -> list[str]:
        problems = []
        for key, value in (
            ("max.connections", self.max_connections),
            ("max.connections.per.ip", self.max_connections_per_ip),
            ("max.connection.creation.rate", self.max_connection_creation_rate),
        ):
            if not 0 <= value <= INT_MAX:
                problems.append(f"{key} must be between 0 and {INT_MAX}, got {value}")
        for ip, count in self.max_connections_per_ip_overrides.items():
            if not 0 <= count <= INT_MAX:
                problems.append(f"max.connections.per.ip.overrides: {ip} must be between 0 and {INT_MAX}")
        if self.num_quota_samples < 1 or self.quota_window_size_seconds < 1:
            problems.append("quota.window.num and quota.window.size.seconds must be at least 1")
        return problems


class QuotaConfigError(QuotaError, ValueError):
    """INVALID_CONFIG (40): invalid quota configuration; ``problems`` lists every one found."""

    error_code = INVALID_CONFIG

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    num_quota_samples: int = 11
    quota_window_size_seconds: int = 1
    num_controller_quota_samples: int = 11
    controller_quota_window_size_seconds: int = 1
    max_connections: int = INT_MAX
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connection_creation_rate: int = INT_MAX
    client_quota_callback_class: str | None = None
    metrics_num_samples: int = 2
    metrics_sample_window_ms: int = 30_000

    KEYS: ClassVar[tuple[str, ...]] = (
        *_INT_KEYS,
        "max.connections.per.ip.overrides",
        "client.quota.callback.class",
    )

    @classmethod
    def default(cls) -> QuotaConfig:
        return cls()

    def validate(self) -> list[str]:
        """Every problem with this config, empty when valid."""
        problems = []
        for key, (attr, minimum) in _INT_KEYS.items():
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT_MAX:
                problems.append(f"{key} must be an integer between {minimum} and {INT_MAX}, got {value!r}")
        problems += self.connection_config().validate() if not problems else []
        return problems

    def as_mapping(self) -> dict[str, object]:
        """This config under Kafka's keys (what ``from_mapping`` reads back)."""
        values: dict[str, object] = {key: getattr(self, attr) for key, (attr, _) in _INT_KEYS.items()}
        values["max.connections.per.ip.overrides"] = ",".join(
            f"{ip}:{n}" for ip, n in self.max_connections_per_ip_overrides.items()
        )
        if self.client_quota_callback_class is not None:
            values["client.quota.callback.class"] = self.client_quota_callback_class
        return values

    def connection_config(self) -> ConnectionQuotaConfig:
        return ConnectionQuotaConfig(
            max_connections=self.max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=dict(self.max_connections_per_ip_overrides),
            max_connection_creation_rate=self.max_connection_creation_rate,
            num_quota_samples=self.num_quota_samples,
            quota_window_size_seconds=self.quota_window_size_seconds,
            metrics_num_samples=self.metrics_num_samples,
            metrics_sample_window_ms=self.metrics_sample_window_ms,
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> QuotaConfig:
        """Build from Kafka's keys; raise QuotaConfigError listing every problem."""
        problems = [f"unknown quota config key {key!r}" for key in values if key not in cls.KEYS]
        kwargs: dict[str, object] = {}
        for key, (attr, _) in _INT_KEYS.items():
            if key in values:
                raw = values[key]
                if (
                    isinstance(raw, bool)
                    or not isinstance(raw, int | str)
                    or not str(raw).strip().lstrip("+-").isdigit()
                ):
                    problems.append(f"{key} must be an integer, got {raw!r}")
                else:
                    kwargs[attr] = int(raw)
        overrides = values.get("max.connections.per.ip.overrides")
        if overrides is not None:
            try:
                kwargs["max_connections_per_ip_overrides"] = parse_per_ip_overrides(str(overrides))
            except ValueError as exc:
                problems.append(str(exc))
        callback = values.get("client.quota.callback.class")
        if callback is not None:
            kwargs["client_quota_callback_class"] = str(callback)
        config = cls(**kwargs)  # type: ignore[arg-type]
        problems += config.validate()
        if problems:
            raise QuotaConfigError(problems)
        return config
