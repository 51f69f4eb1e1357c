"""The sink's one configuration: a YAML file plus environment overrides, validated as a whole.

```yaml
data_root: data                 # local path or object-store URI of the Delta tables
replica_id: sink-0              # this replica's shard name (default: the host name)
storage_options: {}             # passed to delta-rs (credentials, region, endpoint, ...); on S3 the
                                #   options that turn off conditional-put commits are refused
                                #   (exporters.delta.object_store, docs/exporters.md "Object stores")
server:
  host: 0.0.0.0
  grpc_port: 4317               # gRPC: ClientTelemetry and OTLP MetricsService
  http_port: 4318               # HTTP: KIP-714 JSON, OTLP /v1/metrics, admin, /metrics, health
  tls_cert_file: null           # server certificate and key (PEM): TLS on both ports
  tls_key_file: null
  tls_client_ca_file: null      # client CA (PEM): mTLS, the principal comes from the certificate
  shutdown_grace_s: 30          # SIGTERM: stop accepting on every port, finish requests in flight
  shutdown_flush_s: 20          # then flush the exporter within this; exit 0, or 75 if it took longer
  max_decompressed_bytes: 20971520   # per push or export, after decompression (20 MiB, as the OTel Collector)
  max_concurrent_requests: 500  # KIP-714 + OTLP requests in flight, both ports (like queued.max.requests)
  overload_retry_after_ms: 1000 # the wait asked of a request refused for being over that limit
  max_hold_delay_ms: 10000      # a held KIP-714 request waits out its client's throttle up to this long
  decode_processes: 2           # worker processes decoding payloads over 4 KiB (ingest.decoding)
  http_max_connections: 10000   # connections to the HTTP port (listener.name.http.max.connections)
  http_header_timeout_ms: 10000 # a request's headers must arrive within this of its first byte
  http_body_timeout_ms: 30000   # and its body within this of its headers (else the socket is closed)
  http_idle_timeout_ms: 120000  # close HTTP connections without a request this long (keep-alive)
  max_waiting_connections: 1000 # sockets waiting at the HTTP or Kafka connection gate; more are closed
  connection_wait_timeout_ms: 10000  # a socket not admitted within this is closed (ingest.connections)
  grpc_max_connections: 10000   # gRPC connection limits grpcio enforces (ingest.connections); null: none
  grpc_max_concurrent_streams: 100   # RPCs at once on one connection (more wait)
  grpc_max_connection_idle_ms: 600000  # GOAWAY to a connection without RPCs this long
  grpc_max_connection_age_ms: null
  grpc_max_connection_age_grace_ms: null
  grpc_max_receive_message_bytes: 4194304  # one gRPC message, buffered before its handler (4 MiB)
  otlp_tolerant_intake: false   # take raw forwarders' OTLP: compressed without Content-Encoding, zero-padded
limits:                         # what one request may hold (ingest.limits; every key and default there)
  max_data_points: 100000
kafka_listener:                 # the Kafka wire-protocol listener (ingest.kafka)
  port: 9094                    # null: no Kafka listener; on server.host, with server.tls_* like the others
  advertised_host: null         # the address Metadata gives clients (Kafka's advertised.listeners);
  advertised_port: null         #   null: the address and port the client connected to
  node_id: 0                    # this node's id in Metadata and DescribeCluster (Kafka's node.id)
  cluster_id: telemetry-sink    # the cluster id clients see
  socket_request_max_bytes: 8388608    # largest request (Kafka's socket.request.max.bytes; Kafka: 100 MiB)
  non_push_request_max_bytes: 1048576  # largest request of any API but PushTelemetry (read from its api key)
  connections_max_idle_ms: 600000      # close connections idle this long (Kafka's connections.max.idle.ms)
  request_read_timeout_ms: 30000       # a started request must arrive in full within this (slow clients)
  max_connections: 10000               # Kafka's listener.name.kafka.max.connections (Kafka: none)
  max_connection_creation_rate: 2147483647  # Kafka's listener.name.kafka.max.connection.creation.rate
security:
  tokens_file: null             # YAML {token: principal}: Authorization: Bearer <token> (ingest.security)
  trusted_proxies: []           # exact addresses of fronting proxies (127.0.0.1/32: a pod-local sidecar)
  trusted_proxy_principals: []  # principals of the proxies' mTLS certificates ("User:CN=edge-proxy")
  require_authentication: false # refuse User:ANONYMOUS on every port (the Kafka port then needs mTLS)
  super_users: []               # principals with every admin right (Kafka's super.users; "User:a;User:b")
  trusted_forwarders: []        # senders whose OTLP labels may name their clients' principals
client_metrics:                 # Kafka's keys (subscriptions.config)
  telemetry.max.bytes: 1048576
quotas:                         # Kafka's keys (ingest.quotas.config)
  quota.window.num: 11
  max.connections.per.ip: 1000  # Kafka: none (2147483647)
exporter:
  name: delta                   # an exporter entry point or dotted path
  options: {}                   # its keyword arguments (the Delta table defaults to this replica's shard)
  quota_sample_period_s: 30     # quota sensor snapshots into <data_root>/quota_samples/<replica>; 0: off
admin:
  strict_mutation_quota: true   # controller_mutation_rate refuses changes over it (false: throttles them)
  config_log_poll_s: 2          # how often the config log (<data_root>/config_log) is read for changes
subscriptions:                  # bootstrap subscriptions, as the admin API would set them
  kafka-client-metrics: {metrics: "org.apache.kafka.", interval.ms: 30000}
client_quotas:                  # bootstrap client quotas, as AlterClientQuotas would set them
  - entity: {user: null}        # null: the <default> entity; parts: user, client-id, ip
    quotas: {producer_byte_rate: 1048576}
```

Bootstrap subscriptions and quotas are applied at every start, then the config log on top of them
(``docs/admin.md``).

Every key can be overridden from the environment: ``TELEMETRY_SINK_<KEY>`` for top-level keys and
``TELEMETRY_SINK_<SECTION>__<KEY>`` inside a section, upper-cased, with ``.`` in Kafka's keys written
as ``_`` (``TELEMETRY_SINK_SERVER__GRPC_PORT=5317``, ``TELEMETRY_SINK_QUOTAS__QUOTA_WINDOW_NUM=5``).
Values from the environment are parsed as YAML scalars. ``SinkConfig.load`` reports every problem at
once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

import yaml

from exporters import default_replica_id
from exporters.delta.object_store import commit_safety_problems
from ingest.admission import DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_OVERLOAD_RETRY_AFTER_MS
from ingest.codec import DEFAULT_MAX_DECOMPRESSED_BYTES
from ingest.config_log import ENTITY_FIELDS
from ingest.connections import (
    DEFAULT_GATE_LIMITS,
    DEFAULT_HTTP_TIMEOUTS,
    DEFAULT_LISTENER_MAX_CONNECTIONS,
    GateLimits,
    HttpTimeouts,
    grpc_connection_options,
)
from ingest.decoding import DEFAULT_DECODE_PROCESSES
from ingest.holds import DEFAULT_MAX_HOLD_DELAY_MS
from ingest.limits import RequestLimits
from ingest.quotas import DEFAULT, ClientQuotaEntity, QuotaConfig, QuotaConfigError, QuotaEntityError
from ingest.quotas.entities import validate_quota
from ingest.security import Authenticator, is_principal, load_tokens, parse_proxy_addresses
from subscriptions import ClientMetricsConfig, ConfigError, SubscriptionError, SubscriptionStore

__all__ = [
    "DEFAULT_SUBSCRIPTIONS",
    "ENV_PREFIX",
    "AdminConfig",
    "ExporterConfig",
    "KafkaListenerConfig",
    "SecurityConfig",
    "ServerConfig",
    "SinkConfig",
    "SinkConfigError",
]

ENV_PREFIX: Final = "TELEMETRY_SINK_"
DEFAULT_SUBSCRIPTIONS: Final[Mapping[str, Mapping[str, Any]]] = {
    # the embedded default: every Kafka client metric, every 30 s
    "kafka-client-metrics": {"metrics": "org.apache.kafka.", "interval.ms": 30_000},
}
_SECTIONS: Final = (
    "server",
    "limits",
    "kafka_listener",
    "security",
    "client_metrics",
    "quotas",
    "exporter",
    "admin",
    "subscriptions",
    "storage_options",
)
_TOP_LEVEL: Final = ("data_root", "replica_id", "client_quotas", *_SECTIONS)
DEFAULT_QUOTA_SAMPLE_PERIOD_S: Final = 30.0


class SinkConfigError(ValueError):
    """The configuration is not usable; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


