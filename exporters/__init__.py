"""Exporter plugins: where accepted pushes go. The default lands them durably in Delta Lake.

``Exporter`` (the interface) -> ``DeltaLandingExporter`` (group-committed bronze table),
``OtlpForwardingExporter`` (a downstream collector), ``LogExporter``, ``InMemoryExporter``;
``load_exporter`` finds one by entry point or dotted path, ``ChainExporter`` runs several;
``QuotaSampleRecorder`` lands quota-sensor snapshots; ``maintain`` compacts, checkpoints and vacuums,
``expire_log`` expires a bronze log behind its reader.
Their errors are one tree under ``ExporterError`` (``errors``).
"""

from exporters.base import (
    Exporter,
    ExportResult,
    ForwardedBatch,
    Health,
    PushContext,
    TelemetryPush,
    new_push_id,
)
from exporters.delta.appender import storage_option
from exporters.delta.landing import DeltaLandingExporter
from exporters.delta.maintenance import MaintenanceReport, commit_time, expire_log, maintain
from exporters.delta.quota_samples import QuotaSampleRecorder
from exporters.delta.schema import QUOTA_SAMPLES_SCHEMA, TELEMETRY_PUSHES_SCHEMA, QuotaSample
from exporters.delta.shards import (
    default_replica_id,
    delta_tables_under,
    is_delta_table,
    list_shards,
    shard_uri,
)
from exporters.errors import ExporterError
from exporters.in_memory import InMemoryExporter
from exporters.log import LogExporter
from exporters.otlp_forward import OtlpForwardingExporter
from exporters.registry import ChainExporter, ExporterLoadError, load_exporter

__all__ = [
    "QUOTA_SAMPLES_SCHEMA",
    "TELEMETRY_PUSHES_SCHEMA",
    "ChainExporter",
    "DeltaLandingExporter",
    "ExportResult",
    "Exporter",
    "ExporterError",
    "ExporterLoadError",
    "ForwardedBatch",
    "Health",
    "InMemoryExporter",
    "LogExporter",
    "MaintenanceReport",
    "OtlpForwardingExporter",
    "PushContext",
    "QuotaSample",
    "QuotaSampleRecorder",
    "TelemetryPush",
    "commit_time",
    "default_replica_id",
    "delta_tables_under",
    "expire_log",
    "is_delta_table",
    "list_shards",
    "load_exporter",
    "maintain",
    "new_push_id",
    "shard_uri",
    "storage_option",
]
