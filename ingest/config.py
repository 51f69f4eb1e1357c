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
  max_otlp_hold_delay_ms: 5000  # and a held OTLP/HTTP request, before its body is read
  decode_processes: 2           # worker processes decoding payloads over 4 KiB (ingest.push.decoding)
  http_max_connections: 10000   # connections to the HTTP port (listener.name.http.max.connections)
  http_header_timeout_ms: 10000 # a request's headers must arrive within this of its first byte
  http_body_timeout_ms: 30000   # and its body within this of its headers (else the socket is closed)
  http_idle_timeout_ms: 120000  # close HTTP connections without a request this long (keep-alive)
  max_waiting_connections: 1000 # sockets waiting at the HTTP or Kafka connection gate; more are closed
  connection_wait_timeout_ms: 10000  # a socket not admitted within this is closed
  grpc_max_connections: 10000   # gRPC connection limits grpcio enforces; null: its share of the open files
  grpc_max_concurrent_streams: 100   # RPCs at once on one connection (more wait)
  grpc_max_connection_idle_ms: 600000  # GOAWAY to a connection without RPCs this long
  grpc_max_connection_age_ms: null
  grpc_max_connection_age_grace_ms: null
  grpc_max_receive_message_bytes: 4194304  # one gRPC message, buffered before its handler (4 MiB)
  queued_max_request_bytes: 536870912  # request bytes the HTTP and Kafka ports hold at once (512 MiB)
  max_request_bytes_per_ip: 67108864   # of which one client address (64 MiB); over it: 503 / wait
  otlp_tolerant_intake: false   # take raw forwarders' OTLP: compressed without Content-Encoding, zero-padded
limits:                         # what one request may hold (ingest.limits; every key and default there)
  max_data_points: 100000
kafka_listener:                 # the Kafka wire-protocol listener (ingest.transports.kafka)
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
  security_protocol: null       # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; null: SSL with server.tls_*
  sasl_enabled_mechanisms: [PLAIN, SCRAM-SHA-256, SCRAM-SHA-512]  # Kafka's sasl.enabled.mechanisms
  connections_max_reauth_ms: 0  # SASL session lifetime (KIP-368; Kafka's connections.max.reauth.ms)
  connection_failed_authentication_delay_ms: 100  # a failed authentication's answer and close wait this long
security:
  tokens_file: null             # YAML {token: principal}: Authorization: Bearer <token>
  trusted_proxies: []           # exact addresses of fronting proxies (127.0.0.1/32: a pod-local sidecar)
  trusted_proxy_principals: []  # principals of the proxies' mTLS certificates ("User:CN=edge-proxy")
  require_authentication: false # refuse User:ANONYMOUS on every port (the Kafka port: SASL or mTLS)
  sasl_users_file: null         # YAML {user: password}: the SASL users of the Kafka listener
  super_users: []               # principals with every admin right (Kafka's super.users; "User:a;User:b")
  trusted_forwarders: []        # senders whose OTLP labels may name their clients' principals
client_metrics:                 # Kafka's keys (subscriptions.config)
  telemetry.max.bytes: 1048576
quotas:                         # Kafka's keys (quotas.config)
  quota.window.num: 11
  max.connections.per.ip: 1000  # Kafka: none (2147483647)
exporter:
  name: delta                   # an exporter entry point or dotted path
  options: {}                   # its keyword arguments (the Delta table defaults to this replica's shard)
  quota_sample_period_s: 30     # quota sensor snapshots into <data_root>/quota_samples/<replica>; 0: off
admin:
  strict_mutation_quota: true   # controller_mutation_rate refuses changes over it (false: throttles them)
  config_log_poll_s: 2          # how often the config log (<data_root>/config_log) is read for changes
  replica_heartbeat_ms: 10000   # how often this replica announces itself in <data_root>/_replicas
  replica_session_timeout_ms: 30000  # a replica not heard from this long is gone (Kafka's
                                #   broker.session.timeout.ms): the live set quota callbacks are told
subscriptions:                  # bootstrap subscriptions, as the admin API would set them
  kafka-client-metrics: {metrics: "org.apache.kafka.", interval.ms: 30000}
client_quotas:                  # bootstrap client quotas, as AlterClientQuotas would set them
  - entity: {user: null}        # null: the <default> entity; parts: user, client-id, ip
    quotas: {producer_byte_rate: 1048576}
