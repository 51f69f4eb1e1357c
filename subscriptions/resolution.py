"""Resolving a client's effective subscription from the stored ones (docs/rules.md TEL-8, PD-2, PD-3).

The union of the metric prefixes of every matching subscription, the minimum of their intervals, and
``*`` collapsing the set to ``{"*"}``. When nothing matches: no metrics and the default 300000 ms.
Deliberate difference from Kafka's code (PD-2): Kafka starts the minimum at 300000, so a longer
interval can never be delivered; here the minimum is over the matching subscriptions only.

Matching subscriptions are visited in ascending name order, each adding its metrics in its own
``HashSet`` order, so every replica builds the same Java ``HashSet`` and the same subscription id.
A ``Resolution`` depends only on which subscriptions matched, so instances share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from subscriptions.model import ALL_METRICS, DEFAULT_INTERVAL_MS, Subscription
from subscriptions.subscription_id import hashset_order, subscription_crc

__all__ = ["Resolution", "resolve", "resolve_matched"]


class Resolution(NamedTuple):
    """A resolved subscription: what to request, how often, and the CRC part of its id."""

    requested_metrics: tuple[str, ...]
    """Metric prefixes in Java ``HashSet`` iteration order; ``("*",)`` for all, ``()`` for none."""
    push_interval_ms: int
    crc: int
    """int32 CRC32C of the rendered set and interval; XOR with the instance's UUID hash for the id."""
    matched: tuple[str, ...]
    """Names of the matching subscriptions, ascending."""


def resolve_matched(matched: Iterable[Subscription]) -> Resolution:
    """Resolve from the subscriptions that matched, given in ascending name order."""
    names: list[str] = []
    inserted: list[str] = []
    interval_ms: int | None = None
    subscribes_all = False
    for subscription in matched:
        names.append(subscription.name)
        subscribes_all = subscribes_all or subscription.subscribes_all
        inserted.extend(subscription.metrics_in_set_order)
        interval_ms = (
            subscription.interval_ms if interval_ms is None else min(interval_ms, subscription.interval_ms)
        )
    metrics = [ALL_METRICS] if subscribes_all else hashset_order(inserted)
    interval = DEFAULT_INTERVAL_MS if interval_ms is None else interval_ms
    return Resolution(tuple(metrics), interval, subscription_crc(metrics, interval), tuple(names))


def resolve(
    subscriptions_by_name: Iterable[Subscription], attributes: Mapping[str, str | None]
) -> Resolution:
    """Resolve the subscription of a client with these TEL-6 attributes."""
    return resolve_matched(s for s in subscriptions_by_name if s.matches(attributes))
