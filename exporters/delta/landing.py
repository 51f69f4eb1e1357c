"""The default exporter: lands accepted pushes in the bronze Delta table ``telemetry_pushes``.

Group commit: pushes are queued and written together in one Delta commit, bounded by
``max_batch_rows``, ``max_batch_bytes`` (payload bytes) and ``max_batch_latency_ms`` (how long the
first push of a batch may wait). Each push's ``export`` completes only after the commit holding it
succeeded (SUCCESS), or after every attempt failed (RETRYABLE: the client retries at its next push
interval). Commits run one at a time in a worker thread, so the event loop never blocks; pushes that
arrive meanwhile form the next batch.

Every commit carries the Delta transaction ``txn(app_id = "telemetry-sink/<writer_id>", version =
batch sequence)``, so a commit retried after an ambiguous failure is never duplicated
(``appender.DeltaAppender``). A writer id is unique per process by default (host name + random
suffix); with a stable ``writer_id`` the sequence resumes from the table after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping
from typing import Final

from exporters.base import Exporter, ExportResult, Health, TelemetryPush
from exporters.delta.appender import Compression, DeltaAppender
from exporters.delta.schema import PARTITION_BY, STATS_COLUMNS, TELEMETRY_PUSHES_SCHEMA, pushes_to_table

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_LATENCY_MS",
    "DEFAULT_MAX_BATCH_ROWS",
    "DeltaLandingExporter",
    "default_writer_id",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_ROWS: Final = 5000
DEFAULT_MAX_BATCH_BYTES: Final = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_LATENCY_MS: Final = 200


def default_writer_id() -> str:
    """``<host name>-<8 hex digits>``: unique per process, readable in the table."""
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


class DeltaLandingExporter(Exporter):
    """Group-commits pushes into the ``telemetry_pushes`` Delta table."""

    name = "delta"

    def __init__(
        self,
        table_uri: str = os.path.join("data", "telemetry_pushes"),
        *,
        storage_options: Mapping[str, str] | None = None,
        writer_id: str | None = None,
        max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_latency_ms: int = DEFAULT_MAX_BATCH_LATENCY_MS,
        commit_attempts: int = 5,
        retry_backoff_ms: int = 100,
        compression: Compression = "SNAPPY",
    ) -> None:
        problems = [
            f"{name} must be positive"
            for name, value in (
                ("max_batch_rows", max_batch_rows),
                ("max_batch_bytes", max_batch_bytes),
                ("commit_attempts", commit_attempts),
            )
            if value < 1
        ]
        if max_batch_latency_ms < 0:
            problems.append("max_batch_latency_ms must not be negative")
        if problems:
            raise ValueError("; ".join(problems))
        self.table_uri = table_uri
        self.writer_id = writer_id or default_writer_id()
        self.max_batch_rows = max_batch_rows
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_latency_ms = max_batch_latency_ms
        self.appender = DeltaAppender(
            table_uri,
            TELEMETRY_PUSHES_SCHEMA,
            f"telemetry-sink/{self.writer_id}",
            partition_by=PARTITION_BY,
            storage_options=storage_options,
            attempts=commit_attempts,
            backoff_ms=retry_backoff_ms,
            stats_columns=STATS_COLUMNS,
            compression=compression,
        )
        self._pending: list[tuple[TelemetryPush, asyncio.Future[ExportResult]]] = []
        self._pending_bytes = 0
        self._first_pending_at = 0.0
        self._wakeup: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._flush_all = False  # force_flush: everything pending is due until the queue drains
        self._sequence = 0
        self._health = Health(True, "no commit yet")
        self.commits = 0
        self.commit_latencies_ms: list[float] = []

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        try:
            self._sequence = await asyncio.to_thread(self.appender.committed_version) + 1
        except Exception as exc:  # storage down at start-up: report it, keep trying on each commit
            self._health = Health(False, f"cannot read {self.table_uri}: {exc}")
        self._task = asyncio.create_task(self._run(), name=f"delta-landing-{self.writer_id}")

    async def export(self, push: TelemetryPush) -> ExportResult:
        if self._closing or self._wakeup is None or self._idle is None:
            return ExportResult.RETRYABLE
        future: asyncio.Future[ExportResult] = asyncio.get_running_loop().create_future()
        if not self._pending:
            self._first_pending_at = time.monotonic()
        self._pending.append((push, future))
        self._pending_bytes += len(push.payload)
        self._idle.clear()
        if len(self._pending) >= self.max_batch_rows or self._pending_bytes >= self.max_batch_bytes:
            self._wakeup.set()
        elif len(self._pending) == 1:
            self._wakeup.set()  # the flusher starts the latency clock
        return await future

    async def force_flush(self) -> bool:
        if self._wakeup is None or self._idle is None:
            return True
        self._flush_all = True
        self._wakeup.set()
        await self._idle.wait()
        return self._health.healthy

    async def shutdown(self) -> None:
        if self._closing:
            return
        await self.force_flush()
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def health(self) -> Health:
        return self._health

    # -- the flusher --------------------------------------------------------------------------

    def _due_in(self) -> float:
        """Seconds until the pending batch must be committed (0: now)."""
        if (
            self._flush_all
            or len(self._pending) >= self.max_batch_rows
            or self._pending_bytes >= self.max_batch_bytes
        ):
            return 0.0
        waited = time.monotonic() - self._first_pending_at
        return max(0.0, self.max_batch_latency_ms / 1000 - waited)

    async def _run(self) -> None:
        assert self._wakeup is not None
        assert self._idle is not None
        while True:
            if not self._pending:
                self._flush_all = False
                self._idle.set()
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            due = self._due_in()
            if due > 0 and not self._closing:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), due)
                continue
            await self._commit(self._take_batch())

    def _take_batch(self) -> list[tuple[TelemetryPush, asyncio.Future[ExportResult]]]:
        rows, size = 0, 0
        for push, _ in self._pending:
            if rows and (rows >= self.max_batch_rows or size + len(push.payload) > self.max_batch_bytes):
                break
            rows += 1
            size += len(push.payload)
        batch, self._pending = self._pending[:rows], self._pending[rows:]
        self._pending_bytes -= size
        if self._pending:
            self._first_pending_at = time.monotonic()
        return batch

    async def _commit(self, batch: list[tuple[TelemetryPush, asyncio.Future[ExportResult]]]) -> None:
        sequence = self._sequence
        self._sequence += 1  # never reused, even after a failure: versions need not be contiguous
        started = time.monotonic()
        try:
            data = pushes_to_table([push for push, _ in batch], self.writer_id, sequence)
            await asyncio.to_thread(self.appender.append, data, sequence)
        except Exception as exc:  # AppendError, or data that cannot be converted
            log.error("landing %d pushes in %s failed: %s", len(batch), self.table_uri, exc)
            self._health = Health(False, f"last commit failed: {exc}")
            result = ExportResult.RETRYABLE
        else:
            self.commits += 1
            self.commit_latencies_ms.append((time.monotonic() - started) * 1000)
            if len(self.commit_latencies_ms) > 10_000:
                del self.commit_latencies_ms[:5_000]
            self._health = Health(True, f"committed batch {sequence}")
            result = ExportResult.SUCCESS
        for _, future in batch:
            if not future.done():
                future.set_result(result)
