"""Which process writes as a writer id: a lease kept in the table's own Delta log.

Each sink replica lands in a shard of its own, named by its replica id (the writer id). Two processes
started with one replica id (a configuration copied with its ``replica_id``, a pod restarted while
its predecessor still runs) must not both write as it. Every commit of the landing exporter carries,
besides its batch's own transaction, two Delta transactions (``txn`` actions) for the writer id:

- ``telemetry-sink-writer/<writer id>``: the holder, as its incarnation (a random positive 62-bit
  number each process draws; ``RELEASED``, 0, once the holder stopped cleanly);
- ``telemetry-sink-heartbeat/<writer id>``: the wall-clock time of that commit, in milliseconds.

Before each commit the writer reads both from the table version it is about to write on
(``WriterClaim.check``):

| the table says | held by this process before | decision |
|---|---|---|
| nobody, released, or this process | - | write (the commit claims or renews the lease) |
| another process, heartbeat younger than ``lease_ms`` | no | ``WriterIdInUseError``: refuse to write |
| another process, heartbeat older than ``lease_ms`` | no | write (the lease expired: taken over) |
| another process | yes | ``WriterFencedError``: it took the id over; stop writing |

So of two live processes with one writer id, the second refuses to write and says why, and the first
writes on. Two claims at the same moment cannot both win: Delta fails a commit carrying a ``txn`` of an
app id that a concurrent commit also carries. An idle holder renews its lease with an empty commit
every third of the lease; a clean shutdown releases it, so a restart takes over at once. After a
crash the writer id is free once the lease has expired. Heartbeats are compared with this process's
wall clock: hosts whose clocks differ by more than the lease can misjudge each other.
"""

from __future__ import annotations

import secrets
from typing import Final

from deltalake import DeltaTable, Transaction

from exporters.errors import ExporterError

__all__ = [
    "DEFAULT_WRITER_LEASE_MS",
    "RELEASED",
    "ClaimRefusedError",
    "WriterClaim",
    "WriterFencedError",
    "WriterIdInUseError",
]

DEFAULT_WRITER_LEASE_MS: Final = 30_000
RELEASED: Final = 0
"""The holder's value once the holder stopped cleanly."""


class ClaimRefusedError(ExporterError):
    """This process must not write as the writer id now (not a storage fault: not retried)."""


class WriterIdInUseError(ClaimRefusedError):
    """Another live process holds the writer id."""


class WriterFencedError(ClaimRefusedError):
    """Another process took the writer id over from this one."""


class WriterClaim:
    """This process's claim on ``writer_id``: the decision before each commit and the transactions
    each commit carries."""

    def __init__(self, writer_id: str, lease_ms: int = DEFAULT_WRITER_LEASE_MS) -> None:
        if lease_ms < 1:
            raise ValueError("writer_lease_ms must be positive")
        self.writer_id = writer_id
        self.lease_ms = lease_ms
        self.incarnation = secrets.randbits(62) + 1
        self.holder_app_id = f"telemetry-sink-writer/{writer_id}"
        self.heartbeat_app_id = f"telemetry-sink-heartbeat/{writer_id}"
        self.held = False
        """True once a commit of this process carried the claim (until fenced or released)."""

    def check(self, table: DeltaTable | None, now_ms: int) -> None:
        """Raise ``ClaimRefusedError`` unless this process may commit on ``table`` (its latest version)."""
        holder = RELEASED if table is None else table.transaction_version(self.holder_app_id)
        if holder in (None, RELEASED, self.incarnation):
            return
        assert table is not None
        if self.held:
            self.held = False
            raise WriterFencedError(
                f"writer id {self.writer_id!r} was taken over by another process (incarnation {holder:x}, "
                f"this one {self.incarnation:x}): this process stops writing as it"
            )
        heartbeat = table.transaction_version(self.heartbeat_app_id) or 0
        age_ms = now_ms - heartbeat
        if age_ms < self.lease_ms:
            raise WriterIdInUseError(
                f"writer id {self.writer_id!r} is in use by another process (incarnation {holder:x}, "
                f"last commit {max(age_ms, 0)} ms ago): this process will not write as it until that one "
                f"stops or {self.lease_ms} ms pass without its commits; give each process its own replica id"
            )

    def transactions(self, now_ms: int, updated_ms: int) -> list[Transaction]:
        """What a commit carries to claim or renew the lease (``updated_ms``: the ``txn`` actions'
        ``lastUpdated``, the real time, by which Delta expires them)."""
        return [
            Transaction(self.holder_app_id, self.incarnation, updated_ms),
            Transaction(self.heartbeat_app_id, now_ms, updated_ms),
        ]

    def release_transactions(self, updated_ms: int) -> list[Transaction]:
        """What the last commit of a clean stop carries: the writer id is free at once."""
        return [Transaction(self.holder_app_id, RELEASED, updated_ms)]