DEFAULT_GRPC_MAX_RECEIVE_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""gRPC buffers a whole message before the handler (and so before authentication and admission) sees
it, on each of a connection's streams: 4 MiB, as the OTel Collector's OTLP gRPC receiver. A bigger
message is refused by gRPC itself with RESOURCE_EXHAUSTED, which OTLP clients do not retry."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The gRPC and HTTP servers, and what every listener shares.

    Connection limits (``ingest.connections``), on by default at values a fleet of well-behaved
    clients never meets (with ``quotas.max.connections.per.ip``, 1000):

    - ``http_max_connections`` (10,000): connections to the HTTP port; the gRPC port has
      ``grpc_max_connections`` (10,000, grpcio's ``grpc.max_allowed_incoming_connections``; the one
      over it is closed, its client sees UNAVAILABLE) and the Kafka port ``kafka_listener.max_connections``;
    - ``http_header_timeout_ms`` (10 s: a header of at most 8 KiB arrives in one segment, this leaves
      room for retransmissions on a poor link), ``http_body_timeout_ms`` (30 s: a 2 MiB body at
      70 KB/s, as the Kafka listener's ``request_read_timeout_ms``): an HTTP request later than that
      has its connection closed; ``http_idle_timeout_ms`` (120 s: longer than the OTel SDK's 60 s export
      interval and Go's 90 s client idle timeout, so clients reuse or close their connections first)
      closes a connection without a request;
    - ``max_waiting_connections`` (1,000) and ``connection_wait_timeout_ms`` (10 s): sockets accepted
      by the HTTP and Kafka listeners but not admitted yet (over a count or rate limit) are at most
      that many, each closed after that long;
    - ``grpc_max_concurrent_streams`` (100, HTTP/2's recommended minimum) and
      ``grpc_max_connection_idle_ms`` (600 s, Kafka's ``connections.max.idle.ms``).

    null for a ``grpc_*`` limit leaves grpcio's default (none)."""

    host: str = "0.0.0.0"
    grpc_port: int = 4317
    http_port: int = 4318
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    shutdown_grace_s: float = 30.0
    shutdown_flush_s: float = 20.0
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT_REQUESTS
    overload_retry_after_ms: int = DEFAULT_OVERLOAD_RETRY_AFTER_MS
    max_hold_delay_ms: int = DEFAULT_MAX_HOLD_DELAY_MS
    decode_processes: int = DEFAULT_DECODE_PROCESSES
    http_max_connections: int = DEFAULT_LISTENER_MAX_CONNECTIONS
    http_header_timeout_ms: int = DEFAULT_HTTP_TIMEOUTS.header_ms
    http_body_timeout_ms: int = DEFAULT_HTTP_TIMEOUTS.body_ms
    http_idle_timeout_ms: int = DEFAULT_HTTP_TIMEOUTS.idle_ms
    max_waiting_connections: int = DEFAULT_GATE_LIMITS.max_waiting
    connection_wait_timeout_ms: int = DEFAULT_GATE_LIMITS.max_wait_ms
    grpc_max_connections: int | None = DEFAULT_LISTENER_MAX_CONNECTIONS
    grpc_max_concurrent_streams: int | None = 100
    grpc_max_connection_idle_ms: int | None = 600_000
    grpc_max_connection_age_ms: int | None = None
    grpc_max_connection_age_grace_ms: int | None = None
    grpc_max_receive_message_bytes: int = DEFAULT_GRPC_MAX_RECEIVE_MESSAGE_BYTES
    otlp_tolerant_intake: bool = False
    """An OTLP protobuf body that does not parse is retried decompressed (by its magic bytes) and
    without trailing zero bytes, each repair counted (docs/ingest.md "Raw forwarders")."""

    def grpc_options(self) -> list[tuple[str, int]]:
        """The gRPC server's connection limits as channel arguments; ValueError for a bad value."""
        return grpc_connection_options(
            max_connections=self.grpc_max_connections,
            max_concurrent_streams=self.grpc_max_concurrent_streams,
            max_connection_idle_ms=self.grpc_max_connection_idle_ms,
            max_connection_age_ms=self.grpc_max_connection_age_ms,
            max_connection_age_grace_ms=self.grpc_max_connection_age_grace_ms,
        )

    def http_timeouts(self) -> HttpTimeouts:
        return HttpTimeouts(self.http_header_timeout_ms, self.http_body_timeout_ms, self.http_idle_timeout_ms)

    def gate_limits(self) -> GateLimits:
        """How many sockets may wait at each listener's connection gate, and for how long."""
        return GateLimits(self.max_waiting_connections, self.connection_wait_timeout_ms)

    def validate(self) -> list[str]:
        problems = []
        try:
            self.grpc_options()
        except ValueError as exc:
            problems.append(f"server: {exc}")
        for name in _CONNECTION_LIMITS:
            value = getattr(self, name)
            if not _is_int(value) or not 1 <= value <= 2**31 - 1:
                problems.append(f"server.{name} must be an integer between 1 and 2147483647, got {value!r}")
        for name in ("grpc_port", "http_port"):
            port = getattr(self, name)
            if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
                problems.append(f"server.{name} must be a port number (0 picks a free one), got {port!r}")
        if self.grpc_port == self.http_port != 0:
            problems.append("server.grpc_port and server.http_port must differ")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            problems.append("server.tls_cert_file and server.tls_key_file go together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            problems.append("server.tls_client_ca_file (mTLS) needs server.tls_cert_file")
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                problems.append(f"server.{name}: no such file {path!r}")
        if not isinstance(self.shutdown_grace_s, int | float) or self.shutdown_grace_s < 0:
            problems.append("server.shutdown_grace_s must be a number of seconds >= 0")
        if not isinstance(self.shutdown_flush_s, int | float) or not self.shutdown_flush_s > 0:
            problems.append("server.shutdown_flush_s must be a number of seconds > 0")
        for name in (
            "max_decompressed_bytes",
            "max_concurrent_requests",
            "overload_retry_after_ms",
            "decode_processes",
            "grpc_max_receive_message_bytes",
        ):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                problems.append(f"server.{name} must be a positive integer, got {value!r}")
        if not _is_int(self.max_hold_delay_ms) or self.max_hold_delay_ms < 0:
            problems.append(
                f"server.max_hold_delay_ms must be an integer >= 0, got {self.max_hold_delay_ms!r}"
            )
        tolerant: object = self.otlp_tolerant_intake  # as loaded: any YAML value
        if not isinstance(tolerant, bool):
            problems.append(f"server.otlp_tolerant_intake must be true or false, got {tolerant!r}")
        return problems


_CONNECTION_LIMITS: Final = (
    "http_max_connections",
    "http_header_timeout_ms",
    "http_body_timeout_ms",
    "http_idle_timeout_ms",
    "max_waiting_connections",
    "connection_wait_timeout_ms",
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


DEFAULT_SOCKET_REQUEST_MAX_BYTES: Final = 8 * 1024 * 1024
"""8 MiB rather than Kafka's 100 MiB: the largest request a telemetry client sends is a push of at
most ``telemetry.max.bytes`` (1 MiB by default), and every connection may hold one request in memory."""
_REQUEST_OVERHEAD_BYTES: Final = 65536


@dataclass(frozen=True, slots=True)
class KafkaListenerConfig:
    """The Kafka wire listener (``ingest.kafka``); Kafka's broker keys where Kafka has one.

    ``non_push_request_max_bytes`` (1 MiB, the sink's own) caps every request but PushTelemetry, which
    alone needs ``socket_request_max_bytes``: the listener reads a request's api key before its body
    and closes the connection when the request is larger than its API's cap (a Metadata request for
    10,000 topics of 100 bytes fits). ``max_connections`` is 10,000 (Kafka: none)."""

    port: int | None = 9094
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    cluster_id: str = "telemetry-sink"
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    non_push_request_max_bytes: int = 1024 * 1024
    connections_max_idle_ms: int = 600_000
    request_read_timeout_ms: int = 30_000
    max_connections: int = DEFAULT_LISTENER_MAX_CONNECTIONS
    max_connection_creation_rate: int = 2_147_483_647

    def validate(self) -> list[str]:
        problems = []
        for name in ("port", "advertised_port"):
            port = getattr(self, name)
            if port is not None and (not _is_int(port) or not 0 <= port <= 65535):
                problems.append(f"kafka_listener.{name} must be a port number or null, got {port!r}")
        if self.advertised_host is not None and (
            not isinstance(self.advertised_host, str) or not self.advertised_host
        ):
            problems.append("kafka_listener.advertised_host must be a host name or null")
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            problems.append("kafka_listener.cluster_id must be a non-empty string")
        if not _is_int(self.node_id) or not 0 <= self.node_id <= 2**31 - 1:
            problems.append(f"kafka_listener.node_id must be an integer >= 0, got {self.node_id!r}")
        for name in (
            "socket_request_max_bytes",
            "non_push_request_max_bytes",
            "connections_max_idle_ms",
            "request_read_timeout_ms",
            "max_connections",
            "max_connection_creation_rate",
        ):
            value = getattr(self, name)
            if not _is_int(value) or not 1 <= value <= 2**31 - 1:
                problems.append(
                    f"kafka_listener.{name} must be an integer between 1 and 2147483647, got {value!r}"
                )
        return problems


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """Who may say who they are: bearer tokens, trusted proxies (by exact address and/or certificate
    principal), whether a principal is required, super users (``ingest.security``)."""

    tokens_file: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    super_users: tuple[str, ...] = ()
    trusted_proxy_principals: tuple[str, ...] = ()
    require_authentication: bool = False
    trusted_forwarders: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any]) -> tuple[SecurityConfig, list[str]]:
        """The section as written (lists, or Kafka-style strings: addresses split at ``,``,
        principals at ``;``) and the problems with its shape."""
        problems = [f"unknown key 'security.{key}'" for key in section if key not in _SECURITY_KEYS]
        lists: dict[str, tuple[str, ...]] = {}
        for key, separator in (
            ("trusted_proxies", ","),
            ("super_users", ";"),
            ("trusted_proxy_principals", ";"),
            ("trusted_forwarders", ";"),
        ):
            value = section.get(key) or ()
            if isinstance(value, str):
                value = [part for part in value.split(separator) if part.strip()]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                problems.append(f"security.{key} must be a list of strings")
                value = ()
            lists[key] = tuple(v.strip() for v in value)
        tokens_file = section.get("tokens_file")
        if tokens_file is not None and not isinstance(tokens_file, str):
            problems.append("security.tokens_file must be a path")
            tokens_file = None
        required = section.get("require_authentication", False)
        if not isinstance(required, bool):
            problems.append("security.require_authentication must be true or false")
            required = False
        return cls(
            tokens_file,
            lists["trusted_proxies"],
            lists["super_users"],
            lists["trusted_proxy_principals"],
            required,
            lists["trusted_forwarders"],
        ), problems

    def validate(self, server: ServerConfig, kafka_port: int | None) -> list[str]:
        """The problems of the section, and of how it meets ``server``'s TLS and the Kafka port."""
        problems = []
        if self.tokens_file is not None:
            try:
                load_tokens(self.tokens_file)
            except ValueError as exc:
                problems += [f"security.tokens_file: {line}" for line in str(exc).splitlines()]
        for address in self.trusted_proxies:
            try:
                parse_proxy_addresses([address])
            except ValueError as exc:
                problems.append(f"security.trusted_proxies: {exc}")
        problems += [
            f"security.{key}: {user!r} is not a principal like User:alice"
            for key in ("super_users", "trusted_proxy_principals", "trusted_forwarders")
            for user in getattr(self, key)
            if not is_principal(user)
        ]
        mtls = server.tls_client_ca_file is not None
        if self.trusted_proxy_principals and not mtls:
            problems.append(
                "security.trusted_proxy_principals needs mTLS (server.tls_client_ca_file): a proxy is "
                "known by its client certificate"
            )
        if self.require_authentication:
            if kafka_port is not None and not mtls:
                problems.append(
                    "security.require_authentication: the Kafka listener has no SASL, its clients can "
                    "only authenticate with a TLS client certificate: set server.tls_client_ca_file "
                    "(mTLS) or turn the listener off (kafka_listener.port: null)"
                )
            if not (mtls or self.tokens_file or self.trusted_proxies or self.trusted_proxy_principals):
                problems.append(
                    "security.require_authentication: no client could authenticate: set "
                    "security.tokens_file, server.tls_client_ca_file (mTLS) or a trusted proxy"
                )
        return problems

    def authenticator(self) -> Authenticator:
        return Authenticator(
            self.tokens_file,
            self.trusted_proxies,
            trusted_proxy_principals=self.trusted_proxy_principals,
            require_authentication=self.require_authentication,
            trusted_forwarders=self.trusted_forwarders,
        )


_SECURITY_KEYS: Final = frozenset(f.name for f in fields(SecurityConfig))


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    name: str = "delta"
    options: Mapping[str, Any] = field(default_factory=dict)
    quota_sample_period_s: float = DEFAULT_QUOTA_SAMPLE_PERIOD_S

    def validate(self) -> list[str]:
        period = self.quota_sample_period_s
        if isinstance(period, bool) or not isinstance(period, int | float) or period < 0:
            return [
                f"exporter.quota_sample_period_s must be a number of seconds >= 0 (0: off), got {period!r}"
            ]
        return []


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The admin API and the config log (``ingest.admin``, ``ingest.config_log``)."""

    strict_mutation_quota: bool = True
    config_log_poll_s: float = 2.0

    def validate(self) -> list[str]:
        problems = []
        strict: object = self.strict_mutation_quota  # as written in the file
        if not isinstance(strict, bool):
            problems.append("admin.strict_mutation_quota must be true or false")
        poll = self.config_log_poll_s
        if isinstance(poll, bool) or not isinstance(poll, int | float) or poll <= 0:
            problems.append(f"admin.config_log_poll_s must be a positive number of seconds, got {poll!r}")
        return problems


def _client_quotas(value: Any) -> tuple[tuple[tuple[ClientQuotaEntity, str, float], ...], list[str]]:
    """``client_quotas`` entries as (entity, key, value), each checked as AlterClientQuotas checks it."""
    if not isinstance(value, list):
        return (), ["client_quotas must be a list of {entity: {...}, quotas: {...}}"]
    found: list[tuple[ClientQuotaEntity, str, float]] = []
    problems = []
    for i, entry in enumerate(value):
        where = f"client_quotas[{i}]"
        entity_parts = entry.get("entity") if isinstance(entry, dict) else None
        quotas = entry.get("quotas") if isinstance(entry, dict) else None
        if not isinstance(entity_parts, dict) or not isinstance(quotas, dict):
            problems.append(
                f"{where} must be {{entity: {{user|client-id|ip: name or null}}, quotas: {{...}}}}"
            )
            continue
        unknown = [k for k in entity_parts if k not in ENTITY_FIELDS]
        if unknown or not all(v is None or isinstance(v, str) for v in entity_parts.values()):
            problems.append(f"{where}.entity: parts are user, client-id, ip with a name or null (default)")
            continue
        names = {ENTITY_FIELDS[k]: DEFAULT if v is None else v for k, v in entity_parts.items()}
        entity = ClientQuotaEntity(**names)
        for key, quota in quotas.items():
            try:
                if isinstance(quota, bool) or not isinstance(quota, int | float):
                    raise QuotaEntityError(f"the value of {key} must be a number")
                validate_quota(entity, str(key), float(quota))
            except QuotaEntityError as exc:
                problems.append(f"{where}: {exc}")
                continue
            found.append((entity, str(key), float(quota)))
    return tuple(found), problems


@dataclass(frozen=True, slots=True)
class SinkConfig:
    data_root: str = "data"
    replica_id: str = field(default_factory=default_replica_id)
    storage_options: Mapping[str, str] = field(default_factory=dict)
    server: ServerConfig = field(default_factory=ServerConfig)
    kafka_listener: KafkaListenerConfig = field(default_factory=KafkaListenerConfig)
    limits: RequestLimits = field(default_factory=RequestLimits)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    client_metrics: ClientMetricsConfig = field(default_factory=ClientMetricsConfig)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    subscriptions: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: dict(DEFAULT_SUBSCRIPTIONS)
    )
    client_quotas: tuple[tuple[ClientQuotaEntity, str, float], ...] = ()
    """Bootstrap quotas: (entity, key, value)."""

    @classmethod
    def default(cls) -> SinkConfig:
        return cls()

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> SinkConfig:
        """Read the YAML file (if any), apply ``TELEMETRY_SINK_*`` overrides, validate everything."""
        document: dict[str, Any] = {}
        problems: list[str] = []
        if path is not None:
            try:
                loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise SinkConfigError([f"{path}: {exc}"]) from exc
            if loaded is not None and not isinstance(loaded, dict):
                raise SinkConfigError([f"{path}: expected a mapping at the top level"])
            document = loaded or {}
        problems += _apply_env(document, os.environ if env is None else env)
        return cls.from_document(document, problems)

    @classmethod
    def from_document(cls, document: Mapping[str, Any], problems: list[str] | None = None) -> SinkConfig:
        problems = list(problems or [])
        problems += [f"unknown key {key!r}" for key in document if key not in _TOP_LEVEL]
        kwargs: dict[str, Any] = {}
        for key in ("data_root", "replica_id"):
            if key in document:
                if not isinstance(document[key], str) or not document[key]:
                    problems.append(f"{key} must be a non-empty string")
                else:
                    kwargs[key] = document[key]
        sections = {name: document.get(name) or {} for name in _SECTIONS}
        for name, value in sections.items():
            if not isinstance(value, dict):
                problems.append(f"{name} must be a mapping")
                sections[name] = {}
        server_keys = {f.name for f in fields(ServerConfig)}
        problems += [f"unknown key 'server.{key}'" for key in sections["server"] if key not in server_keys]
        kwargs["server"] = ServerConfig(**{k: v for k, v in sections["server"].items() if k in server_keys})
        kafka_keys = {f.name for f in fields(KafkaListenerConfig)}
        kafka = sections["kafka_listener"]
        problems += [f"unknown key 'kafka_listener.{key}'" for key in kafka if key not in kafka_keys]
        kwargs["kafka_listener"] = KafkaListenerConfig(**{k: v for k, v in kafka.items() if k in kafka_keys})
        limit_keys = {f.name for f in fields(RequestLimits)}
        limits = sections["limits"]
        problems += [f"unknown key 'limits.{key}'" for key in limits if key not in limit_keys]
        kwargs["limits"] = RequestLimits(**{k: v for k, v in limits.items() if k in limit_keys})
        kwargs["security"], security_problems = SecurityConfig.from_mapping(sections["security"])
        problems += security_problems
        try:
            kwargs["client_metrics"] = ClientMetricsConfig.from_mapping(sections["client_metrics"])
        except ConfigError as exc:
            problems += [f"client_metrics: {p}" for p in exc.problems]
        try:
            kwargs["quotas"] = QuotaConfig.from_mapping(sections["quotas"])
        except QuotaConfigError as exc:
            problems += [f"quotas: {p}" for p in exc.problems]
        exporter = sections["exporter"]
        exporter_keys = ("name", "options", "quota_sample_period_s")
        problems += [f"unknown key 'exporter.{key}'" for key in exporter if key not in exporter_keys]
        kwargs["exporter"] = ExporterConfig(
            str(exporter.get("name", "delta")),
            dict(exporter.get("options") or {}),
            exporter.get("quota_sample_period_s", DEFAULT_QUOTA_SAMPLE_PERIOD_S),
        )
        admin_keys = {f.name for f in fields(AdminConfig)}
        problems += [f"unknown key 'admin.{key}'" for key in sections["admin"] if key not in admin_keys]
        kwargs["admin"] = AdminConfig(**{k: v for k, v in sections["admin"].items() if k in admin_keys})
        if "client_quotas" in document:
            kwargs["client_quotas"], quota_problems = _client_quotas(document["client_quotas"])
            problems += quota_problems
        kwargs["storage_options"] = {str(k): str(v) for k, v in sections["storage_options"].items()}
        if "subscriptions" in document:
            kwargs["subscriptions"] = sections["subscriptions"]
        config = cls(**kwargs)
        problems += config.validate()
        if problems:
            raise SinkConfigError(problems)
        return config

    def validate(self) -> list[str]:
        problems = (
            self.server.validate()
            + self.kafka_listener.validate()
            + self.limits.validate()
            + self.security.validate(self.server, self.kafka_listener.port)
            + self.exporter.validate()
            + self.admin.validate()
            + commit_safety_problems(self.data_root, self.storage_options)
        )
        kafka_port = self.kafka_listener.port
        if kafka_port and kafka_port in (self.server.grpc_port, self.server.http_port):
            problems.append("kafka_listener.port must differ from server.grpc_port and server.http_port")
        max_push = self.client_metrics.telemetry_max_bytes + _REQUEST_OVERHEAD_BYTES
        for key, value, consequence in (
            (
                "kafka_listener.socket_request_max_bytes",
                self.kafka_listener.socket_request_max_bytes,
                "the largest pushes close their connection",
            ),
            (
                "server.grpc_max_receive_message_bytes",
                self.server.grpc_max_receive_message_bytes,
                "gRPC refuses the largest pushes before the sink can answer them",
            ),
        ):
            if _is_int(value) and value < max_push:
                problems.append(
                    f"{key} must be at least telemetry.max.bytes + 64 KiB ({max_push}), or {consequence}"
                )
        store = SubscriptionStore.for_config(self.client_metrics)
        for name, properties in self.subscriptions.items():
            if not isinstance(properties, dict):
                problems.append(f"subscriptions.{name} must be a mapping of properties")
                continue
            try:
                store.validate(str(name), properties)
            except SubscriptionError as exc:
                problems.append(f"subscriptions.{name}: {exc.message}")
        return problems

    def subscription_store(self) -> SubscriptionStore:
        """A store holding the bootstrap subscriptions."""
        store = SubscriptionStore.for_config(self.client_metrics)
        for name, properties in self.subscriptions.items():
            store.update(name, properties)
        return store


def _apply_env(document: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """Apply ``TELEMETRY_SINK_*`` variables to the document; return the names that mean nothing."""
    problems = []
    for variable, raw in env.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        name = variable[len(ENV_PREFIX) :].lower()
        section, sep, key = name.partition("__")
        value = yaml.safe_load(raw) if raw.strip() else raw
        if not sep:
            if section not in ("data_root", "replica_id"):
                problems.append(f"{variable}: unknown setting")
                continue
            document[section] = value
            continue
        if section not in _SECTIONS or not key:
            problems.append(f"{variable}: unknown section {section!r}")
            continue
        if section in ("client_metrics", "quotas"):
            key = key.replace("_", ".")  # Kafka's keys: quota_window_num -> quota.window.num
        target = document.setdefault(section, {})
        if not isinstance(target, dict):
            problems.append(f"{variable}: {section} is not a mapping")
            continue
        target[key] = value
    return problems
