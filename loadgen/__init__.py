"""``telemetry-sink loadgen``: a simulated fleet of KIP-714 clients in one asyncio process.

This package owns the load generator and nothing else: what a simulated client sends, when it sends it,
how it reacts to each answer, and the summary of a run. It has three layers (modules ``payloads``;
``clients``; ``transports`` and ``run``), and this facade names what other code uses:

1. **Payloads, pure** (no I/O, no clock): ``PRODUCER_METRICS`` and ``CONSUMER_METRICS`` are the metrics
   librdkafka 2.16 pushes (names, descriptions, kinds and the ``node.id`` attribute, as captured from
   real clients); ``ClientMetricsModel`` evolves their values from a seeded ``random.Random``;
   ``is_requested`` is KIP-714's filter (``[]`` none, exactly ``["*"]`` all, else name prefixes, so
   ``[""]`` is all); ``build_metrics_data`` makes the OTLP ``MetricsData`` (one ``Metric`` per data
   point, as librdkafka does; sums delta or cumulative as the subscription says);
   ``choose_compression`` / ``compress`` pick and apply the codec (the sink's ``ingest.push.codec``
   undoes it);
   ``first_push_delay_ms`` is the clients' first-push jitter (``U[0.5, 1.5) x interval``).
2. **Clients**: ``Kip714Client`` runs one client's life over a ``Kip714Transport``: Get, pushes at the
   subscription's interval, reactions per TEL-25 / PD-12 (docs/rules.md) (117 and 76: re-Get at once; 89 and
   118: re-Get after the interval; 42, 87, 35 and unknown codes: telemetry off for good), every
   ``throttle_time_ms`` honoured before the next request, a terminating push at the end.
   ``OtlpClient`` is an OTLP exporter: no Get, an export every interval, RetryInfo honoured. Time comes
   from an injected ``quotas.Clock`` (tests use a fake one); latencies from an injected timer.
3. **Transports and the run**: ``GrpcTransport`` (the ``ClientTelemetry`` service), ``HttpTransport``
   (the KIP-714 JSON endpoints), ``OtlpGrpcTransport`` (``MetricsService/Export``), each plaintext or
   TLS (mTLS with a client certificate) and with a bearer token as ``Credentials`` say; ``run_loadgen``
   checks the target is reachable, runs the fleet until the duration ends (or ``stop`` is set) and
   returns a ``Summary``.
"""

from __future__ import annotations

from loadgen.clients import (
    Kip714Client,
    Kip714Transport,
    LoadStats,
    OtlpAnswer,
    OtlpClient,
    OtlpTransport,
    RequestRecord,
    Summary,
    TargetUnreachableError,
    TransportError,
)
from loadgen.payloads import (
    CLIENT_KINDS,
    CONSUMER_METRICS,
    DEFAULT_GRPC_ADDRESS,
    DEFAULT_HTTP_ADDRESS,
    DEFAULT_OTLP_INTERVAL_MS,
    PRODUCER_METRICS,
    SOFTWARE_NAME,
    SOFTWARE_VERSION,
    SUPPORTED_COMPRESSION,
    ClientIdentity,
    ClientMetricsModel,
    MetricPoint,
    MetricSpec,
    build_metrics_data,
    choose_compression,
    client_identity,
    compress,
    first_push_delay_ms,
    is_requested,
    select_metrics,
)
from loadgen.run import (
    LoadgenOptions,
    run_loadgen,
)
from loadgen.transports import (
    Credentials,
    GrpcTransport,
    HttpTransport,
    OtlpGrpcTransport,
)

__all__ = [
    "CLIENT_KINDS",
    "CONSUMER_METRICS",
    "DEFAULT_GRPC_ADDRESS",
    "DEFAULT_HTTP_ADDRESS",
    "DEFAULT_OTLP_INTERVAL_MS",
    "PRODUCER_METRICS",
    "SOFTWARE_NAME",
    "SOFTWARE_VERSION",
    "SUPPORTED_COMPRESSION",
    "ClientIdentity",
    "ClientMetricsModel",
    "Credentials",
    "GrpcTransport",
    "HttpTransport",
    "Kip714Client",
    "Kip714Transport",
    "LoadStats",
    "LoadgenOptions",
    "MetricPoint",
    "MetricSpec",
    "OtlpAnswer",
    "OtlpClient",
    "OtlpGrpcTransport",
    "OtlpTransport",
    "RequestRecord",
    "Summary",
    "TargetUnreachableError",
    "TransportError",
    "build_metrics_data",
    "choose_compression",
    "client_identity",
    "compress",
    "first_push_delay_ms",
    "is_requested",
    "run_loadgen",
    "select_metrics",
]
