"""The subscription model: a named ``client-metrics`` config resource, validated as Kafka does.

A subscription has exactly three keys (TEL-1): ``metrics`` (metric-name prefixes; ``*`` means all,
an empty value means none), ``interval.ms`` (default 300000, valid 100..3600000) and ``match``
(``attribute=regex`` entries). ``Subscription.from_properties`` receives the complete property set of
the resource and validates it in Kafka's order (TEL-2), raising the error code and message a Kafka
broker gives. Values are Kafka config strings (lists are comma separated, TEL-3); YAML lists and ints
are accepted too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from subscriptions.errors import InvalidConfigError, InvalidRequestError
from subscriptions.patterns import (
    DEFAULT_MAX_PATTERN_LENGTH,
    MatchPattern,
    PatternError,
    java_trim,
    parse_match_entry,
)
from subscriptions.subscription_id import hashset_order, jdk17_copy_capacity

__all__ = [
    "ALL_METRICS",
    "DEFAULT_INTERVAL_MS",
    "INTERVAL_MS_CONFIG",
    "MATCH_CONFIG",
    "MAX_INTERVAL_MS",
    "METRICS_CONFIG",
    "MIN_INTERVAL_MS",
    "PropertyValue",
    "Subscription",
    "parse_list",
]

METRICS_CONFIG: Final = "metrics"
INTERVAL_MS_CONFIG: Final = "interval.ms"
MATCH_CONFIG: Final = "match"
CONFIG_KEYS: Final = (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG)

ALL_METRICS: Final = "*"
DEFAULT_INTERVAL_MS: Final = 300_000
MIN_INTERVAL_MS: Final = 100
MAX_INTERVAL_MS: Final = 3_600_000

PropertyValue = str | int | list[str] | tuple[str, ...]

_LIST_SEPARATOR = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")  # Java's \s*,\s*
_JAVA_INT = re.compile(r"[+-]?\d+")  # Integer.parseInt takes any Unicode decimal digit


def parse_list(value: str) -> list[str]:
    """Kafka's LIST config parsing (TEL-3): trim; empty means []; split on ``\\s*,\\s*``."""
    trimmed = java_trim(value)
    if not trimmed:
        return []
    return _LIST_SEPARATOR.split(trimmed)


def _list_value(key: str, value: PropertyValue) -> list[str]:
    if isinstance(value, str):
        return parse_list(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidConfigError(
        f"Invalid value {value!r} for configuration {key}: Expected a comma separated list."
    )


def _int_value(key: str, value: PropertyValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidConfigError(
            f"Invalid value {value!r} for configuration {key}: Expected value to be a 32-bit integer"
        )
    text = java_trim(value) if isinstance(value, str) else str(value)
    if not _JAVA_INT.fullmatch(text) or not -(2**31) <= int(text) < 2**31:
        raise InvalidConfigError(f"Invalid value {text} for configuration {key}: Not a number of type INT")
    return int(text)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A validated subscription. ``metrics_in_set_order`` is its own Java ``HashSet`` order (TEL-9)."""

    name: str
    metrics: tuple[str, ...] = ()
    interval_ms: int = DEFAULT_INTERVAL_MS
    match: tuple[MatchPattern, ...] = ()
    properties: Mapping[str, PropertyValue] = field(default_factory=dict, compare=False)
    metrics_in_set_order: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        order = hashset_order(self.metrics, jdk17_copy_capacity(len(self.metrics)))
        object.__setattr__(self, "metrics_in_set_order", tuple(order))

    @property
    def subscribes_all(self) -> bool:
        return ALL_METRICS in self.metrics

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        """TEL-7: no entries match every client; otherwise every entry must match."""
        return all(p.matches(attributes.get(p.attribute)) for p in self.match)

    @classmethod
    def from_properties(
        cls,
        name: str | None,
        properties: Mapping[str, PropertyValue],
        *,
        max_pattern_length: int = DEFAULT_MAX_PATTERN_LENGTH,
    ) -> Subscription:
        """Validate the complete property set of subscription ``name`` in Kafka's order (TEL-2)."""
        if not name:
            raise InvalidRequestError("Subscription name can't be empty")
        for key in properties:
            if key not in CONFIG_KEYS:
                raise InvalidRequestError(f"Unknown client metrics configuration: {key}")
        metrics = _list_value(METRICS_CONFIG, properties.get(METRICS_CONFIG, ""))
        entries = _list_value(MATCH_CONFIG, properties.get(MATCH_CONFIG, ""))
        interval_ms = DEFAULT_INTERVAL_MS
        if INTERVAL_MS_CONFIG in properties:
            interval_ms = _int_value(INTERVAL_MS_CONFIG, properties[INTERVAL_MS_CONFIG])
            if not MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS:
                raise InvalidRequestError(
                    f"Invalid value {interval_ms} for {INTERVAL_MS_CONFIG}, interval must be "
                    f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)"
                )
        patterns: dict[str, MatchPattern] = {}
        for entry in entries:
            try:
                pattern = parse_match_entry(entry, max_pattern_length=max_pattern_length)
            except PatternError as exc:
                raise InvalidConfigError(
                    f"Illegal client matching pattern: {entry}", detail=str(exc)
                ) from exc
            patterns.pop(pattern.attribute, None)  # a repeated attribute keeps the last entry
            patterns[pattern.attribute] = pattern
        return cls(
            name=name,
            metrics=tuple(metrics),
            interval_ms=interval_ms,
            match=tuple(patterns.values()),
            properties=dict(properties),
        )
