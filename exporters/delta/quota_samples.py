"""Snapshots of the quota engine's sensors, landed in the bronze Delta table ``quota_samples``.

Every ``period_ms`` the recorder asks its source for the current sensor values (byte rates, request
time, tokens, throttle times, connection counts, per entity) and appends them in one commit, so
throttling can be rolled up by quota entity over time. Commits are exactly once like the landing
exporter's (``txn`` app id per writer and process incarnation + snapshot sequence: a retried commit is
recognised as its own, ``appender.DeltaAppender``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence

from exporters.base import Health
from exporters.delta.appender import DeltaAppender
from exporters.delta.landing import default_writer_id
from exporters.delta.schema import (
    PARTITION_BY,
    QUOTA_SAMPLES_SCHEMA,
    QUOTA_SAMPLES_TABLE,
    QuotaSample,
    quota_samples_to_table,
)

__all__ = ["QuotaSampleRecorder"]

log = logging.getLogger(__name__)


class QuotaSampleRecorder:
    """Appends snapshots of quota sensor values to ``quota_samples``."""

    def __init__(
        self,
        table_uri: str = os.path.join("data", QUOTA_SAMPLES_TABLE),
        *,
        storage_options: Mapping[str, str] | None = None,
        writer_id: str | None = None,
        period_ms: int = 30_000,
        commit_attempts: int = 3,
    ) -> None:
        if period_ms < 1:
            raise ValueError("period_ms must be positive")
        self.table_uri = table_uri
        self.writer_id = writer_id or default_writer_id()
        self.period_ms = period_ms
        self.appender = DeltaAppender(
            table_uri,
            QUOTA_SAMPLES_SCHEMA,
            f"telemetry-sink-quota-samples/{self.writer_id}",
            partition_by=PARTITION_BY,
            storage_options=storage_options,
            attempts=commit_attempts,
        )
        self._sequence = 0
        self._stopped = asyncio.Event()
        self._health = Health(True, "no snapshot yet")

    def health(self) -> Health:
        return self._health

    async def record(self, samples: Sequence[QuotaSample], now_ms: int) -> bool:
        """Land one snapshot taken at ``now_ms``; False (and unhealthy) if it could not be stored."""
        if not samples:
            return True
        try:
            sequence = self._sequence
            self._sequence += 1
            await asyncio.to_thread(self._append, samples, now_ms, sequence)
        except Exception as exc:
            log.error("quota snapshot not stored in %s: %s", self.table_uri, exc)
            self._health = Health(False, f"last snapshot failed: {exc}")
            return False
        self._health = Health(True, f"stored {len(samples)} samples")
        return True

    def _append(self, samples: Sequence[QuotaSample], now_ms: int, sequence: int) -> None:
        """Convert and commit one snapshot, off the event loop (a snapshot holds a row per quota entity:
        thousands with many clients)."""
        self.appender.append(quota_samples_to_table(samples, now_ms, self.writer_id), sequence)

    async def run(
        self,
        source: Callable[[], Sequence[QuotaSample]],
        now_ms: Callable[[], int],
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """Snapshot ``source()`` every ``period_ms`` until ``stop()``."""
        while not self._stopped.is_set():
            await self.record(source(), now_ms())
            await sleep(self.period_ms / 1000)

    def stop(self) -> None:
        self._stopped.set()
