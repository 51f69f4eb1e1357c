"""A push pipeline with the real core and quota engine, for transport tests; closed after the test
that made it."""

from __future__ import annotations

import asyncio
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
    pipeline = TelemetryPipeline(
        ClientMetricsManager(store),
        create_quota_managers(QuotaConfig(), clock),
        exporter,
        clock=clock,
        **options,
    )
    MADE.append(pipeline)
    return pipeline


MADE: list[TelemetryPipeline] = []
"""The pipelines ``kafka_pipeline`` made for the running test."""


def close_made_pipelines() -> None:
    """Close the pipelines made for the test that just ended (``tests/conftest.py`` calls it after
    each test, whatever it asserted), each on an event loop of its own: their decoder processes stop.
    A pipeline closed already is closed again at no cost."""
    while MADE:
        asyncio.run(MADE.pop().close())
