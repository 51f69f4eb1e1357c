"""Helpers to drive a ClientMetricsManager the way a Kafka client would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from uuid import UUID

from subscriptions import (
    PUSH_ACCEPTED,
    AcceptedPush,
    ClientContext,
    ClientMetricsConfig,
    ClientMetricsManager,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
    SubscriptionStore,
)
from subscriptions.model import PropertyValue
from tests.support.clock import T0

EXAMPLE_UUID = UUID("3f2504e0-4f89-41d3-9a0c-0305e82c3301")
S1 = {"metrics": "org.apache.kafka.producer.", "interval.ms": "30000"}
S1_ID = 422777291
CONTEXT = ClientContext(
    client_id="producer-1",
    client_software_name="apache-kafka-java",
    client_software_version="3.5.2",
    client_source_address="127.0.0.1",
    client_source_port=56078,
)


class PushResult(NamedTuple):
    """A push outcome as the front end sees it: the response sent, and what was handed on."""

    response: PushTelemetryResponse
    accepted: AcceptedPush | None


def make_manager(
    subscriptions: Mapping[str, Mapping[str, PropertyValue]] | None = None,
    config: ClientMetricsConfig | None = None,
    **kwargs: object,
) -> ClientMetricsManager:
    store = SubscriptionStore()
    for name, properties in (subscriptions if subscriptions is not None else {"s1": S1}).items():
        store.update(name, properties)
    return ClientMetricsManager(store, config, **kwargs)  # type: ignore[arg-type]


def get(
    manager: ClientMetricsManager,
    at: int,
    instance_id: UUID | None = EXAMPLE_UUID,
    context: ClientContext = CONTEXT,
) -> GetTelemetrySubscriptionsResponse:
    return manager.process_get(GetTelemetrySubscriptionsRequest(instance_id), context, T0 + at)


def push(
    manager: ClientMetricsManager,
    at: int,
    *,
    instance_id: UUID | None = EXAMPLE_UUID,
    subscription_id: int = S1_ID,
    terminating: bool = False,
    compression: int = 0,
    metrics: bytes | None = b"payload",
    context: ClientContext = CONTEXT,
) -> PushResult:
    request = PushTelemetryRequest(instance_id, subscription_id, terminating, compression, metrics)
    outcome = manager.process_push(request, context, T0 + at)
    if isinstance(outcome, AcceptedPush):
        return PushResult(PUSH_ACCEPTED, outcome)
    return PushResult(outcome, None)
