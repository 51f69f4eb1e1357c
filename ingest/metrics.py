"""``/metrics``: the sink's own sensors in the Prometheus text format.

Read at scrape time (a ``prometheus_client`` collector), on the event loop like every other use of
the engines:

- the subscription core's counters (``telemetry_sink_client_metrics_*``, TEL-24);
- every quota-engine sensor as ``telemetry_sink_quota_<group>_<metric>`` gauges, Kafka's metric tags
  as labels (``client-id`` becomes ``client_id``): byte rates, request time, tokens, throttle times,
  connection counts and accept rates, delay-queue sizes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ingest.quotas import QuotaManagers
from subscriptions import ClientMetricsManager

__all__ = ["CONTENT_TYPE", "SinkCollector", "metrics_exposition"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_NOT_NAME: Final = re.compile(r"[^a-zA-Z0-9_]")


def _name(text: str) -> str:
    return _NOT_NAME.sub("_", text).lower()


class SinkCollector(Collector):
    """Collects the core's counters and the quota sensors when scraped."""

    def __init__(
        self, manager: ClientMetricsManager, quotas: QuotaManagers, now_ms: Callable[[], int]
    ) -> None:
        self.manager = manager
        self.quotas = quotas
        self.now_ms = now_ms

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for sample in self.manager.samples():
            name = sample.name.removesuffix("_total") if sample.kind == "counter" else sample.name
            family = families.get(name)
            if family is None:
                labels = sorted(sample.labels)
                kind = CounterMetricFamily if sample.kind == "counter" else GaugeMetricFamily
                family = families[name] = kind(name, sample.help, labels=labels)
            family.add_metric([sample.labels[k] for k in sorted(sample.labels)], sample.value)
        for metric, value in self.quotas.values(self.now_ms()).items():
            if math.isnan(value):
                continue  # an average with nothing recorded yet
            name = f"telemetry_sink_quota_{_name(metric.group)}_{_name(metric.name)}"
            labels = [_name(key) for key, _ in metric.tags]
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    name, f"Kafka quota sensor {metric.group}/{metric.name}", labels=labels
                )
            family.add_metric([value for _, value in metric.tags], value)
        yield from families.values()


def metrics_exposition(
    manager: ClientMetricsManager, quotas: QuotaManagers, now_ms: Callable[[], int]
) -> Callable[[], bytes]:
    """A function rendering the current ``/metrics`` page."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SinkCollector(manager, quotas, now_ms))
    return lambda: generate_latest(registry)
