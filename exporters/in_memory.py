"""A reference exporter that keeps pushes in memory (for tests and for embedding)."""

from __future__ import annotations

from exporters.base import Exporter, ExportResult, TelemetryPush

__all__ = ["InMemoryExporter"]


class InMemoryExporter(Exporter):
    """Keeps every exported push in ``pushes``, in order; ``result`` can be set to simulate faults."""

    name = "memory"

    def __init__(self, result: ExportResult = ExportResult.SUCCESS) -> None:
        self.pushes: list[TelemetryPush] = []
        self.result = result
        self.started = False
        self.closed = False

    async def start(self) -> None:
        self.started = True

    async def export(self, push: TelemetryPush) -> ExportResult:
        if self.closed:
            return ExportResult.RETRYABLE
        if self.result is ExportResult.SUCCESS:
            self.pushes.append(push)
        return self.result

    async def shutdown(self) -> None:
        self.closed = True
