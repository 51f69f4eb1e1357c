"""A push pipeline with the real core and quota engine, for transport tests."""

from __future__ import annotations

from typing import Any

from exporters import Exporter
from ingest.push.pipeline import TelemetryPipeline
from quotas import QuotaConfig, create_quota_managers
from subscriptions import ClientMetricsManager, SubscriptionStore
from tests.support.clock import FakeClock


def kafka_pipeline(
    clock: FakeClock, exporter: Exporter, interval_ms: int = 1000, **options: Any
) -> TelemetryPipeline:
    """Every Kafka client metric every ``interval_ms``, no quotas set, time from ``clock``;
    ``options`` go to ``TelemetryPipeline`` (``admission``, ``authenticator``, ...)."""
    store = SubscriptionStore()
    store.update("kafka", {"metrics": "org.apache.kafka.", "interval.ms": interval_ms})
    return TelemetryPipeline(
        ClientMetricsManager(store),
        create_quota_managers(QuotaConfig(), clock),
        exporter,
        clock=clock,
        **options,
    )
