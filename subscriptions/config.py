"""Configuration of the subscription core, keyed by Kafka's config names where Kafka has one.

``ClientMetricsConfig`` is a frozen value with Kafka's defaults; ``validate()`` reports every problem
at once; ``from_mapping`` reads Kafka-style keys (e.g. from the sink's YAML file).

| key | default | meaning |
|---|---|---|
| ``telemetry.max.bytes`` | 1048576 | largest PushTelemetry ``Metrics`` field, compressed (Kafka's key) |
| ``client.metrics.cache.max.size`` | 16384 | client instances kept (Kafka's fixed cache size) |
| ``client.metrics.instance.expiry.base.ms`` | 60000 | instances expire after max(this, 3 x interval) |
| ``client.metrics.match.pattern.max.length`` | 1024 | longest ``match`` regex accepted (applied by
  ``SubscriptionStore.for_config``) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from subscriptions.instance_cache import DEFAULT_CACHE_MAX_SIZE, DEFAULT_EXPIRY_BASE_MS
from subscriptions.patterns import DEFAULT_MAX_PATTERN_LENGTH

__all__ = ["ClientMetricsConfig", "ConfigError"]

TELEMETRY_MAX_BYTES_CONFIG: Final = "telemetry.max.bytes"
CACHE_MAX_SIZE_CONFIG: Final = "client.metrics.cache.max.size"
EXPIRY_BASE_MS_CONFIG: Final = "client.metrics.instance.expiry.base.ms"
MATCH_PATTERN_MAX_LENGTH_CONFIG: Final = "client.metrics.match.pattern.max.length"

DEFAULT_TELEMETRY_MAX_BYTES: Final = 1_048_576
_INT32_MAX: Final = 2**31 - 1


class ConfigError(ValueError):
    """Invalid configuration; ``problems`` lists every one found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ClientMetricsConfig:
    telemetry_max_bytes: int = DEFAULT_TELEMETRY_MAX_BYTES
    cache_max_size: int = DEFAULT_CACHE_MAX_SIZE
    instance_expiry_base_ms: int = DEFAULT_EXPIRY_BASE_MS
    match_pattern_max_length: int = DEFAULT_MAX_PATTERN_LENGTH

    KEYS: ClassVar[dict[str, str]] = {
        TELEMETRY_MAX_BYTES_CONFIG: "telemetry_max_bytes",
        CACHE_MAX_SIZE_CONFIG: "cache_max_size",
        EXPIRY_BASE_MS_CONFIG: "instance_expiry_base_ms",
        MATCH_PATTERN_MAX_LENGTH_CONFIG: "match_pattern_max_length",
    }

    @classmethod
    def default(cls) -> ClientMetricsConfig:
        return cls()

    def validate(self) -> list[str]:
        """Every problem with this config, empty when valid."""
        problems = []
        for key, attr in self.KEYS.items():
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(f"{key} must be an integer, got {value!r}")
            elif not 1 <= value <= _INT32_MAX:
                problems.append(f"{key} must be between 1 and {_INT32_MAX}, got {value}")
        return problems

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ClientMetricsConfig:
        """Build from Kafka-style keys; raise ConfigError listing unknown keys and bad values."""
        problems = [f"unknown key {key!r}" for key in values if key not in cls.KEYS]
        kwargs: dict[str, int] = {}
        for key, attr in cls.KEYS.items():
            if key not in values:
                continue
            raw = values[key]
            try:
                if isinstance(raw, bool) or not isinstance(raw, int | str):
                    raise ValueError
                kwargs[attr] = int(raw)
            except ValueError:
                problems.append(f"{key} must be an integer, got {raw!r}")
        config = cls(**kwargs)
        problems += config.validate()
        if problems:
            raise ConfigError(problems)
        return config
