"""The KIP-714 subscription core: what every client sends, how often, and whether it may now.

Pure logic with an injectable clock (every call takes ``now_ms``); no I/O on the request path and no
knowledge of transports. The flow: ``SubscriptionStore`` (validated subscriptions + version) ->
``resolve`` (TEL-8) -> ``compute_subscription_id`` (TEL-9) -> ``ClientInstanceCache`` (LRU + expiry)
-> gates (``gating``) -> ``ClientMetricsManager.process_get`` / ``process_push``.
"""

from subscriptions.admin import (
    AdminResult,
    AllowAllAuthorizer,
    ClientMetricsAdmin,
    ClusterAuthorizer,
)
from subscriptions.config import ClientMetricsConfig, ConfigError
from subscriptions.errors import Errors, InvalidConfigError, InvalidRequestError, SubscriptionError
from subscriptions.instance import ClientInstance
from subscriptions.instance_cache import ClientInstanceCache, instance_expiry_ms, is_expired
from subscriptions.manager import ACCEPTED_COMPRESSION_TYPES, ClientMetricsManager
from subscriptions.messages import (
    PUSH_ACCEPTED,
    AcceptedPush,
    ClientContext,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushOutcome,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from subscriptions.metrics import ClientMetricsStats, Sample
from subscriptions.model import Subscription, parse_list
from subscriptions.resolution import Resolution, resolve
from subscriptions.store import StoreFileError, SubscriptionStore
from subscriptions.subscription_id import compute_subscription_id, crc32c, kafka_uuid_string

__all__ = [
    "ACCEPTED_COMPRESSION_TYPES",
    "PUSH_ACCEPTED",
    "AcceptedPush",
    "AdminResult",
    "AllowAllAuthorizer",
    "ClientContext",
    "ClientInstance",
    "ClientInstanceCache",
    "ClientMetricsAdmin",
    "ClientMetricsConfig",
    "ClientMetricsManager",
    "ClientMetricsStats",
    "ClusterAuthorizer",
    "CompressionType",
    "ConfigError",
    "Errors",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "InvalidConfigError",
    "InvalidRequestError",
    "PushOutcome",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
    "Resolution",
    "Sample",
    "StoreFileError",
    "Subscription",
    "SubscriptionError",
    "SubscriptionStore",
    "compute_subscription_id",
    "crc32c",
    "instance_expiry_ms",
    "is_expired",
    "kafka_uuid_string",
    "parse_list",
    "resolve",
]
