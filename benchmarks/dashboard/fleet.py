"""The benchmark's data: a day of a librdkafka fleet's 1-minute rollups, written straight into the gold
tables (``rollup_client_1m``, ``rollup_client_1h``, ``rollup_entity_1m``, ``rollup_entity_activity_1m``)
and a config log.

Rolling a day of 10,000 clients up through the Spark jobs would take hours here (the ``rollup``
benchmark), so the rows are generated with numpy and pyarrow in the jobs' own schemas
(``rollup_schema``, ``activity_schema``) and committed with delta-rs, one commit per hour, partitioned
as the jobs partition them.

Each hour's 1-minute client rows are also merged into ``rollup_client_1h`` (the dashboard reads a
window's whole hours from it).

- ``clients`` instances, half producers, half consumers, with librdkafka 2.16's metric sets from the
  loadgen (``loadgen``), per-broker metrics for 1-3 brokers (consumers also report the bootstrap
  node, -1); each pushes every ``interval_s`` (default 300 s, KIP-714's default push interval), so a
  client has rows in one minute in five: about 14 series per push.
- ``entities`` quota entities (principals), clients spread evenly.
- Activity per minute and entity: pushes, bytes and answers by code (a few entities are answered
  THROTTLING_QUOTA_EXCEEDED), two samples a minute of the ``Produce`` throttle time (every 7th entity
  is throttled), and the ``ControllerMutation`` token bucket of every 25th entity.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from ingest.admin.config_log import ConfigLog, QuotaChange, SubscriptionChange
from loadgen import CONSUMER_METRICS, PRODUCER_METRICS, MetricSpec
from quotas import ClientQuotaEntity
from spark_jobs.transforms.activity import activity_schema
from spark_jobs.transforms.rollup import PARTITION_OF, Width, rollup_schema
from subscriptions import kafka_uuid_string

DAY_START = datetime(2026, 11, 21, tzinfo=UTC)


@dataclass(frozen=True)
class FleetSpec:
    clients: int = 10_000
    entities: int = 200
    hours: int = 24
    interval_s: int = 300
    seed: int = 7


_TS = pa.timestamp("us", tz="UTC")
_SERIES_COLUMNS = (
    "client_instance_id",
    "principal",
    "client_id",
    "quota_entity",
    "metric_name",
    "metric_kind",
    "metric_unit",
    "temporality",
    "is_monotonic",
    "attributes",
    "attributes_key",
)


def _series(spec: FleetSpec) -> pa.Table:
    """One row per (client, metric, attributes): what every push of the client carries."""
    columns: dict[str, list[object]] = {k: [] for k in ("client", *_SERIES_COLUMNS, "low", "high")}
    rng = np.random.default_rng(spec.seed)
    for client in range(spec.clients):
        producer = client % 2 == 0
        metrics: tuple[MetricSpec, ...] = PRODUCER_METRICS if producer else CONSUMER_METRICS
        brokers = [str(n) for n in range(1, 2 + client % 3)] + ([] if producer else ["-1"])
        user = f"user-{client % spec.entities:03d}"
        instance = kafka_uuid_string(uuid.UUID(int=int(rng.integers(1, 2**63)) << 64 | client))
        for metric in metrics:
            for node in brokers if metric.per_node else [None]:
                columns["client"].append(client)
                columns["client_instance_id"].append(instance)
                columns["client_id"].append(f"{'producer' if producer else 'consumer'}-{client}")
                columns["principal"].append(f"User:{user}")
                columns["quota_entity"].append(f"client-id=,user={user}")
                columns["metric_name"].append(metric.name)
                columns["metric_kind"].append(metric.kind)
                columns["metric_unit"].append("")
                columns["temporality"].append("delta" if metric.kind == "sum" else None)
                columns["is_monotonic"].append(True if metric.kind == "sum" else None)
                columns["attributes"].append([("node.id", node)] if node else [])
                columns["attributes_key"].append(f'{{"node.id":"{node}"}}' if node else "{}")
                columns["low"].append(float(metric.low))
                columns["high"].append(float(metric.high))
    types = {
        "attributes": pa.map_(pa.string(), pa.string()),
        "is_monotonic": pa.bool_(),
        "temporality": pa.string(),
    }
    return pa.table({k: pa.array(v, type=types.get(k)) for k, v in columns.items()})


def _client_table(
    rows: pa.Table, starts: np.ndarray, measures: dict[str, pa.Array], width: Width
) -> pa.Table:
    """Client rows of ``width`` in the job's schema: ``rows`` of the series table, their buckets and
    measures (every other measure null)."""
    n = rows.num_rows
    bucket_start = pa.array(starts, _TS)
    columns = {
        "bucket_start": bucket_start,
        **{name: rows.column(name) for name in _SERIES_COLUMNS},
        "client_software_name": pa.array(["librdkafka"] * n),
        "client_software_version": pa.array(["2.16.0"] * n),
        **measures,
        PARTITION_OF[width]: pc.strftime(bucket_start, "%Y-%m-%dT%H" if width == "1m" else "%Y-%m-%d"),
    }
    schema = rollup_schema("client", width)
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema)


def _client_rows(
    series: pa.Table, hour: datetime, rng: np.random.Generator, spec: FleetSpec
) -> tuple[pa.Table, pa.Table]:
    """The 1-minute client rows of ``hour`` (every series of the clients whose push falls in each
    minute) and its 1-hour rows (one per series that pushed, its minutes merged; ``value_last`` is left
    out: the dashboard does not read it)."""
    every = max(1, spec.interval_s // 60)
    offsets = series.column("client").to_numpy() % every
    minutes = [hour + timedelta(minutes=m) for m in range(60)]
    picks = [np.flatnonzero(offsets == (int(m.timestamp()) // 60) % every) for m in minutes]
    index = np.concatenate(picks)
    rows = series.take(pa.array(index))
    n = len(index)
    starts = np.repeat(np.array([int(m.timestamp() * 1_000_000) for m in minutes]), [len(p) for p in picks])
    low, high = rows.column("low").to_numpy(), rows.column("high").to_numpy()
    value = low + (high - low) * rng.random(n)
    gauge = pc.equal(rows.column("metric_kind"), "gauge").to_numpy(zero_copy_only=False)
    time = pa.array(starts + rng.integers(0, 60_000_000, n), _TS)
    gauge_value = pa.array(np.where(gauge, value, np.nan), mask=~gauge)
    measures = {
        "points": pa.array(np.ones(n, np.int64)),
        "first_time": time,
        "last_time": time,
        "value_sum": pa.array(value),
        "value_count": pa.array(np.ones(n, np.int64)),
        "value_min": gauge_value,
        "value_max": gauge_value,
        "value_last": gauge_value,
        "unknown_deltas": pa.array(np.zeros(n, np.int64)),
    }
    by_minute = _client_table(rows, starts, measures, "1m")
    summed = {"points": "sum", "value_sum": "sum", "value_count": "sum", "unknown_deltas": "sum"}
    ranges = {"value_min": "min", "value_max": "max", "first_time": "min", "last_time": "max"}
    merged = (
        pa.table({**{k: measures[k] for k in (*summed, *ranges)}, "series": pa.array(index)})
        .group_by("series")
        .aggregate([(k, f) for k, f in {**summed, **ranges}.items()])
    )
    hourly = {k: merged.column(f"{k}_{f}") for k, f in {**summed, **ranges}.items()}
    hour_start = np.full(merged.num_rows, int(hour.timestamp() * 1_000_000))
    by_hour = _client_table(series.take(merged.column("series")), hour_start, hourly, "1h")
    return by_minute, by_hour


def _entity_rows(clients: pa.Table) -> pa.Table:
    keys = ["bucket_start", "quota_entity", "metric_name", "metric_kind", "bucket_hour"]
    grouped = clients.group_by(keys).aggregate(
        [
            ("metric_unit", "max"),
            ("client_instance_id", "count_distinct"),
            ("points", "sum"),
            ("first_time", "min"),
            ("last_time", "max"),
            ("value_sum", "sum"),
            ("value_count", "sum"),
            ("value_min", "min"),
            ("value_max", "max"),
            ("unknown_deltas", "sum"),
        ]
    )
    names = {
        "metric_unit_max": "metric_unit",
        "client_instance_id_count_distinct": "clients",
        "points_sum": "points",
        "first_time_min": "first_time",
        "last_time_max": "last_time",
        "value_sum_sum": "value_sum",
        "value_count_sum": "value_count",
        "value_min_min": "value_min",
        "value_max_max": "value_max",
        "unknown_deltas_sum": "unknown_deltas",
    }
    grouped = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
    schema = rollup_schema("entity", "1m")
    n = grouped.num_rows
    arrays = [
        grouped.column(f.name) if f.name in grouped.column_names else pa.nulls(n, f.type) for f in schema
    ]
    arrays[schema.get_field_index("value_last")] = grouped.column("value_max")
    return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema)


def _activity_rows(clients: pa.Table, rng: np.random.Generator, spec: FleetSpec) -> pa.Table:
    """Per minute and entity: pushes (clients with rows), bytes, answers, throttle time and tokens."""
    pushes = clients.group_by(["bucket_start", "quota_entity", "bucket_hour"]).aggregate(
        [("client_instance_id", "count_distinct"), ("last_time", "max")]
    )
    count = pushes.column("client_instance_id_count_distinct").to_numpy().astype(np.float64)
    entity = np.array([int(e.split("user-")[1]) for e in pushes.column("quota_entity").to_pylist()])
    throttled = entity % 7 == 0
    refused = np.where(entity % 11 == 0, np.ceil(count / 3), 0.0)
    frames = []

    def rows(group: str, metric: str, values: np.ndarray, mask: np.ndarray, samples: int = 1) -> None:
        picked = np.flatnonzero(mask)
        values = values[picked]
        frames.append(
            pa.table(
                {
                    "bucket_start": pushes.column("bucket_start").take(pa.array(picked)),
                    "quota_entity": pushes.column("quota_entity").take(pa.array(picked)),
                    "group": pa.array([group] * len(picked)),
                    "metric": pa.array([metric] * len(picked)),
                    "samples": pa.array(np.full(len(picked), samples, np.int64)),
                    "value_sum": pa.array(values * samples),
                    "value_min": pa.array(values * 0.5),
                    "value_max": pa.array(values * 1.5),
                    "value_last": pa.array(values),
                    "last_time": pushes.column("last_time_max").take(pa.array(picked)),
                    "bucket_hour": pushes.column("bucket_hour").take(pa.array(picked)),
                }
            )
        )

    everyone = np.ones(len(count), bool)
    rows("telemetry_pushes", "pushes", count, everyone, samples=1)
    rows("telemetry_pushes", "payload_bytes", count * 2_147.0, everyone)
    rows("Requests", "PushTelemetry/0", count - refused, everyone)
    rows("Requests", "PushTelemetry/89", refused, refused > 0)
    rows("Produce", "throttle-time", np.where(throttled, rng.uniform(50, 900, len(count)), 0.0), everyone, 2)
    rows("ControllerMutation", "tokens", rng.uniform(-20, 10, len(count)), entity % 25 == 0, 2)
    schema = activity_schema("1m")
    table = pa.concat_tables(frames)
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema], schema=schema)


def write_fleet(root: str, spec: FleetSpec) -> None:
    """Write the day (``spec.hours`` from ``DAY_START``) into ``root``."""
    rng = np.random.default_rng(spec.seed)
    series = _series(spec)
    for hour in range(spec.hours):
        start = DAY_START + timedelta(hours=hour)
        clients, hourly = _client_rows(series, start, rng, spec)
        tables = (
            ("rollup_client_1m", clients),
            ("rollup_client_1h", hourly),
            ("rollup_entity_1m", _entity_rows(clients)),
            ("rollup_entity_activity_1m", _activity_rows(clients, rng, spec)),
        )
        for name, table in tables:
            write_deltalake(f"{root}/{name}", table, mode="append", partition_by=[table.column_names[-1]])
    log = ConfigLog(f"{root}/config_log", replica_id="bench")
    at_ms = int(DAY_START.timestamp() * 1000)
    subscription = SubscriptionChange(
        "librdkafka", {"metrics": ("org.apache.kafka.",), "interval.ms": 300_000}
    )
    log.append([subscription], "User:admin", at_ms - 86_400_000)
    for k in range(20):
        change = QuotaChange(
            ClientQuotaEntity(user=f"user-{k * 7:03d}"), "producer_byte_rate", 1024.0 * (k + 1)
        )
        log.append([change], "User:ops", at_ms + k * 3_600_000)
