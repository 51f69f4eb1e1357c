"""The sink's wire vocabulary: the names its clients and its servers must agree on, in one place.

The HTTP paths of each port's routes, the request headers that carry a client's identity and
credentials, the gRPC service and metadata keys of the OTLP receiver, and the content types the HTTP
port tells apart. The servers (``ingest.transports``, ``ingest.security``, ``ingest.admin``) and the
client-side tools (``loadgen``, ``telemetry_sink.admin``) import them from here, so that a path or a
header is spelled once, and so is the reading of a client instance id (``parse_instance_id``). This
module imports nothing of the repository.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Final

__all__ = [
    "ADMIN_PREFIX",
    "AUTHORIZATION_HEADER",
    "CLIENT_ID_HEADER",
    "FORWARDED_CLIENT_CERT_HEADER",
    "FORWARDED_FOR_HEADER",
    "GET_PATH",
    "HEALTH_PATH",
    "INSTANCE_ID_HEADER",
    "JSON_CONTENT_TYPE",
    "METRICS_PATH",
    "METRICS_SERVICE",
    "OTLP_METRICS_PATH",
    "PROTOBUF_CONTENT_TYPE",
    "PUSH_PATH",
    "RETRY_INFO_KEY",
    "SOFTWARE_NAME_HEADER",
    "SOFTWARE_VERSION_HEADER",
    "STATUS_DETAILS_KEY",
    "parse_instance_id",
]

# HTTP paths (the HTTP port, 4318 by default)
GET_PATH: Final = "/v1/kip714/get-telemetry-subscriptions"
"""GetTelemetrySubscriptions as JSON."""
PUSH_PATH: Final = "/v1/kip714/push-telemetry"
"""PushTelemetry as JSON (the payload base64) or as its raw bytes."""
OTLP_METRICS_PATH: Final = "/v1/metrics"
"""The OTLP/HTTP metrics receiver, as OTLP defines the path."""
METRICS_PATH: Final = "/metrics"
"""The sink's own sensors, in the Prometheus text format."""
HEALTH_PATH: Final = "/healthz"
"""Liveness and readiness: ``{"status": "ok"}`` while the sink serves."""
ADMIN_PREFIX: Final = "/admin/v1"
"""Every route of the admin API starts with this."""

# Request headers (HTTP) and metadata keys (gRPC), lower case as both carry them
CLIENT_ID_HEADER: Final = "x-kafka-client-id"
SOFTWARE_NAME_HEADER: Final = "x-kafka-client-software-name"
SOFTWARE_VERSION_HEADER: Final = "x-kafka-client-software-version"
INSTANCE_ID_HEADER: Final = "x-kafka-client-instance-id"
"""An OTLP client's instance id (KIP-714 pushes carry theirs in the request)."""
AUTHORIZATION_HEADER: Final = "authorization"
"""``Bearer <token>`` (``security.tokens_file``)."""
FORWARDED_BATCH_HEADER: Final = "x-telemetry-sink-forwarded-batch"
"""A trusted forwarder's numbering of the batch it sends (``ingest.push.forwarded_batches``)."""
FORWARDED_CLIENT_CERT_HEADER: Final = "x-forwarded-client-cert"
"""A trusted proxy's word for the client certificate it verified (Envoy's format)."""
FORWARDED_FOR_HEADER: Final = "x-forwarded-for"
"""A trusted proxy's word for the client's address."""

# The OTLP gRPC receiver
METRICS_SERVICE: Final = "opentelemetry.proto.collector.metrics.v1.MetricsService"
RETRY_INFO_KEY: Final = "google.rpc.retryinfo-bin"
"""Trailing metadata: a ``google.rpc.RetryInfo``, the delay OTLP clients wait before retrying."""
STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
"""Trailing metadata: a ``google.rpc.Status`` whose details carry the ``RetryInfo``."""

# Content types the HTTP port tells apart
PROTOBUF_CONTENT_TYPE: Final = "application/x-protobuf"
JSON_CONTENT_TYPE: Final = "application/json"


def parse_instance_id(value: str | None) -> uuid.UUID | None:
    """A UUID (dashes optional) or Kafka's base64 form; None or empty means none; ValueError else."""
    if not value:
        return None
    if len(value) == 22:
        try:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(value + "=="))
        except (binascii.Error, ValueError):
            pass
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValueError(f"client_instance_id {value[:64]!r} is not a UUID") from None
