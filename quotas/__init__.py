"""The quota and throttle engine: the quota family Kafka brokers enforce, as pure logic with an
injectable clock.

The flow: ``stats`` (Rate, TokenBucket) -> ``sensor`` (record, check quotas) -> ``throttle`` (how long
to wait) -> the managers (``client_quota_manager`` for byte rates, ``request_quota_manager``,
``controller_mutation_quota_manager``, ``connection_quotas``), whose limits come from a KIP-257
``callback`` -> ``throttling`` (mute until the throttle ends). ``create_quota_managers`` builds them
all from a ``QuotaConfig``.
"""

from quotas.callback import (
    ClientQuotaCallback,
    DefaultQuotaCallback,
    QuotaCallbackError,
    ReconfigurableQuotaCallback,
    ReplicaShareQuotaCallback,
    load_quota_callback,
)
from quotas.client_quota_manager import DEFAULT_MAX_QUOTA_ENTITIES, ClientQuotaManager, QuotaManagerConfig
from quotas.clock import Clock, SystemClock
from quotas.config import ConnectionQuotaConfig, QuotaConfig, QuotaConfigError
from quotas.connection_quotas import ConnectionQuotas, ConnectionThrottledError, TooManyConnectionsError
from quotas.controller_mutation_quota_manager import (
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
    ThrottlingQuotaExceededError,
)
from quotas.entities import DEFAULT, ClientQuotaEntity, ClusterMetadata, QuotaEntityError, QuotaType
from quotas.errors import QuotaError
from quotas.factory import QuotaManagers, create_quota_managers
from quotas.request_quota_manager import ClientRequestQuotaManager
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import MetricConfig, Quota, Rate, TokenBucket
from quotas.throttle import bounded_throttle_time_ms, throttle_time_ms, token_bucket_throttle_time_ms
from quotas.throttling import ThrottleCallback, ThrottleQueue, combine_throttle_ms

__all__ = [
    "DEFAULT",
    "DEFAULT_MAX_QUOTA_ENTITIES",
    "ClientQuotaCallback",
    "ClientQuotaEntity",
    "ClientQuotaManager",
    "ClientRequestQuotaManager",
    "Clock",
    "ClusterMetadata",
    "ConnectionQuotaConfig",
    "ConnectionQuotas",
    "ConnectionThrottledError",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "DefaultQuotaCallback",
    "MetricConfig",
    "MetricName",
    "Metrics",
    "Quota",
    "QuotaCallbackError",
    "QuotaConfig",
    "QuotaConfigError",
    "QuotaEntityError",
    "QuotaError",
    "QuotaManagerConfig",
    "QuotaManagers",
    "QuotaType",
    "QuotaViolationError",
    "Rate",
    "ReconfigurableQuotaCallback",
    "ReplicaShareQuotaCallback",
    "Sensor",
    "SystemClock",
    "ThrottleCallback",
    "ThrottleQueue",
    "ThrottlingQuotaExceededError",
    "TokenBucket",
    "TooManyConnectionsError",
    "bounded_throttle_time_ms",
    "combine_throttle_ms",
    "create_quota_managers",
    "load_quota_callback",
    "throttle_time_ms",
    "token_bucket_throttle_time_ms",
]
