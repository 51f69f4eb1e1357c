"""The config log: subscriptions and client quotas as versioned records in a Delta table, and the
image each replica builds from it (Kafka's metadata log and its ``ClientQuotasImage``).

The table ``<data root>/config_log`` is shared by every replica. Each admin change is one Delta commit
whose version is the change's offset; its rows are the records of the change, in order (``seq``):

| column | type | meaning |
|---|---|---|
| seq | int32 | position of the record in its commit |
| kind | string | ``subscription`` or ``client_quota`` |
| subscription | string | subscription name (``subscription`` records) |
| properties | string | the subscription's complete property set after the change, JSON (``{}``: deleted) |
| entity_user / entity_client_id / entity_ip | string | the quota entity; ``<default>`` for a default part |
| quota_key | string | e.g. ``producer_byte_rate`` |
| quota_value | double | the new value; null removes the key |
| principal | string | who made the change |
| replica_id | string | the replica that wrote it |
| written_at | timestamp (us, UTC) | when |

Subscription records carry the state after the change, not the difference, so replaying the log in
offset order from any image gives the same result. The table has the change data feed on (a replica
reads just the commits after the last offset it applied, with their versions) and expired-log cleanup
off (a new replica can replay from offset 0; the log is small).

``ConfigImage`` applies records to the running engines: a subscription record updates the store (which
bumps its update version, so client instances are re-evaluated); a quota record changes the quota
managers' limits without resetting recorded usage (QUO-8). ``ConfigLogFollower`` tails the log: every
replica applies every change, its own included, in offset order, within ``poll_interval_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, NamedTuple

import pyarrow as pa

from exporters.delta.appender import DeltaAppender, sync_local_table
from ingest.quotas import ClientQuotaEntity, QuotaEntityError, QuotaManagers
from subscriptions import SubscriptionError, SubscriptionStore
from subscriptions.model import PropertyValue

__all__ = [
    "CONFIG_LOG_SCHEMA",
    "CONFIG_LOG_TABLE",
    "ENTITY_FIELDS",
    "ConfigChange",
    "ConfigImage",
    "ConfigLog",
    "ConfigLogFollower",
    "ConfigRecord",
    "EntityComponent",
    "InvalidFilterError",
    "QuotaChange",
    "SubscriptionChange",
]

log = logging.getLogger(__name__)

CONFIG_LOG_TABLE: Final = "config_log"
TABLE_CONFIGURATION: Final = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableExpiredLogCleanup": "false",
}
CONFIG_LOG_SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("subscription", pa.string()),
        pa.field("properties", pa.string()),
        pa.field("entity_user", pa.string()),
        pa.field("entity_client_id", pa.string()),
        pa.field("entity_ip", pa.string()),
        pa.field("quota_key", pa.string()),
        pa.field("quota_value", pa.float64()),
        pa.field("principal", pa.string(), nullable=False),
        pa.field("replica_id", pa.string(), nullable=False),
        pa.field("written_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


class SubscriptionChange(NamedTuple):
    """``name`` now has exactly ``properties`` (empty: the subscription is deleted)."""

    name: str
    properties: Mapping[str, PropertyValue]


class QuotaChange(NamedTuple):
    """``key`` of ``entity`` is now ``value`` (None: removed)."""

    entity: ClientQuotaEntity
    key: str
    value: float | None


ConfigChange = SubscriptionChange | QuotaChange


class ConfigRecord(NamedTuple):
    """One change as read back from the log, with its offset and provenance."""

    version: int
    change: ConfigChange
    principal: str
    replica_id: str
    written_ms: int


def _to_row(seq: int, change: ConfigChange, principal: str, replica_id: str, now_ms: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "seq": seq,
        "principal": principal,
        "replica_id": replica_id,
        "written_at": datetime.fromtimestamp(now_ms / 1000, UTC),
    }
    if isinstance(change, SubscriptionChange):
        properties = {k: list(v) if isinstance(v, tuple) else v for k, v in change.properties.items()}
        row.update(kind="subscription", subscription=change.name, properties=json.dumps(properties))
    else:
        entity = change.entity
        row.update(
            kind="client_quota",
            entity_user=entity.user,
            entity_client_id=entity.client_id,
            entity_ip=entity.ip,
            quota_key=change.key,
            quota_value=change.value,
        )
    return row


def _from_row(row: Mapping[str, Any]) -> ConfigRecord:
    change: ConfigChange
    if row["kind"] == "subscription":
        change = SubscriptionChange(row["subscription"], json.loads(row["properties"]))
    else:
        entity = ClientQuotaEntity(row["entity_user"], row["entity_client_id"], row["entity_ip"])
        change = QuotaChange(entity, row["quota_key"], row["quota_value"])
    written: datetime = row["written_at"]
    return ConfigRecord(
        row["_commit_version"],
        change,
        row["principal"],
        row["replica_id"],
        int(written.timestamp() * 1000),
    )


class ConfigLog:
    """The Delta table: durable appends of changes, and reads of the commits after an offset.

    Blocking (delta-rs I/O): call it from a worker thread, one call at a time.
    """

    def __init__(
        self, table_uri: str, *, replica_id: str, storage_options: Mapping[str, str] | None = None
    ) -> None:
        self.table_uri = table_uri
        self.replica_id = replica_id
        self._appender = DeltaAppender(
            table_uri,
            CONFIG_LOG_SCHEMA,
            f"telemetry-sink-config-log/{replica_id}",
            storage_options=storage_options,
            table_configuration=TABLE_CONFIGURATION,
        )

    def append(self, changes: Sequence[ConfigChange], principal: str, now_ms: int) -> None:
        """Commit ``changes`` as one change (one Delta commit), durably; AppendError if it can't be."""
        rows = [_to_row(i, c, principal, self.replica_id, now_ms) for i, c in enumerate(changes)]
        batch = pa.Table.from_pylist(rows, schema=CONFIG_LOG_SCHEMA)
        self._appender.append(batch, self._appender.committed_version() + 1)
        sync_local_table(self.table_uri)

    def latest_version(self) -> int:
        """The offset of the last change (-1: the log is empty or does not exist yet)."""
        table = self._appender.load()
        return -1 if table is None else table.version()

    def read_since(self, version: int) -> tuple[int, list[ConfigRecord]]:
        """The records of every commit after ``version``, in offset order, and the latest offset."""
        table = self._appender.load()
        if table is None:
            return -1, []
        latest = table.version()
        if latest <= version:
            return latest, []
        batches = table.load_cdf(starting_version=version + 1, ending_version=latest).read_all()
        rows = pa.table(batches).to_pylist()
        rows.sort(key=lambda r: (r["_commit_version"], r["seq"]))
        return latest, [_from_row(r) for r in rows if r["_change_type"] == "insert"]


