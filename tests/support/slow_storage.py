"""The real Delta landing exporter, watched or with storage that hangs, for the shutdown tests
(loaded by the sink as ``exporter.name: tests.support.slow_storage:<Class>``).

- ``ObservedDeltaExporter`` tells the test each time a push is handed to it (``entered``), so a test
  knows a request is in the exporter, not still on its way.
- ``HungDeltaExporter`` also hangs its shutdown in a worker thread, for good, as a commit on a frozen
  NFS mount does: a fault the tests cannot cause on a local disk.
"""

from __future__ import annotations

import asyncio
import threading

from exporters import ExportResult, TelemetryPush
from exporters.delta.landing import DeltaLandingExporter


class ObservedDeltaExporter(DeltaLandingExporter):
    """``DeltaLandingExporter``; every push it is handed puts one item in ``entered`` first."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.entered: asyncio.Queue[TelemetryPush] = asyncio.Queue()

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.entered.put_nowait(push)
        return await super().export(push)


class HungDeltaExporter(ObservedDeltaExporter):
    """Its shutdown never returns: it waits in a worker thread for storage that never answers."""

    async def shutdown(self) -> None:
        await asyncio.to_thread(threading.Event().wait)