spark:                          # how rollup and dashboard start Spark; their flags override it
  master: null                  # --master; null: local[*]
  conf: {}                      # --conf: spark.* settings passed through ({spark.executor.memory: 4g})
  delta_connector: auto         # --delta-connector: auto, on or off (the Delta Spark connector)
```

Bootstrap subscriptions and quotas are applied at every start, then the config log on top of them
(``docs/admin.md``).

Every key can be overridden from the environment: ``TELEMETRY_SINK_<KEY>`` for top-level keys and
``TELEMETRY_SINK_<SECTION>__<KEY>`` inside a section, upper-cased, with ``.`` in Kafka's keys written
as ``_`` (``TELEMETRY_SINK_SERVER__GRPC_PORT=5317``, ``TELEMETRY_SINK_QUOTAS__QUOTA_WINDOW_NUM=5``).
Values from the environment are parsed as YAML scalars. Two ``TELEMETRY_SINK_*`` variables of the
project are not settings and are left alone (``NOT_SETTINGS``: the admin command's bearer token, the
build's switch); any other that names no setting is a problem, so that a typo does not pass unnoticed.

Each value is parsed into its key's type (and range) before the section's frozen object is built, so a
built object only holds values of its declared types; what is left to ``validate`` is how keys meet
(ports that must differ, TLS files that go together, the push size every listener must take).
``SinkConfig.load`` reports every problem at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import yaml

from exporters import default_replica_id
from exporters.delta.object_store import commit_safety_problems
from ingest.limits import RequestLimits
from ingest.push.admission import DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_OVERLOAD_RETRY_AFTER_MS
from ingest.push.codec import DEFAULT_MAX_DECOMPRESSED_BYTES
from ingest.push.decoding import DEFAULT_DECODE_PROCESSES
from ingest.push.holds import DEFAULT_MAX_HOLD_DELAY_MS, DEFAULT_MAX_OTLP_HOLD_DELAY_MS
from ingest.security.authentication import Authenticator, is_principal, load_tokens, parse_proxy_addresses
from ingest.security.sasl import MECHANISMS, read_sasl_users
from ingest.transports.connections import (
    DEFAULT_GATE_LIMITS,
    DEFAULT_HTTP_TIMEOUTS,
    DEFAULT_LISTENER_MAX_CONNECTIONS,
    GateLimits,
    HttpTimeouts,
    grpc_connection_options,
)
from ingest.transports.request_memory import DEFAULT_REQUEST_MEMORY, RequestMemoryLimits
from quotas import ClientQuotaEntity, QuotaConfig, QuotaConfigError, QuotaEntityError
from quotas.entities import validate_quota
from subscriptions import ClientMetricsConfig, ConfigError, SubscriptionError, SubscriptionStore

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "DEFAULT_SUBSCRIPTIONS",
    "ENV_PREFIX",
    "NOT_SETTINGS",
    "AdminConfig",
    "ExporterConfig",
    "KafkaListenerConfig",
    "SecurityConfig",
    "ServerConfig",
    "SinkConfig",
    "SinkConfigError",
    "SparkConfig",
]

ENV_PREFIX: Final = "TELEMETRY_SINK_"
NOT_SETTINGS: Final = frozenset({"TELEMETRY_SINK_ADMIN_TOKEN", "TELEMETRY_SINK_PURE_PYTHON"})
"""The project's ``TELEMETRY_SINK_*`` variables that are not settings: the ``admin`` command's bearer
token (``telemetry_sink.commands.admin.TOKEN_ENV``) and ``setup.py``'s switch to build without mypyc."""
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
    "spark",
)
_TOP_LEVEL: Final = ("data_root", "replica_id", "client_quotas", *_SECTIONS)
DEFAULT_QUOTA_SAMPLE_PERIOD_S: Final = 30.0


class SinkConfigError(ValueError):
    """The configuration is not usable; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


# The parsing layer: each field of a section's dataclass says (in its metadata) how a value from the
# file or the environment becomes a value of its type; ``_parsed`` applies them, one problem per bad
# value or unknown key, so that the frozen object is built from typed values only.

_T = TypeVar("_T")
_D = TypeVar("_D", bound="DataclassInstance")
_PARSE: Final = "parse"
_INT_MAX: Final = 2**31 - 1


class _BadValueError(ValueError):
    """A value not of its key's type or range; the message says what it must be."""


def _parsed_by(parse: Callable[[object], object]) -> dict[str, object]:
    return {_PARSE: parse}


def _key(default: Any, parse: Callable[[object], _T]) -> _T:
    """A config field: its default, and how a value as written becomes one of its type (the default
    is one too: a test parses every default with its field's parser)."""
    declared: _T = field(default=default, metadata=_parsed_by(parse))
    return declared


def _integer(low: int | None, high: int | None = _INT_MAX, must: str = "") -> Callable[[object], int]:
    """An integer (never a boolean) from ``low`` to ``high`` (None: no bound)."""
    must = must or f"an integer between {low} and {high}"

    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _BadValueError(f"must be {must}, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise _BadValueError(f"must be {must}, got {value!r}")
        return value

    return parse


def _number(must: str, accept: Callable[[float], bool]) -> Callable[[object], float]:
    """A number (never a boolean) that ``accept`` takes, as a float."""

    def parse(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not accept(value):
            raise _BadValueError(f"must be {must}, got {value!r}")
        return float(value)

    return parse


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _BadValueError(f"must be true or false, got {value!r}")
    return value


def _text(must: str = "a non-empty string") -> Callable[[object], str]:
    def parse(value: object) -> str:
        if not isinstance(value, str) or not value:
            raise _BadValueError(f"must be {must}, got {value!r}")
        return value

    return parse


def _optional(parse: Callable[[object], _T]) -> Callable[[object], _T | None]:
    """``parse``, or None for null."""
    return lambda value: None if value is None else parse(value)


def _names(separator: str) -> Callable[[object], tuple[str, ...]]:
    """A list of strings, or Kafka's form: one string split at ``separator`` (``User:a;User:b``)."""

    def parse(value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [part for part in value.split(separator) if part.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise _BadValueError(f"must be a list of strings, got {value!r}")
        return tuple(v.strip() for v in value)

    return parse


def _choice(*choices: str) -> Callable[[object], str]:
    """One of ``choices``, exactly as written."""

    def parse(value: object) -> str:
        if value not in choices:
            raise _BadValueError(f"must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    return parse


def _mapping(value: object) -> dict[str, Any]:
    """A mapping with string keys (null: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _BadValueError(f"must be a mapping, got {value!r}")
    return dict(value)


def _parsed(
    cls: type[_D],
    section: str,
    values: Mapping[str, Any],
    problems: list[str],
    parse_every: Callable[[object], object] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``cls`` for the values of ``section``, each parsed by its field's
    ``_PARSE`` (or ``parse_every``); a problem for every unknown key and bad value, which is left out
    (the field keeps its default)."""
    known = {item.name: item for item in fields(cls)}
    prefix = f"{section}." if section else ""
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        item = known.get(key)
        if item is None:
            problems.append(f"unknown key '{prefix}{key}'")
            continue
        parse = item.metadata.get(_PARSE, parse_every)
        assert parse is not None, f"{cls.__name__}.{key} declares no parser"
        try:
            kwargs[key] = parse(value)
        except _BadValueError as exc:
            problems.append(f"{prefix}{key} {exc}")
    return kwargs


SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's listener security protocols (``listener.security.protocol.map``'s values)."""
_PORT: Final = _integer(0, 65535, "a port number (0 picks a free one)")
_POSITIVE: Final = _integer(1, None, "a positive integer")
_INT32: Final = _integer(1)  # Kafka's int config range: 1 to 2147483647
_GRPC_LIMIT: Final = _optional(
    _integer(None, None, "an integer or null")
)  # range: ingest.transports.connections
_PATH: Final = _optional(_text("a path"))


DEFAULT_GRPC_MAX_RECEIVE_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""gRPC buffers a whole message before the handler (and so before authentication and admission) sees
it, on each of a connection's streams: 4 MiB, as the OTel Collector's OTLP gRPC receiver. A bigger
message is refused by gRPC itself with RESOURCE_EXHAUSTED, which OTLP clients do not retry."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The gRPC and HTTP servers, and what every listener shares.

    Connection limits (``ingest.transports.connections``), on by default at values a fleet of well-behaved
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
      ``grpc_max_connection_idle_ms`` (600 s, Kafka's ``connections.max.idle.ms``);
    - ``queued_max_request_bytes`` (512 MiB, Kafka's ``queued.max.request.bytes``, which Kafka leaves
      unbounded) and ``max_request_bytes_per_ip`` (64 MiB): the request bytes the HTTP and Kafka
      listeners hold at once, in all and per client address (``ingest.transports.request_memory``).

    null for a ``grpc_*`` limit leaves grpcio's default (none), but for ``grpc_max_connections``, which
    then gets its share of the open-file limit (``ingest.transports.descriptors``)."""

    host: str = _key("0.0.0.0", _text("a host name or address"))
    grpc_port: int = _key(4317, _PORT)
    http_port: int = _key(4318, _PORT)
    tls_cert_file: str | None = _key(None, _PATH)
    tls_key_file: str | None = _key(None, _PATH)
    tls_client_ca_file: str | None = _key(None, _PATH)
    shutdown_grace_s: float = _key(30.0, _number("a number of seconds >= 0", lambda s: s >= 0))
    shutdown_flush_s: float = _key(20.0, _number("a number of seconds > 0", lambda s: s > 0))
    max_decompressed_bytes: int = _key(DEFAULT_MAX_DECOMPRESSED_BYTES, _POSITIVE)
    max_concurrent_requests: int = _key(DEFAULT_MAX_CONCURRENT_REQUESTS, _POSITIVE)
    overload_retry_after_ms: int = _key(DEFAULT_OVERLOAD_RETRY_AFTER_MS, _POSITIVE)
    max_hold_delay_ms: int = _key(DEFAULT_MAX_HOLD_DELAY_MS, _integer(0, None, "an integer >= 0"))
    max_otlp_hold_delay_ms: int = _key(DEFAULT_MAX_OTLP_HOLD_DELAY_MS, _integer(0, None, "an integer >= 0"))
    decode_processes: int = _key(DEFAULT_DECODE_PROCESSES, _POSITIVE)
    http_max_connections: int = _key(DEFAULT_LISTENER_MAX_CONNECTIONS, _INT32)
    http_header_timeout_ms: int = _key(DEFAULT_HTTP_TIMEOUTS.header_ms, _INT32)
    http_body_timeout_ms: int = _key(DEFAULT_HTTP_TIMEOUTS.body_ms, _INT32)
    http_idle_timeout_ms: int = _key(DEFAULT_HTTP_TIMEOUTS.idle_ms, _INT32)
    max_waiting_connections: int = _key(DEFAULT_GATE_LIMITS.max_waiting, _INT32)
    connection_wait_timeout_ms: int = _key(DEFAULT_GATE_LIMITS.max_wait_ms, _INT32)
    grpc_max_connections: int | None = _key(DEFAULT_LISTENER_MAX_CONNECTIONS, _GRPC_LIMIT)
    grpc_max_concurrent_streams: int | None = _key(100, _GRPC_LIMIT)
    grpc_max_connection_idle_ms: int | None = _key(600_000, _GRPC_LIMIT)
    grpc_max_connection_age_ms: int | None = _key(None, _GRPC_LIMIT)
    grpc_max_connection_age_grace_ms: int | None = _key(None, _GRPC_LIMIT)
    grpc_max_receive_message_bytes: int = _key(DEFAULT_GRPC_MAX_RECEIVE_MESSAGE_BYTES, _POSITIVE)
    queued_max_request_bytes: int = _key(DEFAULT_REQUEST_MEMORY.max_bytes, _POSITIVE)
    max_request_bytes_per_ip: int = _key(DEFAULT_REQUEST_MEMORY.max_bytes_per_ip, _POSITIVE)
    otlp_tolerant_intake: bool = _key(False, _boolean)
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

    def request_memory_limits(self) -> RequestMemoryLimits:
        return RequestMemoryLimits(self.queued_max_request_bytes, self.max_request_bytes_per_ip)

    def gate_limits(self) -> GateLimits:
        """How many sockets may wait at each listener's connection gate, and for how long."""
        return GateLimits(self.max_waiting_connections, self.connection_wait_timeout_ms)

    def validate(self) -> list[str]:
        """How the (parsed) keys meet: grpcio's ranges, ports, TLS files."""
        problems = []
        try:
            self.grpc_options()
        except ValueError as exc:
            problems.append(f"server: {exc}")
        if self.grpc_port == self.http_port != 0:
            problems.append("server.grpc_port and server.http_port must differ")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            problems.append("server.tls_cert_file and server.tls_key_file go together")
        if self.max_request_bytes_per_ip > self.queued_max_request_bytes:
            problems.append("server.max_request_bytes_per_ip must be at most server.queued_max_request_bytes")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            problems.append("server.tls_client_ca_file (mTLS) needs server.tls_cert_file")
        for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                problems.append(f"server.{name}: no such file {path!r}")
        return problems


DEFAULT_SOCKET_REQUEST_MAX_BYTES: Final = 8 * 1024 * 1024
"""8 MiB rather than Kafka's 100 MiB: the largest request a telemetry client sends is a push of at
most ``telemetry.max.bytes`` (1 MiB by default), and every connection may hold one request in memory."""
_REQUEST_OVERHEAD_BYTES: Final = 65536


@dataclass(frozen=True, slots=True)
class KafkaListenerConfig:
    """The Kafka wire listener (``ingest.transports.kafka``); Kafka's broker keys where Kafka has one.

    ``non_push_request_max_bytes`` (1 MiB, the sink's own) caps every request but PushTelemetry, which
    alone needs ``socket_request_max_bytes``: the listener reads a request's api key before its body
    and closes the connection when the request is larger than its API's cap (a Metadata request for
    10,000 topics of 100 bytes fits). ``max_connections`` is 10,000 (Kafka: none)."""

    port: int | None = _key(9094, _optional(_integer(0, 65535, "a port number or null")))
    advertised_host: str | None = _key(None, _optional(_text("a host name or null")))
    advertised_port: int | None = _key(None, _optional(_integer(0, 65535, "a port number or null")))
    node_id: int = _key(0, _integer(0, _INT_MAX, "an integer >= 0"))
    cluster_id: str = _key("telemetry-sink", _text())
    socket_request_max_bytes: int = _key(DEFAULT_SOCKET_REQUEST_MAX_BYTES, _INT32)
    non_push_request_max_bytes: int = _key(1024 * 1024, _INT32)
    connections_max_idle_ms: int = _key(600_000, _INT32)
    request_read_timeout_ms: int = _key(30_000, _INT32)
    max_connections: int = _key(DEFAULT_LISTENER_MAX_CONNECTIONS, _INT32)
    max_connection_creation_rate: int = _key(_INT_MAX, _INT32)
    security_protocol: str | None = _key(None, _optional(_choice(*SECURITY_PROTOCOLS)))
    sasl_enabled_mechanisms: tuple[str, ...] = _key(MECHANISMS, _names(","))
    connections_max_reauth_ms: int = _key(0, _integer(0, None, "an integer >= 0 (0: sessions never expire)"))
    connection_failed_authentication_delay_ms: int = _key(100, _integer(0, _INT_MAX, "an integer >= 0"))

    def protocol(self, server: ServerConfig) -> str:
        """The listener's security protocol: as configured, else SSL when the server has TLS files
        (``server.tls_cert_file``), else PLAINTEXT."""
        if self.security_protocol is not None:
            return self.security_protocol
        return "SSL" if server.tls_cert_file and server.tls_key_file else "PLAINTEXT"

    def uses_sasl(self, server: ServerConfig) -> bool:
        return self.port is not None and self.protocol(server).startswith("SASL_")

    def uses_tls(self, server: ServerConfig) -> bool:
        return self.protocol(server) in ("SSL", "SASL_SSL")

    def validate(self, server: ServerConfig, sasl_users_file: str | None) -> list[str]:
        """How the listener's security meets the server's TLS and the SASL users."""
        if self.port is None:
            return []
        problems = []
        if self.uses_tls(server) and not (server.tls_cert_file and server.tls_key_file):
            problems.append(
                f"kafka_listener.security_protocol {self.protocol(server)} needs server.tls_cert_file and "
                "server.tls_key_file"
            )
        unknown = [m for m in self.sasl_enabled_mechanisms if m not in MECHANISMS]
        if unknown:
            problems.append(
                f"kafka_listener.sasl_enabled_mechanisms: {', '.join(unknown)} not supported (the sink "
                f"implements {', '.join(MECHANISMS)})"
            )
        if self.connection_failed_authentication_delay_ms >= self.connections_max_idle_ms:
            problems.append(
                "kafka_listener.connection_failed_authentication_delay_ms must be less than "
                "kafka_listener.connections_max_idle_ms"
            )
        if self.uses_sasl(server):
            if not self.sasl_enabled_mechanisms:
                problems.append("kafka_listener.sasl_enabled_mechanisms: a SASL listener needs one at least")
            if sasl_users_file is None:
                problems.append(
                    f"kafka_listener.security_protocol {self.protocol(server)} needs security.sasl_users_file"
                )
        return problems


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """Who may say who they are: bearer tokens, trusted proxies (by exact address and/or certificate
    principal), whether a principal is required, super users
    (``ingest.security.authentication``). Lists may be
    written as Kafka writes them: addresses split at ``,``, principals at ``;``."""

    tokens_file: str | None = _key(None, _PATH)
    trusted_proxies: tuple[str, ...] = _key((), _names(","))
    super_users: tuple[str, ...] = _key((), _names(";"))
    trusted_proxy_principals: tuple[str, ...] = _key((), _names(";"))
    require_authentication: bool = _key(False, _boolean)
    trusted_forwarders: tuple[str, ...] = _key((), _names(";"))
    sasl_users_file: str | None = _key(None, _PATH)

    def validate(
        self, server: ServerConfig, kafka_port: int | None, *, kafka_sasl: bool = False
    ) -> list[str]:
        """The problems of the section, and of how it meets ``server``'s TLS and the Kafka port (with
        SASL when ``kafka_sasl``)."""
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
        if self.sasl_users_file is not None:
            try:
                read_sasl_users(self.sasl_users_file)
            except ValueError as exc:
                problems += [f"security.sasl_users_file: {line}" for line in str(exc).splitlines()]
        if self.require_authentication:
            if kafka_port is not None and not (mtls or kafka_sasl):
                problems.append(
                    "security.require_authentication: the Kafka listener's clients cannot authenticate: "
                    "set kafka_listener.security_protocol to SASL_PLAINTEXT or SASL_SSL, or "
                    "server.tls_client_ca_file (mTLS), or turn the listener off (kafka_listener.port: null)"
                )
            if not (
                mtls
                or kafka_sasl
                or self.tokens_file
                or self.trusted_proxies
                or self.trusted_proxy_principals
            ):
                problems.append(
                    "security.require_authentication: no client could authenticate: set "
                    "security.tokens_file, server.tls_client_ca_file (mTLS), a trusted proxy or a SASL Kafka "
                    "listener"
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


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    """The exporter (an entry point or dotted path) and its keyword arguments (``exporters``)."""

    name: str = _key("delta", _text("an exporter entry point or dotted path"))
    options: Mapping[str, Any] = field(default_factory=dict, metadata=_parsed_by(_mapping))
    quota_sample_period_s: float = _key(
        DEFAULT_QUOTA_SAMPLE_PERIOD_S, _number("a number of seconds >= 0 (0: off)", lambda s: s >= 0)
    )


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """The admin API and the config log (``ingest.admin.operations``, ``ingest.admin.config_log``)."""

    strict_mutation_quota: bool = _key(True, _boolean)
    config_log_poll_s: float = _key(2.0, _number("a positive number of seconds", lambda s: s > 0))
    replica_heartbeat_ms: int = _key(10_000, _integer(100, _INT_MAX, "an integer >= 100"))
    replica_session_timeout_ms: int = _key(30_000, _integer(100, _INT_MAX, "an integer >= 100"))

    def validate(self) -> list[str]:
        if self.replica_session_timeout_ms <= self.replica_heartbeat_ms:
            return [
                "admin.replica_session_timeout_ms must be longer than admin.replica_heartbeat_ms, or a "
                "live replica counts as gone between two of its heartbeats"
            ]
        return []


ConnectorMode = Literal["auto", "on", "off"]


def _connector(value: object) -> ConnectorMode:
    """auto, on or off; YAML reads a bare on/off as true/false, which mean on/off here."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("auto", "on", "off"):
        return value
    raise _BadValueError(f"must be auto, on or off, got {value!r}")


def _spark_conf(value: object) -> dict[str, str]:
    """``spark.*`` settings, their scalar values as Spark reads them (``true``, ``8``, ``4g``)."""
    settings = _mapping(value)
    wrong = [key for key, v in settings.items() if not key.startswith("spark.") or isinstance(v, dict | list)]
    if wrong:
        raise _BadValueError(f"must map spark.* keys to values, got {wrong!r}")
    return {key: str(v).lower() if isinstance(v, bool) else str(v) for key, v in settings.items()}


@dataclass(frozen=True, slots=True)
class SparkConfig:
    """How ``rollup`` and ``dashboard`` start Spark (``spark_jobs.session``); their flags ``--master``,
    ``--conf`` and ``--delta-connector`` override it (``telemetry_sink.cli``). The sink never reads it.
    A null ``master`` is the commands' default (``local[*]``)."""

    master: str | None = _key(None, _optional(_text("a Spark master URL or null")))
    conf: Mapping[str, str] = field(default_factory=dict, metadata=_parsed_by(_spark_conf))
    delta_connector: ConnectorMode = field(default="auto", metadata=_parsed_by(_connector))


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
        if not all(v is None or isinstance(v, str) for v in entity_parts.values()):
            problems.append(f"{where}.entity: parts are user, client-id, ip with a name or null (default)")
            continue
        try:
            entity = ClientQuotaEntity.from_parts(entity_parts)
        except QuotaEntityError:
            problems.append(f"{where}.entity: parts are user, client-id, ip with a name or null (default)")
            continue
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
    """The whole file: top-level keys and one object per section."""

    data_root: str = _key("data", _text())
    replica_id: str = field(default_factory=default_replica_id, metadata=_parsed_by(_text()))
    storage_options: Mapping[str, str] = field(default_factory=dict)
    server: ServerConfig = field(default_factory=ServerConfig)
    kafka_listener: KafkaListenerConfig = field(default_factory=KafkaListenerConfig)
    limits: RequestLimits = field(default_factory=RequestLimits)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    client_metrics: ClientMetricsConfig = field(default_factory=ClientMetricsConfig)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
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
        top = {key: document[key] for key in ("data_root", "replica_id") if key in document}
        kwargs: dict[str, Any] = _parsed(cls, "", top, problems)
        sections = {name: document.get(name) or {} for name in _SECTIONS}
        for name, value in sections.items():
            if not isinstance(value, dict):
                problems.append(f"{name} must be a mapping")
                sections[name] = {}
        for name, section_type in _TYPED_SECTIONS.items():
            kwargs[name] = section_type(**_parsed(section_type, name, sections[name], problems))
        limits = _parsed(RequestLimits, "limits", sections["limits"], problems, parse_every=_INT32)
        kwargs["limits"] = RequestLimits(**limits)
        try:
            kwargs["client_metrics"] = ClientMetricsConfig.from_mapping(sections["client_metrics"])
        except ConfigError as exc:
            problems += [f"client_metrics: {p}" for p in exc.problems]
        try:
            kwargs["quotas"] = QuotaConfig.from_mapping(sections["quotas"])
        except QuotaConfigError as exc:
            problems += [f"quotas: {p}" for p in exc.problems]
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
        """How the parsed sections meet (ports, TLS, push sizes, object-store commits, subscriptions)."""
        problems = (
            self.server.validate()
            + self.security.validate(
                self.server, self.kafka_listener.port, kafka_sasl=self.kafka_listener.uses_sasl(self.server)
            )
            + self.kafka_listener.validate(self.server, self.security.sasl_users_file)
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
            if value < max_push:
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

    def http_max_body_bytes(self) -> int:
        """The largest HTTP body read: a KIP-714 JSON push of ``telemetry.max.bytes`` in base64, or an
        OTLP body of twice that."""
        return 2 * self.client_metrics.telemetry_max_bytes + _REQUEST_OVERHEAD_BYTES

    def callback_configs(self) -> dict[str, object]:
        """What a quota callback's ``configure(configs)`` is given (Kafka gives the broker's
        configuration): the quota keys, and this node's id, cluster id, replica id and data root."""
        return {
            **self.quotas.as_mapping(),
            "node.id": self.kafka_listener.node_id,
            "cluster.id": self.kafka_listener.cluster_id,
            "replica.id": self.replica_id,
            "data.root": self.data_root,
        }

    def subscription_store(self) -> SubscriptionStore:
        """A store holding the bootstrap subscriptions."""
        store = SubscriptionStore.for_config(self.client_metrics)
        for name, properties in self.subscriptions.items():
            store.update(name, properties)
        return store


_TYPED_SECTIONS: Final[Mapping[str, type[DataclassInstance]]] = {
    "server": ServerConfig,
    "kafka_listener": KafkaListenerConfig,
    "security": SecurityConfig,
    "exporter": ExporterConfig,
    "admin": AdminConfig,
    "spark": SparkConfig,
}
"""The sections whose every field declares its parser (``_key``)."""


def _apply_env(document: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """Apply ``TELEMETRY_SINK_*`` variables to the document; return the names that mean nothing."""
    problems = []
    for variable, raw in env.items():
        if not variable.startswith(ENV_PREFIX) or variable in NOT_SETTINGS:
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
