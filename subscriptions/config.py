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
| ``client.metrics.accepted.compression.types`` | zstd,lz4,gzip,snappy | ``AcceptedCompressionTypes`` of
  every Get, in preference order (clients use the first they support; TEL-15); any of ``zstd``, ``lz4``,
  ``gzip``, ``snappy``. Pushes compressed with any Kafka codec, or none, are accepted whatever is
  advertised (TEL-16, PD-6). |

The first four are integers; the last is a list, written as Kafka writes lists (``"lz4, gzip"``) or as a
YAML list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from subscriptions.instance_cache import DEFAULT_CACHE_MAX_SIZE, DEFAULT_EXPIRY_BASE_MS
from subscriptions.messages import CompressionType
from subscriptions.patterns import DEFAULT_MAX_PATTERN_LENGTH

__all__ = ["ClientMetricsConfig", "ConfigError"]

TELEMETRY_MAX_BYTES_CONFIG: Final = "telemetry.max.bytes"
CACHE_MAX_SIZE_CONFIG: Final = "client.metrics.cache.max.size"
EXPIRY_BASE_MS_CONFIG: Final = "client.metrics.instance.expiry.base.ms"
MATCH_PATTERN_MAX_LENGTH_CONFIG: Final = "client.metrics.match.pattern.max.length"
ACCEPTED_COMPRESSION_TYPES_CONFIG: Final = "client.metrics.accepted.compression.types"
DEFAULT_ACCEPTED_COMPRESSION_TYPES: Final = (
    CompressionType.ZSTD,
    CompressionType.LZ4,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
)
"""Kafka's list, in its preference order (TEL-15)."""
_ADVERTISABLE: Final = {c.name.lower(): c for c in DEFAULT_ACCEPTED_COMPRESSION_TYPES}

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
    accepted_compression_types: tuple[CompressionType, ...] = DEFAULT_ACCEPTED_COMPRESSION_TYPES

    KEYS: ClassVar[dict[str, str]] = {
        TELEMETRY_MAX_BYTES_CONFIG: "telemetry_max_bytes",
        CACHE_MAX_SIZE_CONFIG: "cache_max_size",
        EXPIRY_BASE_MS_CONFIG: "instance_expiry_base_ms",
        MATCH_PATTERN_MAX_LENGTH_CONFIG: "match_pattern_max_length",
        ACCEPTED_COMPRESSION_TYPES_CONFIG: "accepted_compression_types",
    }

    @classmethod
    def default(cls) -> ClientMetricsConfig:
        return cls()

    def validate(self) -> list[str]:
        """Every problem with this config, empty when valid."""
        problems = []
        for key, attr in self.KEYS.items():
            if key == ACCEPTED_COMPRESSION_TYPES_CONFIG:
                continue  # a list, checked below
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(f"{key} must be an integer, got {value!r}")
            elif not 1 <= value <= _INT32_MAX:
                problems.append(f"{key} must be between 1 and {_INT32_MAX}, got {value}")
        types = self.accepted_compression_types
        if len(set(types)) != len(types) or not set(types) <= set(DEFAULT_ACCEPTED_COMPRESSION_TYPES):
            problems.append(
                f"{ACCEPTED_COMPRESSION_TYPES_CONFIG} must list distinct types among "
                f"{', '.join(_ADVERTISABLE)}, got {types!r}"
            )
        return problems

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> ClientMetricsConfig:
        """Build from Kafka-style keys; raise ConfigError listing unknown keys and bad values."""
        problems = [f"unknown key {key!r}" for key in values if key not in cls.KEYS]
        kwargs: dict[str, object] = {}
        for key, attr in cls.KEYS.items():
            if key not in values or key == ACCEPTED_COMPRESSION_TYPES_CONFIG:
                continue
            raw = values[key]
            try:
                if isinstance(raw, bool) or not isinstance(raw, int | str):
                    raise ValueError
                kwargs[attr] = int(raw)
            except ValueError:
                problems.append(f"{key} must be an integer, got {raw!r}")
        if ACCEPTED_COMPRESSION_TYPES_CONFIG in values:
            try:
                kwargs["accepted_compression_types"] = _compression_types(
                    values[ACCEPTED_COMPRESSION_TYPES_CONFIG]
                )
            except ValueError as exc:
                problems.append(f"{ACCEPTED_COMPRESSION_TYPES_CONFIG}: {exc}")
        config = cls(**kwargs)  # type: ignore[arg-type]
        problems += config.validate()
        if problems:
            raise ConfigError(problems)
        return config


def _compression_types(raw: object) -> tuple[CompressionType, ...]:
    """``"zstd, lz4"`` (Kafka's list syntax) or ``["zstd", "lz4"]`` -> the types, in that order."""
    names = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"expected a list of compression type names, got {raw!r}")
    found = []
    for name in (n.strip().lower() for n in names):
        if not name:
            continue
        if name not in _ADVERTISABLE:
            raise ValueError(f"unknown compression type {name!r} (one of {', '.join(_ADVERTISABLE)})")
        found.append(_ADVERTISABLE[name])
    return tuple(found)
