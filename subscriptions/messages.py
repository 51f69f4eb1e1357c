"""Request and response values of GetTelemetrySubscriptions and PushTelemetry, field for field.

Field names are the snake_case of Kafka's RPC schemas (docs/rules.md RPC-1, RPC-2), in the schemas' order, so
every transport (gRPC, HTTP, the Kafka wire listener) maps them one to one. ``ClientContext`` is what a
transport knows about the caller; ``AcceptedPush`` is what the core hands to the exporter stage.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple
from uuid import UUID

__all__ = [
    "PUSH_ACCEPTED",
    "ZERO_UUID",
    "AcceptedPush",
    "ClientContext",
    "CompressionType",
    "GetTelemetrySubscriptionsRequest",
    "GetTelemetrySubscriptionsResponse",
    "PushOutcome",
    "PushTelemetryRequest",
    "PushTelemetryResponse",
]

ZERO_UUID = UUID(int=0)


class CompressionType(IntEnum):
    """Kafka's compression ids, valid in PushTelemetry's ``CompressionType`` (TEL-19)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class ClientContext(NamedTuple):
    """Who sent a request, as the transport saw it (the client attributes of TEL-6 and more).

    ``client_software_name``/``version`` are None when the connection carried no client info at all;
    ``connection_id`` is set only by transports with Kafka's connection semantics (PD-8).
    """

    client_id: str | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: int | None = None
    principal: str = "User:ANONYMOUS"
    connection_id: str | None = None
    listener_name: str | None = None


class GetTelemetrySubscriptionsRequest(NamedTuple):
    client_instance_id: UUID | None


class GetTelemetrySubscriptionsResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    client_instance_id: UUID
    subscription_id: int
    accepted_compression_types: tuple[int, ...]
    push_interval_ms: int
    telemetry_max_bytes: int
    delta_temporality: bool
    requested_metrics: tuple[str, ...]


class PushTelemetryRequest(NamedTuple):
    client_instance_id: UUID | None
    subscription_id: int
    terminating: bool
    compression_type: int
    metrics: bytes | None


class PushTelemetryResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int


class AcceptedPush(NamedTuple):
    """A push that passed every gate: the (still compressed, non-empty) payload and its context.

    The caller decompresses and exports it; if that fails it reports back with
    ``ClientMetricsManager.push_failed`` to get the response to send (TEL-16 step 9, PD-12).
    """

    client_instance_id: UUID
    subscription_id: int
    terminating: bool
    compression_type: CompressionType
    metrics: bytes
    context: ClientContext
    received_ms: int


PUSH_ACCEPTED = PushTelemetryResponse(0, 0)
"""The response to a push that was accepted (and, if it carried a payload, exported)."""

PushOutcome = PushTelemetryResponse | AcceptedPush
"""What ``process_push`` answers: the response to send now, or an ``AcceptedPush`` whose payload must
be exported first (then answer ``PUSH_ACCEPTED``, or what ``push_failed`` returns)."""
