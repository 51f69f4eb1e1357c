"""The default exporter: lands accepted pushes in the bronze Delta table ``telemetry_pushes``.

Group commit: pushes are queued and written together in one Delta commit, bounded by
``max_batch_rows``, ``max_batch_bytes`` and ``max_batch_latency_ms`` (how long the first push of a
batch may wait). A push's bytes are ``TelemetryPush.size``: its payload and the text of its context
(principal, client id, software name and version, quota tags...), since every row carries its own
copy of them. Each push's ``export`` completes only after the commit holding it succeeded (SUCCESS),
or after every attempt failed (RETRYABLE: the client retries at its next push interval). Commits run
one at a time in a worker thread, so the event loop never blocks; pushes that arrive meanwhile form
the next batch.

Failures are told apart by cause, so that one client's push never fails another's:

- *Data*: the batch cannot be converted to rows (an Arrow or encoding error: a value no column can
  hold, which ``PushContext`` should already have refused). The batch is then converted push by push;
  the pushes that fail alone are refused (PERMANENT: their clients are told INVALID_RECORD) and the
  rest land in the same commit. The table is untouched by the refused pushes and ``health`` does not
  change: the sink can still store pushes.
- *Storage*: the commit or the sync fails after its retries. Every push of the batch is RETRYABLE and
  ``health`` turns unhealthy (``/readyz`` answers 503) until a commit succeeds.

Every commit carries the Delta transaction ``txn(app_id = "telemetry-sink/<writer_id>/<incarnation>",
version = batch sequence)``: an app id no other process and no earlier run uses, so a commit retried
after an ambiguous failure is recognised as its own and never duplicated, and a push is acknowledged
only on that proof (``appender.DeltaAppender``). Every commit also carries the writer id's lease
(``writer_claim``): while another live process holds the writer id, this one refuses to write, says
why in ``health`` and answers exports RETRYABLE at once; an idle holder renews its lease every third
of ``writer_lease_ms`` with an empty commit, and ``shutdown`` releases it.

A trusted forwarder's batch (``export_batch``) is committed whole, in one commit, which also carries
``txn(app_id = "telemetry-sink-forwarded/<forwarder>", version = its last push's number)``. Before the
commit, the pushes of a forwarded batch the table already holds (its forwarder's ``txn`` has reached
the batch's ``last``) are left out and answered DUPLICATE; only this process commits to this table, so
no commit can slip in between. A resend is first looked up in the other replicas' tables under
``shards_uri`` too. So a forwarded push lands once, whatever replica each attempt reached, as long as
its forwarder's ``txn`` is kept (``delta.setTransactionRetentionDuration``: 7 days since its last batch)
and no earlier attempt is still being committed by another replica when the resend is looked up (a
commit stalled past ``commit_timeout_ms`` that lands after the forwarder resent elsewhere: then twice).

A commit (with its retries) that takes longer than ``commit_timeout_ms`` fails its batch, and every
batch queued behind it, RETRYABLE: storage has stalled. Until the stalled commit returns, ``health``
is unhealthy (``/readyz`` answers 503) and exports answer RETRYABLE at once, so no push holds an
admission slot waiting for storage; the next commit starts only after the stalled one returned
(commits stay one at a time), and a success makes the exporter healthy again. A stalled commit that
lands after all holds pushes that were answered RETRYABLE: their clients send them again, so they
can be in the table twice, never missing.

On a local path the file system is synced after each commit, before any push of it is acknowledged
(delta-rs does not fsync). The queue is bounded (``max_pending_bytes``, counted as the batches are):
beyond it, exports answer RETRYABLE at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import pyarrow as pa
from deltalake import DeltaTable, Transaction

from exporters.base import Exporter, ExportResult, ForwardedBatch, Health, TelemetryPush
from exporters.delta.appender import Compression, DeltaAppender, sync_local_table, wall_clock_ms
from exporters.delta.schema import (
    PARTITION_BY,
    STATS_COLUMNS,
    TELEMETRY_PUSHES_SCHEMA,
    TELEMETRY_PUSHES_TABLE,
    pushes_to_table,
)
from exporters.delta.shards import delta_tables_under
from exporters.delta.writer_claim import DEFAULT_WRITER_LEASE_MS, ClaimRefusedError, WriterClaim

__all__ = [
    "DEFAULT_COMMIT_TIMEOUT_MS",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_LATENCY_MS",
    "DEFAULT_MAX_BATCH_ROWS",
    "DEFAULT_MAX_PENDING_BYTES",
    "DeltaLandingExporter",
    "default_writer_id",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_BATCH_ROWS: Final = 5000
DEFAULT_MAX_BATCH_BYTES: Final = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_LATENCY_MS: Final = 200
DEFAULT_MAX_PENDING_BYTES: Final = 256 * 1024 * 1024
DEFAULT_COMMIT_TIMEOUT_MS: Final = 15_000
"""Half of Kafka's ``request.timeout.ms`` (30 s): a client waiting on a stalled commit is answered
before it gives up on its own."""
FORWARDED_APP_ID_PREFIX: Final = "telemetry-sink-forwarded/"
"""What the ``txn`` app id of a forwarder's batches starts with; the forwarder's name follows."""
_DATA_ERRORS: Final = (ValueError, TypeError, OverflowError)
"""What converting a value no column can hold raises (pyarrow's ArrowInvalid and ArrowTypeError, a
UnicodeEncodeError for a lone surrogate)."""


def default_writer_id() -> str:
    """``<host name>-<8 hex digits>``: unique per process, readable in the table."""
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


class _Batch:
    """Pushes that will be committed together, and the one future they all await (the batch's
    result; a push in ``refused`` is PERMANENT whatever it is, one in ``duplicates`` DUPLICATE if the
    batch landed)."""

    __slots__ = ("duplicates", "first_at", "flush", "forwarded", "future", "pushes", "refused", "size")

    def __init__(self, future: asyncio.Future[ExportResult]) -> None:
        self.pushes: list[TelemetryPush] = []
        self.forwarded: list[tuple[ForwardedBatch, range]] = []
        """The forwarded batches among ``pushes``, each with the indexes of its pushes."""
        self.refused: frozenset[int] = frozenset()
        """Indexes in ``pushes`` of those whose data could not be converted; set before ``future``."""
        self.duplicates: frozenset[int] = frozenset()
        """Indexes in ``pushes`` of forwarded pushes the table already held; set before ``future``."""
        self.size = 0
        self.future = future
        self.first_at = time.monotonic()  # when its first push was queued: the latency clock
        self.flush = False


class DeltaLandingExporter(Exporter):
    """Group-commits pushes into the ``telemetry_pushes`` Delta table."""

    name = "delta"

    def __init__(
        self,
        table_uri: str = os.path.join("data", TELEMETRY_PUSHES_TABLE),
        *,
        shards_uri: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        writer_id: str | None = None,
        max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_batch_latency_ms: int = DEFAULT_MAX_BATCH_LATENCY_MS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        commit_attempts: int = 5,
        retry_backoff_ms: int = 100,
        compression: Compression = "SNAPPY",
        fsync: bool = True,
        commit_timeout_ms: int = DEFAULT_COMMIT_TIMEOUT_MS,
        writer_lease_ms: int = DEFAULT_WRITER_LEASE_MS,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``shards_uri``: where every replica's table lies (``<data root>/telemetry_pushes``), read
        for a resent forwarded batch; None: only this table is. ``wall_clock``: milliseconds since the
        epoch, for the lease's heartbeats (tests fake it)."""
        problems = [
            f"{name} must be positive"
            for name, value in (
                ("max_batch_rows", max_batch_rows),
                ("max_batch_bytes", max_batch_bytes),
                ("max_pending_bytes", max_pending_bytes),
                ("commit_attempts", commit_attempts),
                ("commit_timeout_ms", commit_timeout_ms),
                ("writer_lease_ms", writer_lease_ms),
            )
            if value < 1
        ]
        if max_batch_latency_ms < 0:
            problems.append("max_batch_latency_ms must not be negative")
        if problems:
            raise ValueError("; ".join(problems))
        self.table_uri = table_uri
        self.shards_uri = shards_uri
        self.storage_options = dict(storage_options or {})
        self.writer_id = writer_id or default_writer_id()
        self.max_batch_rows = max_batch_rows
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_latency_ms = max_batch_latency_ms
        self.max_pending_bytes = max_pending_bytes
        self.fsync = fsync
        self.commit_timeout_ms = commit_timeout_ms
        self.claim = WriterClaim(self.writer_id, writer_lease_ms)
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
            claim=self.claim,
            now_ms=wall_clock,
        )
        self._batches: deque[_Batch] = deque()
        self._pending_bytes = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._sequence = 0
        self._health = Health(True, "no commit yet")
        self._refusal: str | None = None
        """Why exports are answered RETRYABLE at once (another process holds the writer id), or None."""
        self._stalled: asyncio.Future[Any] | None = None
        """A commit past ``commit_timeout_ms`` that has not returned yet."""
        self._last_commit_at = -math.inf
        self.commits = 0
        self.commit_latencies_ms: list[float] = []

    async def start(self) -> None:
        """Start the flusher; its first commit claims the writer id (nothing is read before)."""
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"delta-landing-{self.writer_id}")

    async def export(self, push: TelemetryPush) -> ExportResult:
        return (await self._queue([push]))[0]

    async def export_batch(
        self, pushes: Sequence[TelemetryPush], batch: ForwardedBatch
    ) -> list[ExportResult]:
        """The forwarded ``batch``'s pushes committed together with ``txn(forwarded app id, last)``:
        DUPLICATE when this table's ``txn`` has reached ``last`` by the time of the commit, or (a
        resend) another replica's table's before it is queued."""
        if not pushes:
            return []
        if batch.resend and not self._refusing():
            try:
                stored_elsewhere = await asyncio.to_thread(self._stored_by_another_replica, batch)
            except Exception as exc:  # storage unreadable: the forwarder sends it again later
                log.warning("the other replicas' tables could not be read: %s", exc)
                return [ExportResult.RETRYABLE] * len(pushes)
            if stored_elsewhere:
                return [ExportResult.DUPLICATE] * len(pushes)
        return await self._queue(pushes, batch)

    def _refusing(self) -> bool:
        return self._closing or self._wakeup is None or self._refusal is not None or self._stalled is not None

    async def _queue(
        self, pushes: Sequence[TelemetryPush], forwarded: ForwardedBatch | None = None
    ) -> list[ExportResult]:
        """Queue ``pushes`` in one batch and wait for its commit; their results in order."""
        if self._refusing():
            return [ExportResult.RETRYABLE] * len(pushes)
        assert self._wakeup is not None
        size = sum(push.size for push in pushes)
        if self._batches and self._pending_bytes + size > self.max_pending_bytes:
            return [ExportResult.RETRYABLE] * len(pushes)  # overloaded: storage is not keeping up
        batch = self._batch_for(len(pushes), size)
        indexes = range(len(batch.pushes), len(batch.pushes) + len(pushes))
        batch.pushes.extend(pushes)
        batch.size += size
        self._pending_bytes += size
        if forwarded is not None:
            batch.forwarded.append((forwarded, indexes))
        if indexes.start == 0 or self._is_full(batch):
            self._wakeup.set()  # the flusher's deadline changed; other pushes leave it asleep
        # shielded: one caller giving up (a client disconnecting) must not cancel its batch-mates
        result = await asyncio.shield(batch.future)
        return [self._result(batch, index, result) for index in indexes]

    @staticmethod
    def _result(batch: _Batch, index: int, result: ExportResult) -> ExportResult:
        if index in batch.refused:
            return ExportResult.PERMANENT
        if result is ExportResult.SUCCESS and index in batch.duplicates:
            return ExportResult.DUPLICATE
        return result

    def _batch_for(self, rows: int, size: int) -> _Batch:
        """The open batch if the pushes fit in it (a batch always takes its first pushes), else a new
        one: the pushes of one call are always committed together."""
        if self._batches:
            last = self._batches[-1]
            if len(last.pushes) + rows <= self.max_batch_rows and last.size + size <= self.max_batch_bytes:
                return last
        batch = _Batch(asyncio.get_running_loop().create_future())
        self._batches.append(batch)
        return batch

    async def force_flush(self) -> bool:
        """Commit every batch queued now, at once; True if all of them were stored."""
        if self._wakeup is None:
            return True
        targets = list(self._batches)
        for batch in targets:
            batch.flush = True
        self._wakeup.set()
        results = [await asyncio.shield(batch.future) for batch in targets]
        return all(result is ExportResult.SUCCESS for result in results)

    async def shutdown(self) -> None:
        """Commit what is queued, stop the flusher and release the writer id."""
        if self._closing:
            return
        self._closing = True  # from now on exports answer RETRYABLE
        await self.force_flush()
        if self._wakeup is not None:
            self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._stalled is None and self.claim.held:
            try:
                await self._in_thread(self.appender.release)
            except Exception as exc:  # the lease then expires by itself
                log.warning("writer id %s not released: %s", self.writer_id, exc)

    def health(self) -> Health:
        if self._stalled is not None:
            return Health(False, f"a commit to {self.table_uri} has run over {self.commit_timeout_ms} ms")
        if self._refusal is not None:
            return Health(False, self._refusal)
        return self._health

    # -- the flusher --------------------------------------------------------------------------

    def _is_full(self, batch: _Batch) -> bool:
        return len(batch.pushes) >= self.max_batch_rows or batch.size >= self.max_batch_bytes

    def _due_in(self) -> float:
        """Seconds until the first batch must be committed (0: now)."""
        first = self._batches[0]
        if (
            first.flush
            or self._closing
            or len(self._batches) > 1  # a later push did not fit: the batch is closed
            or self._is_full(first)
        ):
            return 0.0
        return max(0.0, self.max_batch_latency_ms / 1000 - (time.monotonic() - first.first_at))

    def _renewal_due_in(self) -> float:
        """Seconds until the lease must be claimed or renewed by an empty commit (0: now)."""
        if self._closing:
            return math.inf
        since = time.monotonic() - self._last_commit_at
        return max(0.0, self.claim.lease_ms / 3000 - since)

    async def _run(self) -> None:
        assert self._wakeup is not None
        while True:
            if self._stalled is not None:
                with contextlib.suppress(Exception):
                    await self._stalled  # commits stay one at a time: wait for it to return
                self._stalled = None
            if not self._batches:
                if self._closing:
                    return
                due = self._renewal_due_in()
                if due <= 0:
                    await self._renew()
                    continue
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), due)
                continue
            due = self._due_in()
            if due > 0:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), due)
                continue
            batch = self._batches.popleft()
            self._pending_bytes -= batch.size
            await self._commit(batch)

    async def _in_thread(self, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` in a worker thread, waited for at most ``commit_timeout_ms``: past it,
        the call is left running as ``_stalled`` and TimeoutError is raised."""
        call = asyncio.ensure_future(asyncio.to_thread(function, *args))
        try:
            return await asyncio.wait_for(asyncio.shield(call), self.commit_timeout_ms / 1000)
        except TimeoutError:
            self._stalled = call
            raise

    async def _renew(self) -> None:
        """Claim or renew the writer id's lease with an empty commit."""
        sequence = self._sequence
        self._sequence += 1
        try:
            await self._in_thread(self.appender.append, TELEMETRY_PUSHES_SCHEMA.empty_table(), sequence)
        except Exception as exc:
            self._failed(exc)
        else:
            self._succeeded(f"holds writer id {self.writer_id}")

    async def _commit(self, batch: _Batch) -> None:
        sequence = self._sequence
        self._sequence += 1  # never reused, even after a failure: versions need not be contiguous
        started = time.monotonic()
        try:
            landed = await self._in_thread(self._land, batch, sequence)
        except Exception as exc:  # a storage failure (AppendError, a sync failure), a stall, a refusal
            self._failed(exc)
            result = ExportResult.RETRYABLE
        else:
            if landed:
                self.commits += 1
                self.commit_latencies_ms.append((time.monotonic() - started) * 1000)
                if len(self.commit_latencies_ms) > 10_000:
                    del self.commit_latencies_ms[:5_000]
                self._succeeded(f"committed batch {sequence}")
            result = ExportResult.SUCCESS
        if not batch.future.done():
            batch.future.set_result(result)

    def _succeeded(self, detail: str) -> None:
        self._last_commit_at = time.monotonic()
        self._refusal = None
        self._health = Health(True, detail)

    def _failed(self, exc: Exception) -> None:
        if isinstance(exc, ClaimRefusedError):
            log.error("%s", exc)
            self._refusal = str(exc)
            self._fail_queued()
        elif isinstance(exc, TimeoutError):  # the batches behind it would wait on storage: fail them now
            log.error(
                "a commit to %s ran over %d ms: storage has stalled", self.table_uri, self.commit_timeout_ms
            )
            self._fail_queued()
        else:
            log.error("committing to %s failed: %s", self.table_uri, exc)
            self._health = Health(False, f"last commit failed: {exc}")
        self._last_commit_at = time.monotonic()  # the next claim or renewal waits its period

    def _fail_queued(self) -> None:
        """Answer every queued batch RETRYABLE (nothing of them was written)."""
        while self._batches:
            batch = self._batches.popleft()
            self._pending_bytes -= batch.size
            if not batch.future.done():
                batch.future.set_result(ExportResult.RETRYABLE)

    def _land(self, batch: _Batch, sequence: int) -> bool:
        """In a worker thread: leave out forwarded pushes already held, convert, commit (with the
        forwarded batches' ``txn``), make durable; False when no push of the batch was left to commit
        (nothing was committed)."""
        transactions = self._forwarded_transactions(batch)
        table = self._rows(batch, sequence)
        if table is None:
            return False
        self.appender.append(table, sequence, transactions)
        if self.fsync:
            sync_local_table(self.table_uri)
        return True

    def _forwarded_transactions(self, batch: _Batch) -> list[Transaction]:
        """Record in ``batch.duplicates`` the pushes of forwarded batches this table already holds (no
        other process commits to it: what it holds now, it holds at the commit), or that an earlier
        attempt queued in this very commit brings (a resend that came while the first attempt still
        waited for its commit); the ``txn`` of each forwarder whose pushes are left, at its highest
        ``last``."""
        if not batch.forwarded:
            return []
        stored = self.appender.transaction_versions({_app_id(f) for f, _ in batch.forwarded})
        duplicates: set[int] = set()
        versions: dict[str, int] = {}
        for forwarded, indexes in batch.forwarded:
            app_id = _app_id(forwarded)
            if forwarded.last <= max(stored[app_id], versions.get(app_id, -1)):
                duplicates.update(indexes)
            else:
                versions[app_id] = forwarded.last
        batch.duplicates = frozenset(duplicates)
        updated = wall_clock_ms()  # Delta expires txn actions by it: always the real time
        return [Transaction(app_id, version, updated) for app_id, version in versions.items()]

    def _stored_by_another_replica(self, forwarded: ForwardedBatch) -> bool:
        """In a worker thread: whether another replica's table holds the forwarded batch."""
        if self.shards_uri is None:
            return False
        app_id, options = _app_id(forwarded), self.storage_options or None
        for uri in delta_tables_under(self.shards_uri, self.storage_options):
            if uri != self.table_uri.rstrip("/"):
                version = DeltaTable(uri, storage_options=options).transaction_version(app_id)
                if version is not None and version >= forwarded.last:
                    return True
        return False

    def _rows(self, batch: _Batch, sequence: int) -> pa.Table | None:
        """The rows of the batch's pushes but its duplicates; if their data cannot be converted, the
        rows of the pushes that convert alone, the others recorded in ``batch.refused`` (None: no
        push was left)."""
        kept = [(i, push) for i, push in enumerate(batch.pushes) if i not in batch.duplicates]
        if not kept:
            return None
        try:
            return pushes_to_table([push for _, push in kept], self.writer_id, sequence)
        except _DATA_ERRORS as exc:
            log.warning("%d pushes do not convert (%s): converting them one by one", len(kept), exc)
        rows, refused = [], set()
        for index, push in kept:
            try:
                rows.append(pushes_to_table([push], self.writer_id, sequence))
            except _DATA_ERRORS as exc:
                log.warning("push %s refused, its data has no row: %s", push.context.push_id, exc)
                refused.add(index)
        batch.refused = frozenset(refused)
        return pa.concat_tables(rows) if rows else None


def _app_id(forwarded: ForwardedBatch) -> str:
    """The Delta ``txn`` app id a forwarder's batches are recorded under, in every replica's table."""
    return f"{FORWARDED_APP_ID_PREFIX}{forwarded.forwarder}"
