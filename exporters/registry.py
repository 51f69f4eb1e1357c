"""Finding exporters by name, and running several in a chain.

An exporter is named by an entry point of the group ``telemetry_sink.exporters`` (the built-in
ones: ``delta``, ``otlp``, ``log``, ``memory``; third-party packages add their own) or by a dotted
path ``package.module:Class`` / ``package.module.Class``, like Kafka's plug-in class names. Its
options are passed to the class as keyword arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Final

from exporters.base import Exporter, ExportResult, ForwardedBatch, Health, TelemetryPush
from exporters.errors import ExporterError

__all__ = ["ENTRY_POINT_GROUP", "ChainExporter", "ExporterLoadError", "load_exporter"]

ENTRY_POINT_GROUP: Final = "telemetry_sink.exporters"


class ExporterLoadError(ExporterError, ValueError):
    """An exporter name or path that does not lead to an Exporter."""


def _resolve(spec: str) -> Any:
    matches = entry_points(group=ENTRY_POINT_GROUP, name=spec)
    if matches:
        return next(iter(matches)).load()
    module_name, sep, attr = spec.partition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name:
        names = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
        raise ExporterLoadError(f"unknown exporter {spec!r}; built in: {', '.join(names)}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ExporterLoadError(f"cannot load exporter {spec!r}: {exc}") from exc


def load_exporter(spec: str, options: Mapping[str, Any] | None = None) -> Exporter:
    """Instantiate the exporter named ``spec`` with ``options`` as keyword arguments."""
    cls = _resolve(spec)
    if not (isinstance(cls, type) and issubclass(cls, Exporter)):
        raise ExporterLoadError(f"{spec!r} is not an Exporter class")
    try:
        return cls(**dict(options or {}))
    except TypeError as exc:
        raise ExporterLoadError(f"bad options for exporter {spec!r}: {exc}") from exc


class ChainExporter(Exporter):
    """Exports to each exporter in order; the first that does not succeed decides the result (as
    Kafka calls its telemetry receivers in order and stops at the first failure)."""

    name = "chain"

    def __init__(self, exporters: Sequence[Exporter]) -> None:
        if not exporters:
            raise ValueError("a chain needs at least one exporter")
        self.exporters = tuple(exporters)

    async def start(self) -> None:
        for exporter in self.exporters:
            await exporter.start()

    async def export(self, push: TelemetryPush) -> ExportResult:
        for exporter in self.exporters:
            result = await exporter.export(push)
            if result is not ExportResult.SUCCESS:
                return result
        return ExportResult.SUCCESS

    async def export_batch(
        self, pushes: Sequence[TelemetryPush], batch: ForwardedBatch
    ) -> list[ExportResult]:
        """Each exporter in order takes the pushes every one before it stored (a DUPLICATE goes no
        further: the earlier attempt went down the chain)."""
        results = [ExportResult.SUCCESS] * len(pushes)
        for exporter in self.exporters:
            pending = [i for i, result in enumerate(results) if result is ExportResult.SUCCESS]
            if not pending:
                break
            stored = await exporter.export_batch([pushes[i] for i in pending], batch)
            for i, result in zip(pending, stored, strict=True):
                results[i] = result
        return results

    async def force_flush(self) -> bool:
        results = [await exporter.force_flush() for exporter in self.exporters]
        return all(results)

    async def shutdown(self) -> None:
        for exporter in self.exporters:
            await exporter.shutdown()

    def health(self) -> Health:
        unhealthy = [(e.name, e.health()) for e in self.exporters if not e.health().healthy]
        if not unhealthy:
            return Health(True)
        return Health(False, "; ".join(f"{name}: {h.detail}" for name, h in unhealthy))
