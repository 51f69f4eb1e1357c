"""The names and schemas of the tables the front end writes: the bronze ``telemetry_pushes`` (one row
per accepted push) and ``quota_samples`` (periodic snapshots of the quota engine's sensors), and the
admin API's ``config_log`` (its columns are documented in ``ingest.admin.config_log``). Defined here, once,
because both the front end and the Spark side may import ``exporters`` (and not each other). The
bronze tables are partitioned by ``date`` (UTC, ``YYYY-MM-DD``, kept as a string so every reader sees
the same partition values).

``telemetry_pushes``:

| column | type | meaning |
|---|---|---|
| push_id | string | unique id of the push |
| date | string | partition: the UTC date the push was received |
| received_at | timestamp (us, UTC) | when the sink accepted it |
| client_instance_id | string | the client instance id as Kafka writes it (22 chars of base64url) |
| subscription_id | int32 | the subscription id the client pushed with |
| principal | string | who pushed (``User:ANONYMOUS`` without authentication) |
| client_id | string | Kafka client id |
| client_software_name / _version | string | from the client's ApiVersions or headers |
| client_source_address / _port | string / int32 | peer address |
| quota_entity | string | the quota entity the push counts against (``client-id=c1,user=alice``) |
| quota_tags | map<string,string> | the same, as tags |
| compression_type | int8 | Kafka compression id as sent (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) |
| terminating | bool | the client's last push before closing |
| payload_bytes | int32 | size of ``payload`` |
| payload | binary | OTLP ``MetricsData``, decompressed and validated |
| writer_id | string | the sink process that landed it |
| batch_seq | int64 | that writer's commit sequence number (its Delta ``txn`` version) |

``quota_samples``: one row per sensor value per snapshot: ``sampled_at``, ``date``, ``writer_id``,
``group`` (the quota type: ``Produce``, ``Request``, ``ConnectionQuotas``...), ``metric`` (Kafka's
metric name: ``byte-rate``, ``throttle-time``, ``request-time``...), ``entity`` (the tags as
``k=v,k=v``, sorted: ``client-id=c1,user=alice``), ``tags`` and ``value``. The sink adds the requests
it answered since its previous snapshot, counted by quota entity: ``group`` ``Requests``, ``metric``
``<rpc>/<Kafka error code>`` (``PushTelemetry/0``, ``PushTelemetry/89``, ``Export/87``), ``value``
the count.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Final, NamedTuple

import pyarrow as pa

from exporters.base import TelemetryPush, entity_text

__all__ = [
    "BRONZE_TABLES",
    "CONFIG_LOG_SCHEMA",
    "CONFIG_LOG_TABLE",
    "PARTITION_BY",
    "QUOTA_SAMPLES_SCHEMA",
    "QUOTA_SAMPLES_TABLE",
    "TELEMETRY_PUSHES_SCHEMA",
    "TELEMETRY_PUSHES_TABLE",
    "QuotaSample",
    "kafka_instance_id",
    "pushes_to_table",
    "quota_samples_to_table",
    "utc_date",
]

TELEMETRY_PUSHES_TABLE: Final = "telemetry_pushes"
"""Sharded: one Delta table per sink replica, ``<data root>/telemetry_pushes/<replica>``."""
QUOTA_SAMPLES_TABLE: Final = "quota_samples"
"""Sharded like ``telemetry_pushes``."""
BRONZE_TABLES: Final = (TELEMETRY_PUSHES_TABLE, QUOTA_SAMPLES_TABLE)
CONFIG_LOG_TABLE: Final = "config_log"
"""One table, ``<data root>/config_log``, shared by every replica."""

PARTITION_BY: Final = ["date"]
STATS_COLUMNS: Final = (
    "push_id",
    "received_at",
    "client_instance_id",
    "client_id",
    "quota_entity",
    "writer_id",
    "batch_seq",
)
"""Columns with min/max statistics for data skipping (not the payload: stats on it are costly and
useless)."""
_DAY_MS: Final = 86_400_000

TELEMETRY_PUSHES_SCHEMA: Final = pa.schema(
    [
        pa.field("push_id", pa.string(), nullable=False),
        pa.field("date", pa.string(), nullable=False),
        pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("client_instance_id", pa.string(), nullable=False),
        pa.field("subscription_id", pa.int32(), nullable=False),
        pa.field("principal", pa.string(), nullable=False),
        pa.field("client_id", pa.string()),
        pa.field("client_software_name", pa.string()),
        pa.field("client_software_version", pa.string()),
        pa.field("client_source_address", pa.string()),
        pa.field("client_source_port", pa.int32()),
        pa.field("quota_entity", pa.string(), nullable=False),
        pa.field("quota_tags", pa.map_(pa.string(), pa.string())),
        pa.field("compression_type", pa.int8(), nullable=False),
        pa.field("terminating", pa.bool_(), nullable=False),
        pa.field("payload_bytes", pa.int32(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("writer_id", pa.string(), nullable=False),
        pa.field("batch_seq", pa.int64(), nullable=False),
    ]
)

QUOTA_SAMPLES_SCHEMA: Final = pa.schema(
    [
        pa.field("sampled_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("date", pa.string(), nullable=False),
        pa.field("writer_id", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("entity", pa.string(), nullable=False),
        pa.field("tags", pa.map_(pa.string(), pa.string())),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

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


def kafka_instance_id(instance_id: uuid.UUID) -> str:
    """A client instance id as Kafka writes it (``Uuid.toString()``: URL-safe base64 of the 16 bytes,
    no padding; ``aVd3fzviRGSgEuAWNY5mMA``), the one form the sink stores and prints. Exporters import
    no other package of the repo, so this is the exporters' copy of ``subscriptions``'
    ``kafka_uuid_string`` (a test holds the two equal)."""
    return base64.urlsafe_b64encode(instance_id.bytes).rstrip(b"=").decode("ascii")


def utc_date(ms: int) -> str:
    """The UTC date of a millisecond timestamp, ``YYYY-MM-DD``."""
    return _day(ms // _DAY_MS)


@lru_cache(maxsize=64)
def _day(day: int) -> str:
    return datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")


def pushes_to_table(pushes: Sequence[TelemetryPush], writer_id: str, batch_seq: int) -> pa.Table:
    """The rows of one commit, in the ``telemetry_pushes`` schema."""
    contexts = [p.context for p in pushes]
    n = len(pushes)
    entities: dict[int, tuple[str, list[tuple[str, str]]]] = {}  # one quota entity's clients share
    for c in contexts:  # their tags object: convert it once
        if id(c.quota_tags) not in entities:
            entities[id(c.quota_tags)] = (c.quota_entity, list(c.quota_tags.items()))
    columns = {
        "push_id": [c.push_id for c in contexts],
        "date": [utc_date(c.received_ms) for c in contexts],
        "received_at": [c.received_ms * 1000 for c in contexts],
        "client_instance_id": [kafka_instance_id(c.client_instance_id) for c in contexts],
        "subscription_id": [c.subscription_id for c in contexts],
        "principal": [c.principal for c in contexts],
        "client_id": [c.client_id for c in contexts],
        "client_software_name": [c.client_software_name for c in contexts],
        "client_software_version": [c.client_software_version for c in contexts],
        "client_source_address": [c.client_source_address for c in contexts],
        "client_source_port": [c.client_source_port for c in contexts],
        "quota_entity": [entities[id(c.quota_tags)][0] for c in contexts],
        "quota_tags": [entities[id(c.quota_tags)][1] for c in contexts],
        "compression_type": [c.compression_type for c in contexts],
        "terminating": [c.terminating for c in contexts],
        "payload_bytes": [len(p.payload) for p in pushes],
        "payload": [p.payload for p in pushes],
        "writer_id": [writer_id] * n,
        "batch_seq": [batch_seq] * n,
    }
    return pa.Table.from_pydict(columns, schema=TELEMETRY_PUSHES_SCHEMA)


class QuotaSample(NamedTuple):
    """One sensor value of the quota engine: ``group`` is the quota type (``Produce``, ...)."""

    group: str
    metric: str
    tags: tuple[tuple[str, str], ...]
    value: float


def quota_samples_to_table(samples: Sequence[QuotaSample], sampled_ms: int, writer_id: str) -> pa.Table:
    n = len(samples)
    return pa.Table.from_pydict(
        {
            "sampled_at": [sampled_ms * 1000] * n,
            "date": [utc_date(sampled_ms)] * n,
            "writer_id": [writer_id] * n,
            "group": [s.group for s in samples],
            "metric": [s.metric for s in samples],
            "entity": [entity_text(s.tags) for s in samples],
            "tags": [list(s.tags) for s in samples],
            "value": [s.value for s in samples],
        },
        schema=QUOTA_SAMPLES_SCHEMA,
    )
