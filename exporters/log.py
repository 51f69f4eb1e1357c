"""A debugging exporter: one log line per push (who sent how much, the client instance id in Kafka's
form, as the Delta row holds it), nothing stored."""

from __future__ import annotations

import logging

from exporters.base import Exporter, ExportResult, TelemetryPush
from exporters.delta.schema import kafka_instance_id

__all__ = ["LogExporter"]

log = logging.getLogger("telemetry_sink.exporters.log")


class LogExporter(Exporter):
    """Logs each push at INFO (or the configured level). Never durable: use it beside a real one."""

    name = "log"

    def __init__(self, level: int | str = logging.INFO) -> None:
        self.level = logging.getLevelName(level) if isinstance(level, str) else level
        self.exported = 0

    async def export(self, push: TelemetryPush) -> ExportResult:
        c = push.context
        log.log(
            self.level,
            "push %s instance=%s client_id=%s software=%s/%s from=%s:%s entity=%s bytes=%d terminating=%s",
            c.push_id,
            kafka_instance_id(c.client_instance_id),
            c.client_id,
            c.client_software_name,
            c.client_software_version,
            c.client_source_address,
            c.client_source_port,
            c.quota_entity,
            len(push.payload),
            c.terminating,
        )
        self.exported += 1
        return ExportResult.SUCCESS