class InvalidFilterError(ValueError):
    """A DescribeClientQuotas filter Kafka refuses (INVALID_REQUEST)."""


class EntityComponent(NamedTuple):
    """One component of a DescribeClientQuotas filter: ``match_type`` 0 exact (``match``: the name),
    1 the default entity, 2 any entity of the type."""

    entity_type: Literal["user", "client-id", "ip"]
    match_type: int
    match: str | None = None


MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_SPECIFIED: Final = 2
ENTITY_FIELDS: Final = {"user": "user", "client-id": "client_id", "ip": "ip"}
"""Kafka's quota entity types and the ``ClientQuotaEntity`` field each names."""


def entity_parts(entity: ClientQuotaEntity) -> dict[str, str]:
    """The entity as Kafka lists it: entity type -> name (``<default>`` for a default part)."""
    return {t: getattr(entity, f) for t, f in ENTITY_FIELDS.items() if getattr(entity, f) is not None}


@dataclass
class ConfigImage:
    """The configuration the log describes, applied to this replica's subscription store and quota
    managers; ``version`` is the offset of the last applied change."""

    store: SubscriptionStore
    quotas: QuotaManagers
    version: int = -1
    client_quotas: dict[ClientQuotaEntity, dict[str, float]] = field(default_factory=dict)
    """The configured quotas by entity (Kafka's ``ClientQuotasImage``)."""

    def apply(self, change: ConfigChange) -> None:
        """Apply one change; a change this replica cannot apply is logged and skipped (it was
        validated when written, so only a replica with other limits can refuse it)."""
        try:
            if isinstance(change, SubscriptionChange):
                self.store.update(change.name, change.properties)
                return
            self.quotas.alter(change.entity, change.key, change.value)
        except (SubscriptionError, QuotaEntityError) as exc:
            log.warning("config change %s not applied: %s", change, exc)
            return
        values = self.client_quotas.setdefault(change.entity, {})
        if change.value is None:
            values.pop(change.key, None)
            if not values:
                del self.client_quotas[change.entity]
        else:
            values[change.key] = change.value

    def apply_records(self, records: Iterable[ConfigRecord], version: int) -> None:
        for record in records:
            self.apply(record.change)
        self.version = max(self.version, version)

    def describe_client_quotas(
        self, components: Sequence[EntityComponent], strict: bool
    ) -> list[tuple[dict[str, str], dict[str, float]]]:
        """DescribeClientQuotas over the image: (entity parts, quotas) of every matching entity.

        Raises InvalidFilterError for a filter Kafka refuses."""
        exact: dict[str, str] = {}
        any_of: set[str] = set()
        for component in components:
            kind = component.entity_type
            if kind not in ENTITY_FIELDS:
                raise InvalidFilterError(f"Unsupported entity type {kind}")
            if kind in exact or kind in any_of:
                raise InvalidFilterError(f"Entity type {kind} cannot appear more than once in the filter.")
            if component.match_type == MATCH_EXACT:
                if component.match is None:
                    raise InvalidFilterError(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                    )
                exact[kind] = component.match
            elif component.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
                if component.match is not None:
                    raise InvalidFilterError(
                        f"Request specified match type {component.match_type} and a match string."
                    )
                if component.match_type == MATCH_DEFAULT:
                    exact[kind] = "<default>"
                else:
                    any_of.add(kind)
            else:
                raise InvalidFilterError(f"Unknown match type {component.match_type}")
        kinds = exact.keys() | any_of
        if "ip" in kinds and kinds & {"user", "client-id"}:
            raise InvalidFilterError(
                "Invalid entity filter component combination. IP filter component should not be used "
                "with user or clientId filter component."
            )
        found = []
        for entity, values in self.client_quotas.items():
            parts = entity_parts(entity)
            if strict and len(parts) != len(kinds):
                continue
            if all(parts.get(k) == v for k, v in exact.items()) and any_of <= parts.keys():
                found.append((parts, dict(values)))
        return found


