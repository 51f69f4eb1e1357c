"""Request processing for GetTelemetrySubscriptions and PushTelemetry (Kafka's ClientMetricsManager).

``process_get`` and ``process_push`` take a request, what the transport knows about the client, and
``now`` in ms, and return the response fields (docs/rules.md TEL-11..TEL-22). An accepted push with a payload
yields an ``AcceptedPush`` for the exporter stage instead; once it is durable the caller answers
``PUSH_ACCEPTED``, and if exporting fails it asks ``push_failed`` for the response (PD-12 decides
which error).

The order of checks is Kafka's, with the product decisions of docs/rules.md:
PD-1 (an early Get after 117/76), PD-2 (intervals above 300000 ms are delivered), PD-3 (byte-compatible
ids), PD-4 (the Get response always carries the instance id), PD-6 (compression 0 accepted),
PD-7 (a too-early request carries the wait as its throttle time), PD-8 (instances bound to a
connection only where the transport has one), PD-9 (a missing timestamp means never).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Final
from uuid import UUID, uuid4

from subscriptions.config import DEFAULT_ACCEPTED_COMPRESSION_TYPES, ClientMetricsConfig, ConfigError
from subscriptions.errors import Errors
from subscriptions.gating import early_get_allowed, get_wait_ms, push_wait_ms
from subscriptions.instance import ClientInstance, client_attributes
from subscriptions.instance_cache import ClientInstanceCache, instance_expiry_ms
from subscriptions.messages import (
    PUSH_ACCEPTED,
    ZERO_UUID,
    AcceptedPush,
    ClientContext,
    CompressionType,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushOutcome,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from subscriptions.metrics import GET, PUSH, ClientMetricsStats, Sample
from subscriptions.resolution import Resolution, resolve_matched
from subscriptions.store import SubscriptionStore

__all__ = ["ACCEPTED_COMPRESSION_TYPES", "ClientMetricsManager"]

log = logging.getLogger(__name__)

ACCEPTED_COMPRESSION_TYPES: Final = DEFAULT_ACCEPTED_COMPRESSION_TYPES
"""Advertised in preference order unless ``client.metrics.accepted.compression.types`` says otherwise;
NONE is accepted on Push without being advertised (PD-6)."""

_COMPRESSION_BY_ID: Final = {int(c): c for c in CompressionType}
_RESERVED_ID_MAX: Final = 1  # ids 0 (zero) and 1 are reserved
# Enum members bound once: a module global loads ~10x faster than ``Errors.X`` on the push path.
_NONE: Final = Errors.NONE
_INVALID_REQUEST: Final = Errors.INVALID_REQUEST
_THROTTLED: Final = Errors.THROTTLING_QUOTA_EXCEEDED
_UNKNOWN_SUBSCRIPTION_ID: Final = Errors.UNKNOWN_SUBSCRIPTION_ID
_UNSUPPORTED_COMPRESSION: Final = Errors.UNSUPPORTED_COMPRESSION_TYPE
_TOO_LARGE: Final = Errors.TELEMETRY_TOO_LARGE


def _usable_generated_id(candidate: UUID) -> bool:
    """TEL-11: not zero, not the reserved ...01, and its Kafka string does not start with '-'."""
    return candidate.int > _RESERVED_ID_MAX and (candidate.bytes[0] >> 2) != 0b111110


class ClientMetricsManager:
    """Decides, for every client, what to send, how often, and whether a request is allowed now."""

    def __init__(
        self,
        store: SubscriptionStore,
        config: ClientMetricsConfig | None = None,
        *,
        new_uuid: Callable[[], UUID] = uuid4,
        stats: ClientMetricsStats | None = None,
    ) -> None:
        self.config = config or ClientMetricsConfig()
        problems = self.config.validate()
        if problems:
            raise ConfigError(problems)
        self.store = store
        self.stats = stats or ClientMetricsStats()
        self._cache = ClientInstanceCache(self.config.cache_max_size)
        self._new_uuid = new_uuid
        self._lock = threading.Lock()
        self._resolutions: dict[tuple[str, ...], Resolution] = {}
        self._resolutions_version = -1

    # -- the two RPCs -----------------------------------------------------------------------

    def process_get(
        self, request: GetTelemetrySubscriptionsRequest, context: ClientContext, now_ms: int
    ) -> GetTelemetrySubscriptionsResponse:
        """GetTelemetrySubscriptions (TEL-15)."""
        with self._lock:
            self.stats.get_requests += 1
            try:
                return self._get(request.client_instance_id, context, now_ms)
            except Exception:  # TEL-22: an unexpected failure is INVALID_REQUEST, never a crash
                log.exception("GetTelemetrySubscriptions failed unexpectedly")
                return self._get_error(Errors.INVALID_REQUEST, 0)

    def process_push(self, request: PushTelemetryRequest, context: ClientContext, now_ms: int) -> PushOutcome:
        """PushTelemetry (TEL-16), up to handing a non-empty payload to the exporter stage."""
        client_instance_id = request.client_instance_id
        with self._lock:
            self.stats.push_requests += 1
            if client_instance_id is None or client_instance_id.int <= _RESERVED_ID_MAX:
                return self._push_error(_INVALID_REQUEST, 0)  # step 1: nothing else happens
            try:
                instance = self._instance_for(client_instance_id, context, now_ms)  # step 2
                error = _NONE
                throttle_ms = 0
                metrics = request.metrics
                compression = _COMPRESSION_BY_ID.get(request.compression_type)
                if instance.terminating:  # step 3
                    error = _INVALID_REQUEST
                else:
                    wait_ms = push_wait_ms(  # step 4
                        instance.last_get_ms, instance.last_push_ms, instance.push_interval_ms, now_ms
                    )
                    if not wait_ms:
                        instance.last_push_ms = now_ms
                    elif not request.terminating:  # TEL-18: a terminating push skips the interval
                        error = _THROTTLED
                        throttle_ms = wait_ms
                        self.stats.throttled[PUSH] += 1
                    if not error:
                        if request.subscription_id != instance.subscription_id:  # step 5
                            error = _UNKNOWN_SUBSCRIPTION_ID
                        elif compression is None:  # step 6
                            error = _UNSUPPORTED_COMPRESSION
                        elif metrics is not None and len(metrics) > self.config.telemetry_max_bytes:
                            error = _TOO_LARGE  # step 7
                instance.terminating = request.terminating  # step 8, error or not
                instance.last_error = error
                if error:
                    return self._push_error(error, throttle_ms)
                # step 9: nothing to export (compression is always set when there is no error)
                if not metrics or compression is None:
                    return PUSH_ACCEPTED
                self.stats.accepted_pushes += 1
                return AcceptedPush(
                    client_instance_id,
                    request.subscription_id,
                    request.terminating,
                    compression,
                    metrics,
                    context,
                    now_ms,
                )
            except Exception:  # TEL-22
                log.exception("PushTelemetry failed unexpectedly")
                return self._push_error(_INVALID_REQUEST, 0)

    def push_failed(self, accepted: AcceptedPush, error: Errors, now_ms: int) -> PushTelemetryResponse:
        """The response for an accepted push whose decompression or export failed (TEL-16 step 9).

        ``error`` is chosen by the caller (PD-12): INVALID_RECORD for a payload that is not valid,
        TELEMETRY_TOO_LARGE for one over the decompressed cap, THROTTLING_QUOTA_EXCEEDED for a
        transient failure of ours, answered with the time until the client's next push.
        """
        throttle_ms = 0
        with self._lock:
            instance = self._cache.peek(accepted.client_instance_id)
            if instance is not None:
                instance.last_error = error
                if error == Errors.THROTTLING_QUOTA_EXCEEDED:
                    throttle_ms = max(1, instance.last_push_ms + instance.push_interval_ms - now_ms)
            self.stats.export_failures[error] += 1
            return self._push_error(error, throttle_ms)

    # -- cache maintenance ------------------------------------------------------------------

    def expire(self, now_ms: int) -> int:
        """Remove instances whose expiry deadline has passed (call periodically)."""
        with self._lock:
            return self._cache.expire(now_ms)

    def connection_closed(self, connection_id: str) -> int:
        """Remove the instances created on a connection that closed (PD-8)."""
        with self._lock:
            return self._cache.remove_connection(connection_id)

    def instance(self, client_instance_id: UUID) -> ClientInstance | None:
        with self._lock:
            return self._cache.peek(client_instance_id)

    def instances(self) -> Iterator[ClientInstance]:
        with self._lock:
            return iter(self._cache)

    @property
    def instance_count(self) -> int:
        return len(self._cache)

    def samples(self) -> list[Sample]:
        cache = self._cache
        return self.stats.samples(
            instance_count=len(cache),
            evictions=cache.evictions,
            expirations=cache.expirations,
            disconnects=cache.disconnect_removals,
        )

    # -- internals --------------------------------------------------------------------------

    def _get(
        self, client_instance_id: UUID | None, context: ClientContext, now_ms: int
    ) -> GetTelemetrySubscriptionsResponse:
        if client_instance_id is None or client_instance_id == ZERO_UUID:
            client_instance_id = self._generate_instance_id()
        instance = self._instance_for(client_instance_id, context, now_ms)
        resolution = instance.resolution
        wait_ms = get_wait_ms(
            instance.last_get_ms, instance.last_push_ms, resolution.push_interval_ms, now_ms
        )
        if not wait_ms:
            instance.last_get_ms = now_ms
        elif not early_get_allowed(instance.last_error):
            self.stats.throttled[GET] += 1
            return self._get_error(Errors.THROTTLING_QUOTA_EXCEEDED, wait_ms)
        instance.last_error = Errors.NONE
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=0,
            error_code=Errors.NONE,
            client_instance_id=client_instance_id,
            subscription_id=instance.subscription_id,
            accepted_compression_types=self.config.accepted_compression_types,
            push_interval_ms=resolution.push_interval_ms,
            telemetry_max_bytes=self.config.telemetry_max_bytes,
            delta_temporality=True,
            requested_metrics=resolution.requested_metrics,
        )

    def _instance_for(self, client_instance_id: UUID, context: ClientContext, now_ms: int) -> ClientInstance:
        """Get, create or re-evaluate the instance, and re-arm its expiry (TEL-12, TEL-13)."""
        instance = self._cache.lookup(client_instance_id, now_ms)
        version = self.store.version
        if instance is not None and instance.version == version:
            return instance
        if instance is None:
            attributes_from = context
        else:  # re-evaluation keeps the attributes, binds to the current connection
            attributes_from = instance.context._replace(connection_id=context.connection_id)
        instance = self._new_instance(client_instance_id, attributes_from, version)
        self._cache.put(instance, now_ms)
        return instance

    def _new_instance(self, client_instance_id: UUID, context: ClientContext, version: int) -> ClientInstance:
        resolution = self._resolve(client_instance_id, context, version)
        self.stats.instances_created += 1
        return ClientInstance(
            client_instance_id,
            context,
            resolution,
            version,
            instance_expiry_ms(resolution.push_interval_ms, self.config.instance_expiry_base_ms),
        )

    def _resolve(self, client_instance_id: UUID, context: ClientContext, version: int) -> Resolution:
        """TEL-8, memoised by the set of matching subscriptions for the current store version."""
        if version != self._resolutions_version:
            self._resolutions.clear()
            self._resolutions_version = version
        attributes = client_attributes(client_instance_id, context)
        matched = tuple(s for s in self.store.by_name() if s.matches(attributes))
        key = tuple(s.name for s in matched)
        resolution = self._resolutions.get(key)
        if resolution is None:
            resolution = self._resolutions[key] = resolve_matched(matched)
        return resolution

    def _generate_instance_id(self) -> UUID:
        while True:
            candidate = self._new_uuid()
            if _usable_generated_id(candidate) and candidate not in self._cache:
                return candidate

    def _get_error(self, error: Errors, throttle_ms: int) -> GetTelemetrySubscriptionsResponse:
        self.stats.errors[GET, error] += 1
        return GetTelemetrySubscriptionsResponse(throttle_ms, error, ZERO_UUID, 0, (), 0, 0, False, ())

    def _push_error(self, error: Errors, throttle_ms: int) -> PushTelemetryResponse:
        self.stats.errors[PUSH, error] += 1
        return PushTelemetryResponse(throttle_ms, error)
