"""The transports: how requests reach the push pipeline and the admin operations, one module per
protocol. Each one decodes its protocol's request, establishes who is asking (``ingest.security``),
calls the pipeline (``ingest.push``) or the admin operations (``ingest.admin``) and encodes the answer
per the one error table (``ingest.errors``); none decides anything about a push on its own.

- ``grpc_service``: the KIP-714 ``ClientTelemetry`` gRPC service (port 4317).
- ``otlp_grpc``: the OTLP gRPC receiver, ``MetricsService/Export`` (port 4317).
- ``http_app``: the HTTP port (4318): the KIP-714 RPCs as JSON, OTLP/HTTP ``/v1/metrics``,
  ``/metrics``, ``/healthz`` and the admin API's routes (``ingest.admin.http_api``).
- ``kafka``: the Kafka wire listener (port 9094): frames, ``kio`` schemas, the APIs it answers.
- ``connections``: connection quotas at accept time, for every listener (CONN-1..CONN-6).

The paths, headers and service names they serve are ``ingest.wire``'s.
"""

from ingest.transports.connections import QuotaGatedSite, register_http_listener
from ingest.transports.grpc_service import ClientTelemetryService
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app, request_client
from ingest.transports.kafka import KafkaApis, KafkaListener, ListenerLimits, NodeInfo, SaslSettings
from ingest.transports.otlp_grpc import otlp_metrics_handler

__all__ = [
    "SERVER_OPTIONS",
    "ClientTelemetryService",
    "KafkaApis",
    "KafkaListener",
    "ListenerLimits",
    "NodeInfo",
    "QuotaGatedSite",
    "SaslSettings",
    "create_http_app",
    "otlp_metrics_handler",
    "register_http_listener",
    "request_client",
]