class ConfigLogFollower:
    """Keeps a ``ConfigImage`` in step with the ``ConfigLog``: replays it at start, tails it every
    ``poll_interval_s``, and writes changes (then applies them, and everything before them, in
    offset order)."""

    def __init__(self, config_log: ConfigLog, image: ConfigImage, poll_interval_s: float = 2.0) -> None:
        self.log = config_log
        self.image = image
        self.poll_interval_s = poll_interval_s
        self._lock = asyncio.Lock()

    async def catch_up(self) -> int:
        """Apply every change after the image's offset; return the offset reached."""
        async with self._lock:
            return await self._catch_up()

    async def _catch_up(self) -> int:
        version, records = await asyncio.to_thread(self.log.read_since, self.image.version)
        self.image.apply_records(records, version)
        return self.image.version

    async def write(self, changes: Sequence[ConfigChange], principal: str, now_ms: int) -> int:
        """Log ``changes`` durably as one change and apply the log up to it; its offset or later."""
        async with self._lock:
            await asyncio.to_thread(self.log.append, changes, principal, now_ms)
            return await self._catch_up()

    async def history(self, since: int) -> list[ConfigRecord]:
        """The records after offset ``since`` (for operators and the dashboard)."""
        async with self._lock:
            _, records = await asyncio.to_thread(self.log.read_since, since)
            return records

    async def run(self) -> None:
        """Tail the log until cancelled; a failed read is logged and retried next interval."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.catch_up()
            except Exception:
                log.exception("reading the config log %s failed", self.log.table_uri)
