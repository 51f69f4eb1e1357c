"""The sink's one configuration: a YAML file plus environment overrides, validated as a whole.

```yaml
data_root: data                 # local path or object-store URI of the Delta tables
replica_id: sink-0              # this replica's shard name (default: the host name)
storage_options: {}             # passed to delta-rs (credentials, region, endpoint, ...)
server:
  host: 0.0.0.0
  grpc_port: 4317               # gRPC: ClientTelemetry and OTLP MetricsService
  http_port: 4318               # HTTP: KIP-714 JSON, OTLP /v1/metrics, admin, /metrics, health
  tls_cert_file: null           # server certificate and key (PEM): TLS on both ports
  tls_key_file: null
  tls_client_ca_file: null      # client CA (PEM): mTLS, the principal comes from the certificate
  shutdown_grace_s: 30          # SIGTERM: stop accepting, finish in flight, flush, exit 0
  max_decompressed_bytes: 67108864   # per push, after decompression (zip-bomb cap)
client_metrics:                 # Kafka's keys (subscriptions.config)
  telemetry.max.bytes: 1048576
quotas:                         # Kafka's keys (ingest.quotas.config)
  quota.window.num: 11
exporter:
  name: delta                   # an exporter entry point or dotted path
  options: {}                   # its keyword arguments (the Delta table defaults to this replica's shard)
subscriptions:                  # bootstrap subscriptions, as the admin API would set them
  kafka-client-metrics: {metrics: "org.apache.kafka.", interval.ms: 30000}
```

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
from ingest.codec import DEFAULT_MAX_DECOMPRESSED_BYTES
from ingest.quotas import QuotaConfig, QuotaConfigError
from subscriptions import ClientMetricsConfig, ConfigError, SubscriptionError, SubscriptionStore

__all__ = [
    "DEFAULT_SUBSCRIPTIONS",
    "ENV_PREFIX",
    "ExporterConfig",
    "ServerConfig",
    "SinkConfig",
    "SinkConfigError",
]

ENV_PREFIX: Final = "TELEMETRY_SINK_"
DEFAULT_SUBSCRIPTIONS: Final[Mapping[str, Mapping[str, Any]]] = {
    # the embedded default: every Kafka client metric, every 30 s
    "kafka-client-metrics": {"metrics": "org.apache.kafka.", "interval.ms": 30_000},
}
_SECTIONS: Final = ("server", "client_metrics", "quotas", "exporter", "subscriptions", "storage_options")
_TOP_LEVEL: Final = ("data_root", "replica_id", *_SECTIONS)


class SinkConfigError(ValueError):
    """The configuration is not usable; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "0.0.0.0"
    grpc_port: int = 4317
    http_port: int = 4318
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    shutdown_grace_s: float = 30.0
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    def validate(self) -> list[str]:
        problems = []
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
        if not isinstance(self.max_decompressed_bytes, int) or self.max_decompressed_bytes < 1:
            problems.append("server.max_decompressed_bytes must be a positive integer")
        return problems


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    name: str = "delta"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SinkConfig:
    data_root: str = "data"
    replica_id: str = field(default_factory=default_replica_id)
    storage_options: Mapping[str, str] = field(default_factory=dict)
    server: ServerConfig = field(default_factory=ServerConfig)
    client_metrics: ClientMetricsConfig = field(default_factory=ClientMetricsConfig)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    subscriptions: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: dict(DEFAULT_SUBSCRIPTIONS)
    )

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
        try:
            kwargs["client_metrics"] = ClientMetricsConfig.from_mapping(sections["client_metrics"])
        except ConfigError as exc:
            problems += [f"client_metrics: {p}" for p in exc.problems]
        try:
            kwargs["quotas"] = QuotaConfig.from_mapping(sections["quotas"])
        except QuotaConfigError as exc:
            problems += [f"quotas: {p}" for p in exc.problems]
        exporter = sections["exporter"]
        problems += [f"unknown key 'exporter.{key}'" for key in exporter if key not in ("name", "options")]
        kwargs["exporter"] = ExporterConfig(
            str(exporter.get("name", "delta")), dict(exporter.get("options") or {})
        )
        kwargs["storage_options"] = {str(k): str(v) for k, v in sections["storage_options"].items()}
        if "subscriptions" in document:
            kwargs["subscriptions"] = sections["subscriptions"]
        config = cls(**kwargs)
        problems += config.validate()
        if problems:
            raise SinkConfigError(problems)
        return config

    def validate(self) -> list[str]:
        problems = self.server.validate()
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
