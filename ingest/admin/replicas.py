"""The live sink replicas: KIP-257's cluster metadata, so that a quota callback sharing a quota across
replicas (``quotas.ReplicaShareQuotaCallback``) divides by the replicas really serving (AUD-C14).

Every replica announces itself in the data root, beside the tables: every ``admin.replica_heartbeat_ms``
it writes ``<data_root>/_replicas/<replica id, percent-encoded>.json``::

    {"replica_id": "sink-0", "incarnation": "5f1c...", "heartbeat_ms": 1764032400000,
     "session_timeout_ms": 30000}

then lists the directory. A replica is live while its last heartbeat is younger than its session
timeout, as a KRaft controller keeps a broker while its heartbeats arrive within
``broker.session.timeout.ms``; a replica always counts itself. When the live set changes, the quota
managers are told (``QuotaManagers.update_cluster_metadata``, what Kafka calls on a metadata update),
and every manager whose callback says its limits changed re-reads them. A replica that stops cleanly
deletes its announcement (when it is still its own incarnation's: a newer process with the same id may
have taken over), so the others count it gone at their next heartbeat rather than a session timeout
later; one that dies is gone a session timeout after its last heartbeat.

Heartbeats are compared with the reader's clock, so replica clocks must agree to well within the
session timeout (NTP does). What a directory entry may hold is bounded: a file over
``MAX_ANNOUNCEMENT_BYTES`` or one that does not read as an announcement is skipped (and logged once),
and at most ``MAX_REPLICAS`` announcements are read. A failed write or listing is logged and the live
set stays what it was: quotas do not swing because the store hiccuped.

``live_replicas`` is the pure part (announcements and ``now`` in, the live ids out); ``ReplicaDirectory``
does the I/O (a pyarrow file system over the data root, with the delta-rs storage options, in a thread).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Final, NamedTuple
from urllib.parse import quote

import pyarrow.fs as pafs

from exporters.delta.object_store import arrow_filesystem, is_local
from quotas import ClusterMetadata, QuotaManagers

__all__ = ["REPLICAS_DIR", "Announcement", "ReplicaDirectory", "live_replicas"]

log = logging.getLogger(__name__)

REPLICAS_DIR: Final = "_replicas"
MAX_ANNOUNCEMENT_BYTES: Final = 4096
MAX_REPLICAS: Final = 10_000
_SUFFIX: Final = ".json"


class Announcement(NamedTuple):
    """What one replica last said about itself."""

    replica_id: str
    incarnation: str
    heartbeat_ms: int
    session_timeout_ms: int

    def to_json(self) -> bytes:
        return json.dumps(self._asdict(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Announcement:
        """ValueError when ``data`` is not an announcement."""
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        replica_id, incarnation = document.get("replica_id"), document.get("incarnation")
        heartbeat, timeout = document.get("heartbeat_ms"), document.get("session_timeout_ms")
        if not (isinstance(replica_id, str) and replica_id and isinstance(incarnation, str)):
            raise ValueError("replica_id and incarnation must be strings")
        if not (type(heartbeat) is int and type(timeout) is int and timeout > 0):
            raise ValueError("heartbeat_ms and session_timeout_ms must be integers")
        return cls(replica_id, incarnation, heartbeat, timeout)


def live_replicas(announcements: Iterable[Announcement], own_id: str, now_ms: int) -> tuple[str, ...]:
    """The ids of the replicas live at ``now_ms``, sorted: those whose last heartbeat is younger than
    their session timeout, and this replica whatever its file says."""
    live = {a.replica_id for a in announcements if now_ms - a.heartbeat_ms < a.session_timeout_ms}
    live.add(own_id)
    return tuple(sorted(live))


class ReplicaDirectory:
    """This replica's announcement in ``<data_root>/_replicas``, and the live set it reads there."""

    def __init__(
        self,
        data_root: str,
        *,
        replica_id: str,
        cluster_id: str,
        quotas: QuotaManagers,
        now_ms: Callable[[], int],
        heartbeat_ms: int = 10_000,
        session_timeout_ms: int = 30_000,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self._fs, root = arrow_filesystem(data_root, storage_options)
        self._local = is_local(data_root)
        self.directory = f"{root.rstrip('/')}/{REPLICAS_DIR}"
        self.replica_id = replica_id
        self.cluster_id = cluster_id
        self.quotas = quotas
        self.now_ms = now_ms
        self.heartbeat_ms = heartbeat_ms
        self.session_timeout_ms = session_timeout_ms
        self.incarnation = secrets.token_hex(8)
        self.live: tuple[str, ...] = ()
        self._path = f"{self.directory}/{quote(replica_id, safe='')}{_SUFFIX}"
        self._skipped: set[str] = set()

    async def heartbeat(self) -> tuple[str, ...]:
        """Announce this replica, read the others, and tell the quota managers if the live set
        changed; the live set (the last one known if the store failed)."""
        try:
            live = await asyncio.to_thread(self._heartbeat, self.now_ms())
        except OSError as exc:
            log.warning(
                "replica heartbeat in %s failed (the live set stays %s): %s", self.directory, self.live, exc
            )
            return self.live or (self.replica_id,)
        if live != self.live:
            log.info("live sink replicas: %s (was %s)", ", ".join(live), ", ".join(self.live) or "none")
            self.live = live
            self.quotas.update_cluster_metadata(ClusterMetadata(self.cluster_id, live))
        return live

    async def run(self) -> None:
        """Heartbeat every ``heartbeat_ms`` until cancelled."""
        while True:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            await self.heartbeat()

    async def withdraw(self) -> None:
        """Remove this replica's announcement, if it is still this process's (a clean stop)."""
        try:
            await asyncio.to_thread(self._withdraw)
        except OSError as exc:
            log.warning(
                "removing %s failed (the others count this replica gone once it times out): %s",
                self._path,
                exc,
            )

    # -- in a thread ----------------------------------------------------------------------------

    def _heartbeat(self, now_ms: int) -> tuple[str, ...]:
        mine = Announcement(self.replica_id, self.incarnation, now_ms, self.session_timeout_ms)
        self._write(mine.to_json())
        return live_replicas(self._read_all(), self.replica_id, now_ms)

    def _write(self, data: bytes) -> None:
        if not self._local:  # an object store's PUT replaces the object whole
            with self._fs.open_output_stream(self._path) as out:
                out.write(data)
            return
        self._fs.create_dir(self.directory, recursive=True)
        partial = f"{self._path}.{self.incarnation}.tmp"
        with self._fs.open_output_stream(partial) as out:
            out.write(data)
        self._fs.move(partial, self._path)  # a rename: a reader never sees half a file

    def _read_all(self) -> list[Announcement]:
        selector = pafs.FileSelector(self.directory, allow_not_found=True)
        found = []
        for info in self._fs.get_file_info(selector)[:MAX_REPLICAS]:
            if info.type != pafs.FileType.File or not info.path.endswith(_SUFFIX):
                continue
            announcement = self._read(info)
            if announcement is not None:
                found.append(announcement)
        return found

    def _read(self, info: pafs.FileInfo) -> Announcement | None:
        try:
            if (info.size or 0) > MAX_ANNOUNCEMENT_BYTES:
                raise ValueError(f"{info.size} bytes (at most {MAX_ANNOUNCEMENT_BYTES})")
            with self._fs.open_input_stream(info.path) as stream:
                return Announcement.from_json(stream.read(MAX_ANNOUNCEMENT_BYTES + 1))
        except FileNotFoundError:
            return None  # withdrawn between the listing and the read
        except (ValueError, RecursionError) as exc:
            if info.path not in self._skipped:
                self._skipped.add(info.path)
                log.warning("%s is not a replica announcement, skipped: %s", info.path, exc)
            return None

    def _withdraw(self) -> None:
        try:
            with self._fs.open_input_stream(self._path) as stream:
                current = Announcement.from_json(stream.read(MAX_ANNOUNCEMENT_BYTES + 1))
        except (FileNotFoundError, ValueError, RecursionError):
            return
        if current.incarnation == self.incarnation:
            self._fs.delete_file(self._path)
