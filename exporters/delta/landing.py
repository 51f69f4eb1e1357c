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
        self._pending: list[TelemetryPush] = []
        # every push of a batch awaits the same future: one result per commit
        self._batch_futures: list[tuple[int, asyncio.Future[ExportResult]]] = []
        self._open_batch_bytes = 0
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
        if not self._pending:
            self._first_pending_at = time.monotonic()
        future = self._future_for(len(self._pending), len(push.payload))
        self._pending.append(push)
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

    def _future_for(self, position: int, size: int) -> asyncio.Future[ExportResult]:
        """The future of the batch the push queued at ``position`` (``size`` bytes) will be
        committed in.

        Batches are cut by rows and bytes in queue order, so a push's batch is known when it is
        queued: the last open batch, unless the push would overflow it (a batch always takes its
        first push, however large).
        """
        if self._batch_futures:
            start, future = self._batch_futures[-1]
            if (
                position - start < self.max_batch_rows
                and self._open_batch_bytes + size <= self.max_batch_bytes
            ):
                self._open_batch_bytes += size
                return future
        future = asyncio.get_running_loop().create_future()
        self._batch_futures.append((position, future))
        self._open_batch_bytes = size
        return future

    def _take_batch(self) -> tuple[list[TelemetryPush], asyncio.Future[ExportResult]]:
        """The first batch of the queue, cut exactly as ``_future_for`` assigned it."""
        _, future = self._batch_futures.pop(0)
        end = self._batch_futures[0][0] if self._batch_futures else len(self._pending)
        batch, self._pending = self._pending[:end], self._pending[end:]
        self._batch_futures = [(start - end, f) for start, f in self._batch_futures]
        self._pending_bytes -= sum(len(p.payload) for p in batch)
        if self._pending:
            self._first_pending_at = time.monotonic()
        return batch, future

    async def _commit(self, taken: tuple[list[TelemetryPush], asyncio.Future[ExportResult]]) -> None:
        batch, future = taken
        sequence = self._sequence
        self._sequence += 1  # never reused, even after a failure: versions need not be contiguous
        started = time.monotonic()
        try:
            await asyncio.to_thread(self._land, batch, sequence)
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
        if not future.done():
            future.set_result(result)

    def _land(self, batch: list[TelemetryPush], sequence: int) -> None:
        """In a worker thread: convert to Arrow and commit."""
        self.appender.append(pushes_to_table(batch, self.writer_id, sequence), sequence)
