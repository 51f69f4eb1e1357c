"""The config log: subscriptions, client quotas and SCRAM credentials as versioned records in a Delta
table, and the image each replica builds from it (Kafka's metadata log and its ``ClientQuotasImage``).

The table ``<data root>/config_log`` (name and schema in ``exporters.delta.schema``) is shared by every
replica. Each admin change is one Delta commit whose version is the change's offset; its rows are the
records of the change, in order (``seq``):

| column | type | meaning |
|---|---|---|
| seq | int32 | position of the record in its commit |
| kind | string | ``subscription``, ``client_quota``, ``scram_credential`` or ``broker_config`` |
| subscription | string | subscription name (``subscription`` records) |
| properties | string | the subscription's complete property set after the change, JSON (``{}``: deleted) |
| entity_user / entity_client_id / entity_ip | string | the quota entity; ``<default>`` for a default part |
| quota_key | string | e.g. ``producer_byte_rate`` |
| quota_value | double | the new value; null removes the key |
| principal | string | who made the change |
| replica_id | string | the replica that wrote it |
| written_at | timestamp (us, UTC) | when |

A ``broker_config`` record (a dynamic broker config: ``dynamic_configs``) has the key in ``quota_key``
and ``{"value": ...}`` in ``properties`` (``{}``: removed). A ``scram_credential`` record
(AlterUserScramCredentials) uses three of them: ``entity_user`` is the
user, ``quota_key`` the mechanism (``SCRAM-SHA-256``, the config name ``kafka-configs.sh`` gives it),
``properties`` the salted credential as JSON (iterations, and salt, StoredKey and ServerKey in base64;
``{}``: deleted), never a password.

Subscription records carry the state after the change, not the difference, so replaying the log in
offset order from any image gives the same result. The table has the change data feed on (a replica
reads just the commits after the last offset it applied, with their versions) and expired-log cleanup
off (a new replica can replay from offset 0; the log is small).

Writes are conditional (optimistic concurrency, F16): a change prepared from an image at offset N is
committed at exactly offset N + 1, with no commit retries, so it lands only if the log is still at N;
if another writer took N + 1 the commit fails and the change is refused with ``ConfigConflictError``
(nothing written; refresh and retry), never laid over a change its author did not see. A change is
acknowledged only on proof that it is in the log (F6): each commit carries a ``txn`` under an app id
unique to this process (``telemetry-sink-config-log/<replica id>/<random incarnation>``) whose version
numbers the process's commit attempts, so after a commit that reported an error the log says whether
*this* attempt landed, even with two processes sharing a replica id.

``ConfigImage`` applies records to the running engines: a subscription record updates the store (which
bumps its update version, so client instances are re-evaluated); a quota record changes the quota
managers' limits without resetting recorded usage (QUO-8). ``ConfigLogFollower`` tails the log: every
replica applies every change, its own included, in offset order, within ``poll_interval_s``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from exporters.delta.appender import latest, sync_local_table
from exporters.delta.schema import CONFIG_LOG_SCHEMA
from ingest.admin.dynamic_configs import BrokerConfigChange, DynamicBrokerConfigs
from ingest.handler_time import waiting
from ingest.security.sasl import SaslCredentials, ScramCredential
from quotas import DEFAULT, ClientQuotaEntity, QuotaEntityError, QuotaManagers
from quotas.entities import (
    CLIENT_ID_TAG,
    ENTITY_FIELDS,
    IP_TAG,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER_TAG,
    EntityComponent,
    entity_parts,
)
from subscriptions import SubscriptionError, SubscriptionStore
from subscriptions.errors import ApiError, Errors
from subscriptions.model import PropertyValue

__all__ = [
    "ConfigChange",
    "ConfigConflictError",
    "ConfigImage",
    "ConfigLog",
    "ConfigLogError",
    "ConfigLogFollower",
    "ConfigRecord",
    "InvalidFilterError",
    "QuotaChange",
    "SubscriptionChange",
]

log = logging.getLogger(__name__)

TABLE_CONFIGURATION: Final = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableExpiredLogCleanup": "false",
    # the txn entries of processes that are gone are forgotten after a week
    "delta.setTransactionRetentionDuration": "interval 7 days",
}
APP_ID_PREFIX: Final = "telemetry-sink-config-log"
MAX_BACKOFF_MS: Final = 2000
MAX_UNCONDITIONAL_RACES: Final = 100
"""An unconditional append (``read_version=None``) lost to another writer this many times is refused."""


class SubscriptionChange(NamedTuple):
    """``name`` now has exactly ``properties`` (empty: the subscription is deleted)."""

    name: str
    properties: Mapping[str, PropertyValue]


class QuotaChange(NamedTuple):
    """``key`` of ``entity`` is now ``value`` (None: removed)."""

    entity: ClientQuotaEntity
    key: str
    value: float | None


class ScramChange(NamedTuple):
    """``user``'s SCRAM credential for ``mechanism`` is now ``credential`` (None: deleted), as
    AlterUserScramCredentials sets it (KIP-554): the salted form only, never a password."""

    user: str
    mechanism: str
    credential: ScramCredential | None


ConfigChange = SubscriptionChange | QuotaChange | ScramChange | BrokerConfigChange


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
    elif isinstance(change, BrokerConfigChange):
        value = {} if change.value is None else {"value": change.value}
        row.update(kind="broker_config", quota_key=change.key, properties=json.dumps(value))
    elif isinstance(change, ScramChange):
        row.update(
            kind="scram_credential",
            entity_user=change.user,
            quota_key=change.mechanism,
            properties=json.dumps(_credential_json(change.credential)),
        )
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


def _credential_json(credential: ScramCredential | None) -> dict[str, Any]:
    if credential is None:
        return {}
    return {
        "iterations": credential.iterations,
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
    }


def _credential(document: Mapping[str, Any]) -> ScramCredential | None:
    if not document:
        return None
    return ScramCredential(
        salt=base64.b64decode(document["salt"]),
        stored_key=base64.b64decode(document["stored_key"]),
        server_key=base64.b64decode(document["server_key"]),
        iterations=int(document["iterations"]),
    )


def _from_row(row: Mapping[str, Any]) -> ConfigRecord:
    change: ConfigChange
    if row["kind"] == "subscription":
        change = SubscriptionChange(row["subscription"], json.loads(row["properties"]))
    elif row["kind"] == "broker_config":
        change = BrokerConfigChange(row["quota_key"], json.loads(row["properties"]).get("value"))
    elif row["kind"] == "scram_credential":
        change = ScramChange(row["entity_user"], row["quota_key"], _credential(json.loads(row["properties"])))
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


class ConfigLogError(ApiError):
    """UNKNOWN_SERVER_ERROR (-1): a change was not acknowledged: it is not in the log, or (``in_doubt``)
    whether it is could not be found out. Retrying is safe either way: every change states absolute
    values."""

    error = Errors.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, *, in_doubt: bool = False) -> None:
        super().__init__(message)
        self.in_doubt = in_doubt


class ConfigConflictError(ConfigLogError):
    """NOT_CONTROLLER (41): the log moved past the offset a change was prepared at (another change was
    written meanwhile): nothing was written. Retriable once the image has caught up with the log (a
    Kafka admin client retries NOT_CONTROLLER after refreshing its metadata)."""

    error = Errors.NOT_CONTROLLER

    def __init__(self, read_version: int, log_version: int) -> None:
        super().__init__(
            f"config-log conflict: the change was prepared at offset {read_version}, but the log is at "
            f"offset {log_version} (another change was written meanwhile); nothing was written, retry"
        )
        self.read_version = read_version
        self.log_version = log_version


class _NotWrittenError(Exception):
    """One commit attempt failed, and the log proves it did not land (nor did anyone else's)."""


class ConfigLog:
    """The Delta table: conditional appends of changes, acknowledged on proof, and reads of the
    commits after an offset.

    Blocking (delta-rs I/O): call it from a worker thread, one call at a time.
    """

    def __init__(
        self,
        table_uri: str,
        *,
        replica_id: str,
        storage_options: Mapping[str, str] | None = None,
        attempts: int = 3,
        backoff_ms: int = 100,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.table_uri = table_uri
        self.replica_id = replica_id
        self.storage_options = dict(storage_options or {})
        self.attempts = attempts
        self.backoff_ms = backoff_ms
        self.app_id = f"{APP_ID_PREFIX}/{replica_id}/{secrets.token_hex(8)}"
        """The ``txn`` app id of this process's commits: no other process commits under it."""
        self._commit_attempts = 0
        """The ``txn`` version of the last commit attempt (they increase, one at a time)."""
        self._table: DeltaTable | None = None

    def append(
        self,
        changes: Sequence[ConfigChange],
        principal: str,
        now_ms: int,
        *,
        read_version: int | None = None,
    ) -> int:
        """Commit ``changes`` as one change (one Delta commit), durably; return its offset.

        ``read_version``: the offset of the image the change was prepared from; the change is
        committed at exactly the next offset or not at all (ConfigConflictError). None: at whatever
        offset is next (for changes that depend on nothing before them). A failed attempt is retried
        (``attempts``, with backoff) once the log proves it did not land; ConfigLogError at the end.
        """
        rows = [_to_row(i, c, principal, self.replica_id, now_ms) for i, c in enumerate(changes)]
        batch = pa.Table.from_pylist(rows, schema=CONFIG_LOG_SCHEMA)
        delay = self.backoff_ms
        failures = races = 0
        while True:
            try:
                return self._commit(batch, read_version)
            except ConfigConflictError:
                races += 1
                if read_version is not None or races >= MAX_UNCONDITIONAL_RACES:
                    raise
                continue  # unconditional: the next offset is another one now
            except _NotWrittenError as exc:
                failures += 1
                log.warning(
                    "config log %s: change not written (attempt %d): %s", self.table_uri, failures, exc
                )
                if failures >= self.attempts:
                    raise ConfigLogError(f"the change could not be written to the config log: {exc}") from exc
            time.sleep(delay / 1000)
            delay = min(delay * 2, MAX_BACKOFF_MS)

    def _commit(self, batch: pa.Table, read_version: int | None) -> int:
        """One attempt at committing ``batch`` at exactly offset ``read_version + 1`` (None: the
        latest + 1); its offset once the table proves it holds it. ConfigConflictError when another
        writer got there first, _NotWrittenError when it did not land, ConfigLogError (in doubt) when
        that cannot be told."""
        try:
            table = self._load()
        except Exception as exc:  # nothing attempted yet
            self._table = None
            raise _NotWrittenError(f"reading the config log failed: {exc}") from exc
        latest = -1 if table is None else table.version()
        base = latest if read_version is None else read_version
        if latest != base:
            raise ConfigConflictError(base, latest)
        self._commit_attempts += 1
        txn = self._commit_attempts
        properties = CommitProperties(
            app_transactions=[Transaction(self.app_id, txn, int(time.time() * 1000))],
            max_commit_retries=0,  # exactly base + 1: a lost race fails instead of moving on
        )
        try:
            write_deltalake(
                self.table_uri if table is None else table,
                batch,
                mode="error" if table is None else "append",  # "error": only if nobody created it
                configuration=TABLE_CONFIGURATION if table is None else None,
                storage_options=self.storage_options or None,
                commit_properties=properties,
            )
        except Exception as exc:  # storage faults surface as many types (OSError, DeltaError, ...)
            self._prove_landed(txn, base, exc)
        self._sync(base + 1)
        return base + 1

    def _prove_landed(self, txn: int, base: int, error: Exception) -> None:
        """After attempt ``txn`` reported ``error``: return if it landed after all, else raise."""
        self._table = None
        try:
            table = self._load()
            latest = -1 if table is None else table.version()
            landed = table is not None and table.transaction_version(self.app_id) == txn
        except Exception as exc:
            raise ConfigLogError(
                f"the config log could not be read after a failed commit ({error}; then {exc}): "
                "whether the change is in it is unknown; check its history or retry",
                in_doubt=True,
            ) from error
        if landed:
            log.warning("config log %s: commit reported %r but landed at %d", self.table_uri, error, base + 1)
        elif latest > base:
            raise ConfigConflictError(base, latest) from error
        else:
            raise _NotWrittenError(str(error)) from error

    def _sync(self, version: int) -> None:
        try:
            sync_local_table(self.table_uri)
        except OSError as exc:
            raise ConfigLogError(
                f"the change was committed at offset {version} but not synced to stable storage ({exc}):"
                " a crash may still lose it; check the config log's history",
                in_doubt=True,
            ) from exc

    def _load(self) -> DeltaTable | None:
        """The table at its latest version (updated in place), or None if it does not exist yet."""
        self._table = latest(self._table, self.table_uri, self.storage_options)
        return self._table

    def latest_version(self) -> int:
        """The offset of the last change (-1: the log is empty or does not exist yet)."""
        table = self._load()
        return -1 if table is None else table.version()

    def read_since(self, version: int) -> tuple[int, list[ConfigRecord]]:
        """The records of every commit after ``version``, in offset order, and the latest offset."""
        table = self._load()
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


@dataclass
class ConfigImage:
    """The configuration the log describes, applied to this replica's subscription store and quota
    managers; ``version`` is the offset of the last applied change."""

    store: SubscriptionStore
    quotas: QuotaManagers
    version: int = -1
    client_quotas: dict[ClientQuotaEntity, dict[str, float]] = field(default_factory=dict)
    """The configured quotas by entity (Kafka's ``ClientQuotasImage``)."""
    credentials: SaslCredentials = field(default_factory=lambda: SaslCredentials({}))
    """The SASL users (the users file's), under the log's SCRAM credentials (Kafka's ``ScramImage``)."""
    broker_configs: DynamicBrokerConfigs = field(default_factory=DynamicBrokerConfigs)
    """The dynamic broker configs (connection quotas) the log set."""

    def apply(self, change: ConfigChange) -> None:
        """Apply one change; a change this replica cannot apply is logged and skipped (it was
        validated when written, so only a replica with other limits can refuse it)."""
        try:
            if isinstance(change, SubscriptionChange):
                self.store.update(change.name, change.properties)
                return
            if isinstance(change, ScramChange):
                self.credentials.set_scram(change.mechanism, change.user, change.credential)
                return
            if isinstance(change, BrokerConfigChange):
                self.broker_configs.set(change)
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
                    exact[kind] = DEFAULT
                else:
                    any_of.add(kind)
            else:
                raise InvalidFilterError(f"Unknown match type {component.match_type}")
        kinds = exact.keys() | any_of
        if IP_TAG in kinds and kinds & {USER_TAG, CLIENT_ID_TAG}:
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

    def __init__(
        self,
        config_log: ConfigLog,
        image: ConfigImage,
        poll_interval_s: float = 2.0,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.log = config_log
        self.image = image
        self.poll_interval_s = poll_interval_s
        self.now_ms = now_ms
        self._lock = asyncio.Lock()

    async def catch_up(self) -> int:
        """Apply every change after the image's offset; return the offset reached."""
        async with self._lock:
            return await self._catch_up()

    async def _catch_up(self) -> int:
        """Read the log after the image's offset and apply it. Applying is the cluster's work, not a
        client's: its time goes to the request quota's ``exempt-request-time``, as a broker's
        UpdateMetadata from the controller (KIP-124; AUD-D10)."""
        version, records = await asyncio.to_thread(self.log.read_since, self.image.version)
        started = time.perf_counter_ns()
        self.image.apply_records(records, version)
        if records:
            self.image.quotas.request.record_exempt(time.perf_counter_ns() - started, self.now_ms())
        return self.image.version

    async def write(
        self, changes: Sequence[ConfigChange], principal: str, now_ms: int, *, read_version: int | None = None
    ) -> int:
        """Log ``changes`` durably as one change and apply the log up to it; return its offset.

        ``read_version``: the image offset the change was prepared from (``ConfigLog.append``). On a
        conflict the image is brought up to the log before ConfigConflictError is raised, so that a
        retry is prepared from the state that won.

        The writer's request waits meanwhile (``waiting``): the commit is the config log's work, as a
        broker forwards an admin write to its controller and charges the request quota only its own
        handling (KF3-D8)."""
        with waiting():
            async with self._lock:
                try:
                    version = await asyncio.to_thread(
                        self.log.append, changes, principal, now_ms, read_version=read_version
                    )
                except ConfigConflictError:
                    await self._catch_up_logged()
                    raise
                await self._catch_up_logged()  # the change is in the log: a failed read changes nothing
                return version

    async def write_absolute(
        self, changes: Sequence[ConfigChange], principal: str, now_ms: int, *, retries: int = 1
    ) -> int:
        """Log changes that state absolute values (they depend on nothing before them), prepared from
        the image; after a conflict the image has caught up, so they are written again, up to
        ``retries`` times. ConfigLogError (ConfigConflictError when every attempt lost) otherwise."""
        while True:
            try:
                return await self.write(changes, principal, now_ms, read_version=self.image.version)
            except ConfigConflictError:
                if retries == 0:
                    raise
                retries -= 1

    async def _catch_up_logged(self) -> None:
        try:
            await self._catch_up()
        except Exception:  # the tail (``run``) applies it at its next read
            log.exception("reading the config log %s failed", self.log.table_uri)

    async def history(self, since: int) -> list[ConfigRecord]:
        """The records after offset ``since`` (for operators and the dashboard)."""
        async with self._lock:
            _, records = await asyncio.to_thread(self.log.read_since, since)
            return records

    async def run(self) -> None:
        """Tail the log until cancelled; a failed read is logged and retried next interval."""
        while True:
            await asyncio.sleep(self.poll_interval_s)
            async with self._lock:
                await self._catch_up_logged()
