"""The rollup job: silver ``metric_points`` and the bronze tables -> the gold tables, incrementally
and exactly once.

| table | one row per | partitioned by | computed from |
|---|---|---|---|
| ``rollup_client_1m`` | minute, client instance, metric, attributes | ``bucket_hour`` | ``metric_points`` |
| ``rollup_client_1h`` | hour, client instance, metric, attributes | ``bucket_date`` | ``rollup_client_1m`` |
| ``rollup_entity_1m`` | minute, quota entity, metric | ``bucket_hour`` | ``rollup_client_1m`` |
| ``rollup_entity_1h`` | hour, quota entity, metric | ``bucket_date`` | ``rollup_client_1h`` |
| ``rollup_entity_activity_1m`` | minute, quota entity, group, metric | ``bucket_hour`` | see below |
| ``rollup_entity_activity_1h`` | hour, quota entity, group, metric | ``bucket_date`` | the 1-minute one |

The 1-minute activity table (``transforms.activity``) comes from every shard of bronze
``telemetry_pushes`` and ``quota_samples`` and from ``decode_quarantine``: it keeps a watermark per
source shard (app id ``telemetry-sink-rollup/rollup_entity_activity_1m/<table>/<shard>``), and the
minutes one shard touches are recomputed from all of them (from the files whose statistics may hold
those minutes); the 1-hour one recomputes the hours the 1-minute one gained rows in.

Each gold table remembers the version of its source it has caught up with, as the ``txn`` of app id
``telemetry-sink-rollup/<table>``. A run reads only what the source's commits added since that
version, works out what those rows touch, recomputes it from the source's snapshot and replaces it
in one commit carrying the source's version. Each table recomputes by the bucket (``_Step.by``): the
minutes or hours the rows fall in, whose rows alone are replaced. So late data recomputes only its
buckets (for the 1-minute client rows, also the minute of the next point of each late point's series
within ``lookback_s``, whose cumulative delta starts from the late point), a re-run commits nothing,
and a run that dies between two tables leaves each table consistent: the next run catches each up from its own
version. ``since`` recomputes every partition from that time on as well (after a change of
``lookback_s``, say).

The 1-hour tables hold closed hours only: an hour's rows are written once it is ``CLOSE_AFTER`` past
its end (the run that finds it closed computes it from all its minutes), and again only if late rows
reach it. Until then the hour is left to its minutes: the ``telemetry.`` views of the 1-hour tables
merge the minutes of the hours after the newest one written (``spark_jobs.views``), so a reader sees
every hour. So a minute's run does no hourly work at all, except in the first run past an hour's end.

After the decode, the activity tables and the metric tables are refreshed side by side (two threads,
each submitting its own Spark jobs), and so are the 1-hour and the 1-minute entity rollups once the
1-minute client rollup is done: each table still follows only its own sources, in the same order.
A ``rollup_client_1h_prefix`` table that an earlier version of the job kept is no longer read or
written. Last, the run compacts the bronze shards that have gathered many small files and expires
their logs behind what it has read of them (``jobs.upkeep``), so that what it reads of them next stays
small.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import pyarrow as pa
from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.jobs.decode import DecodeReport, decoded_through, lag_s, run_decode
from spark_jobs.jobs.upkeep import (
    COMPACT_AT_FILES,
    Compaction,
    checkpointed_since,
    compact_bronze,
    expire_logs,
)
from spark_jobs.lake import Clustering, DeltaLake, PartitionFilter
from spark_jobs.tables import (
    BRONZE_PUSHES,
    BRONZE_QUOTA_SAMPLES,
    DERIVED_TABLES,
    METRIC_POINTS,
    QUARANTINE,
    ROLLUP_CLIENT_1H,
    ROLLUP_CLIENT_1M,
    ROLLUP_ENTITY_1H,
    ROLLUP_ENTITY_1M,
    ROLLUP_ENTITY_ACTIVITY_1H,
    ROLLUP_ENTITY_ACTIVITY_1M,
    table_uri,
)
from spark_jobs.transforms.activity import (
    activity_rollup,
    activity_schema,
    push_activity,
    quarantine_activity,
    sample_activity,
)
from spark_jobs.transforms.rollup import (
    DEFAULT_LOOKBACK_S,
    MINUTE_PATTERN,
    PARTITION_OF,
    PARTITION_PATTERN,
    SERIES,
    Width,
    client_minutes,
    client_rollup,
    entity_rollup,
    following_minutes,
    rollup_schema,
    unseeded,
)

__all__ = ["ROLLUP_APP", "RollupReport", "TableReport", "run_rollup"]

log = logging.getLogger(__name__)

ROLLUP_APP: Final = "telemetry-sink-rollup"
_HOUR: Final = PARTITION_PATTERN["1m"]
_MINUTE: Final = MINUTE_PATTERN
SEED_WINDOWS_S: Final = (120, 900)
"""How far before the minutes being recomputed the 1-minute client rollup looks for the previous points
of their series, in turn, before the whole lookback: two minutes (clients pushing every 30 s, say),
then three of KIP-714's default 5-minute push intervals (``lookback_s`` if less)."""
SEED_NAMED_SERIES: Final = 20_000
"""At most how many series without a point in a seed window ``_with_older`` names in its read of the
lookback hours (their client instances in the scan's filter): a minute's newcomers, a few hundred
client instances of a few dozen series each. More are looked for in the next window, and past the
longest one (a fleet restarted at once) picked out of the lookback by a join alone."""
CLIENT_MINUTE_FILE_ROWS: Final = 25_000
"""``rollup_client_1m`` is written sorted by ``bucket_start`` in files of at most this many rows, so
that even a catch-up's files hold a few minutes of a 1,000-client fleet each: the 1-hour step reads
only the files of an hour's open minutes, the 1-minute entity step those of its minutes."""
CLOSE_AFTER: Final = timedelta(minutes=2)
"""An hour is closed, and its 1-hour rows written, once it is this long past its end: the points of its
last minutes that land a little late (a batch in flight, a client pushing at the end of its interval)
are in by then; later ones recompute it as any late data does."""


@dataclass
class TableReport:
    """What one run did to one gold table."""

    table: str
    source_version: int
    partitions: list[str]


@dataclass
class RollupReport:
    decode: DecodeReport = field(default_factory=DecodeReport)
    tables: list[TableReport] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    """The bronze shards the run compacted at its end (``jobs.upkeep``)."""
    logs_expired: list[str] = field(default_factory=list)
    """The tables the run writes whose logs it expired at its end (``jobs.upkeep.expire_logs``)."""
    lag_s: float | None = None
    """At the run's end, how far the tables are behind the newest landed push (``decode.lag_s``)."""


def _hour_text(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H")


def _bucket_start(key: str) -> datetime:
    """The start of the hour ``YYYY-MM-DDTHH`` or of the minute ``YYYY-MM-DDTHH:MM`` (UTC)."""
    return datetime.strptime(key, "%Y-%m-%dT%H:%M" if ":" in key else "%Y-%m-%dT%H").replace(tzinfo=UTC)


def _span(hours: Sequence[str]) -> tuple[datetime, datetime]:
    """From the start of the first of these sorted hour keys to the end of the last."""
    return _bucket_start(hours[0]), _bucket_start(hours[-1]) + timedelta(hours=1)


def _hours_before(hour: str, lookback_s: int) -> list[str]:
    """``hour`` and the hours within ``lookback_s`` before it."""
    start = _bucket_start(hour)
    return [_hour_text(start - timedelta(hours=k)) for k in range(math.ceil(lookback_s / 3600) + 1)]


def _distinct(frame: DataFrame, column: str) -> list[str]:
    return sorted(row[0] for row in frame.select(column).distinct().collect() if row[0] is not None)


_END_OF_TIME: Final = datetime(9999, 12, 31, tzinfo=UTC)
STATS_KEYS: Final = 180
"""At most how many buckets ``_Added.keys`` takes from the Delta log's statistics before it reads the
rows instead."""


def _keys_from_stats(
    actions: list[dict[str, Any]] | None, column: str, unit: Literal["minute", "hour"]
) -> list[str] | None:
    """Each bucket from each file's smallest ``column`` value to its largest, by the add actions'
    statistics; None where a file has none, or past ``STATS_KEYS`` buckets."""
    if actions is None:
        return None
    step, pattern = (
        (timedelta(minutes=1), "%Y-%m-%dT%H:%M") if unit == "minute" else (timedelta(hours=1), "%Y-%m-%dT%H")
    )
    keys: set[str] = set()
    for action in actions:
        low, high = action.get(f"min.{column}"), action.get(f"max.{column}")
        if not isinstance(low, datetime) or not isinstance(high, datetime):
            return None
        low, high = (t if t.tzinfo else t.replace(tzinfo=UTC) for t in (low, high))
        at = _bucket_start(low.astimezone(UTC).strftime(pattern))
        while at <= high:
            keys.add(at.strftime(pattern))
            if len(keys) > STATS_KEYS:
                return None
            at += step
    return sorted(keys)


@dataclass(frozen=True)
class _Added:
    """What commits ``after + 1 .. until`` added to a source table."""

    lake: DeltaLake
    uri: str
    after: int
    until: int

    def rows(self) -> DataFrame | None:
        return self.lake.read_added(self.uri, self.after, self.until)

    def keys(self, column: str, unit: Literal["minute", "hour"]) -> list[str]:
        """The minutes (``YYYY-MM-DDTHH:MM``) or hours (``YYYY-MM-DDTHH``) of timestamp ``column``
        in the added rows. From the Delta log without reading a row, when every added file has
        statistics for the column: each bucket from a file's smallest value to its largest (a few
        more than the rows' own where a file spans buckets it has no row in; recomputing those changes
        nothing), if that makes at most ``STATS_KEYS``; else from the rows."""
        keys = _keys_from_stats(self.lake.added_actions(self.uri, self.after, self.until), column, unit)
        if keys is not None:
            return keys
        rows = self.rows()
        text = _MINUTE if unit == "minute" else _HOUR
        return [] if rows is None else _distinct(rows.select(F.date_format(column, text).alias("k")), "k")

    def follow_the_rest(self, column: str) -> bool:
        """Whether every added row's timestamp ``column`` is later than every row the table held at
        ``after``, by the Delta log's statistics (False where they cannot tell): rows that arrive in
        order."""
        actions = self.lake.added_actions(self.uri, self.after, self.until)
        if self.after < 0 or not actions:
            return False
        earliest = [action.get(f"min.{column}") for action in actions]
        known = [t if t.tzinfo else t.replace(tzinfo=UTC) for t in earliest if isinstance(t, datetime)]
        if len(known) < len(earliest):
            return False
        low = min(known)
        return not self.lake.holds(self.uri, (column, low, _END_OF_TIME), self.after)


@dataclass(frozen=True)
class _Step:
    """How one gold table follows a source table."""

    table: str
    schema: pa.Schema
    width: Width
    touched: Callable[[_Added], list[str]]
    """The buckets that rows added to the source change."""
    compute: Callable[[int, list[str]], DataFrame]
    """(the source's version, the buckets) -> the buckets' new rows."""
    by: Literal["hour", "minute"]
    """The table's unit of recompute: the hours (``YYYY-MM-DDTHH``) or minutes (``YYYY-MM-DDTHH:MM``)
    of ``bucket_start``, whose rows alone are replaced (``DeltaLake.write``'s ``replace_rows``)."""
    clustered: Clustering | None = None
    """How the rows are written (``DeltaLake.write``): sorted by a column, in files of at most so many
    rows, so that a read of a few buckets skips the files of the others."""
    closed_only: bool = False
    """A 1-hour table that holds closed hours only (``CLOSE_AFTER``): the open hours its source's rows
    touch are left to their minutes, and computed by the first run that finds them closed."""


def _refresh(
    lake: DeltaLake,
    data_root: str,
    step: _Step,
    sources: Sequence[tuple[str, str]],
    *,
    forced: Sequence[str] = (),
    now: datetime,
    progress: Callable[[str], None],
) -> TableReport | None:
    """Recompute and replace the buckets of ``step.table`` that its ``sources`` (each a table and
    the app id of the ``txn`` under which ``step.table`` follows it) changed since the version the
    table caught up with, and those of the ``forced`` hours, in one commit that carries each changed
    source's new version; of a table of closed hours (one source), only the closed ones
    (``_closed``)."""
    target = table_uri(data_root, step.table)
    partitions = set(forced if step.by == "hour" else [f"{h}:{m:02d}" for h in forced for m in range(60)])
    txns: dict[str, int] = {}
    latest: int | None = None
    for source, app_id in sources:
        version = lake.version(source)
        if version is None:
            continue
        latest = version if latest is None else latest
        done = lake.txn_version(target, app_id)
        if version > done:
            partitions.update(step.touched(_Added(lake, source, done, version)))
            txns[app_id] = version
    if latest is None:
        return None
    stale: set[str] = set()
    if step.closed_only:
        [(source, _)] = sources
        partitions, stale = _closed(lake, target, source, latest, partitions, now=now)
    if not partitions and not stale:
        return None
    chosen = sorted(partitions)
    if chosen:
        progress(f"{step.table}: recomputing {len(chosen)} {step.by}s ({chosen[0]} .. {chosen[-1]})")
    if stale:
        progress(f"{step.table}: removing the rows of {len(stale)} open hours ({', '.join(sorted(stale))})")
    if not txns:  # only a forced recompute: replacing is idempotent, the watermarks stay
        txns = {f"{sources[0][1]}/since": int(time.time() * 1000)}
    lake.write(
        step.compute(latest, chosen) if chosen else None,
        target,
        schema=step.schema,
        partition_by=[PARTITION_OF[step.width]],
        txns=txns,
        replace_rows=("bucket_start", [_bucket_start(k) for k in sorted({*chosen, *stale})]),
        clustered=step.clustered,
    )
    return TableReport(step.table, latest, chosen)


def _closed(
    lake: DeltaLake, target: str, source: str, version: int, hours: set[str], *, now: datetime
) -> tuple[set[str], set[str]]:
    """Of these hours, those closed at ``now`` (``CLOSE_AFTER`` past their end), with every closed hour
    after the newest closed one ``target`` holds in which ``source`` (at ``version``) has rows: the
    hours earlier runs left open, closed since. And the open hours ``target`` holds rows of, which go
    (a table an earlier version of the job wrote every minute holds the hour in progress). The newest
    hours come from the Delta logs' statistics."""
    last_closed = _bucket_start(_hour_text(now.astimezone(UTC) - CLOSE_AFTER)) - timedelta(hours=1)
    span = lake.span(target, "bucket_start")
    stale: set[str] = set()
    held = None
    if span is not None:
        held = _bucket_start(_hour_text(span[1]))
        while held > last_closed:
            stale.add(_hour_text(held))
            held -= timedelta(hours=1)
    source_span = lake.span(source, "bucket_start", version)
    if source_span is not None:
        oldest, newest = (_bucket_start(_hour_text(t)) for t in source_span)
        at = oldest if held is None else max(oldest, held + timedelta(hours=1))
        while at <= min(last_closed, newest):
            if lake.holds(source, ("bucket_start", at, at + timedelta(hours=1)), version):
                hours.add(_hour_text(at))
            at += timedelta(hours=1)
    return {h for h in hours if _bucket_start(h) <= last_closed}, stale


def _hours_of(column: str) -> Callable[[_Added], list[str]]:
    """The hours of ``column`` in the added rows."""
    return lambda added: added.keys(column, "hour")


def _minutes_of(column: str) -> Callable[[_Added], list[str]]:
    """The minutes of ``column`` in the added rows."""
    return lambda added: added.keys(column, "minute")


@dataclass
class _RollupRun:
    """One run of the rollup job: where the tables are, its settings and what it did."""

    lake: DeltaLake
    data_root: str
    lookback_s: int
    since: datetime | None
    progress: Callable[[str], None]
    report: RollupReport
    now: datetime
    """When the run started: which hours are closed."""

    def uri(self, table: str) -> str:
        return table_uri(self.data_root, table)

    def read(self, table: str, version: int, partitions: PartitionFilter) -> DataFrame:
        frame = self.lake.read(self.uri(table), version, partitions=partitions)
        assert frame is not None  # it has a version
        return frame

    def refresh(self, step: _Step, sources: Sequence[tuple[str, str]], forced: Sequence[str] = ()) -> None:
        """``_refresh``: ``step.table`` brought up to date with its ``sources`` (table, app id)."""
        done = _refresh(
            self.lake,
            self.data_root,
            step,
            sources,
            forced=forced,
            now=self.now,
            progress=self.progress,
        )
        if done is not None:
            self.report.tables.append(done)

    def forced_hours(self) -> list[str]:
        """Every hour (``YYYY-MM-DDTHH``) with silver points from ``since`` on."""
        if self.since is None:
            return []
        points = self.lake.read(self.uri(METRIC_POINTS))
        if points is None:
            return []
        recent = points.where(F.col("time") >= F.lit(self.since.astimezone(UTC)))
        return _distinct(recent.select(F.date_format("time", _HOUR).alias("p")), "p")

    def minutes_of_points(self, added: _Added) -> list[str]:
        """A point changes its own minute, and the minute of the next point of its series (whose
        delta starts from it) if that comes within ``lookback_s`` (``following_minutes``, over the
        points from the earliest added minute on). When the added points are all later than every
        point silver held before (``_Added.follow_the_rest``: in order, a warm session's every
        minute), the next point of each is an added one, so their own minutes are all: no job."""
        own = added.keys("time", "minute")
        if not own:
            return []
        if added.follow_the_rest("time"):
            self.progress(f"{ROLLUP_CLIENT_1M}: the new points follow every earlier one (no later minute)")
            return own
        earliest = _bucket_start(own[0])
        last = _bucket_start(own[-1][:13]) + timedelta(seconds=self.lookback_s + 60)
        hours = [
            (_bucket_start(own[0][:13]) + timedelta(hours=k)).strftime("%Y-%m-%dT%H")
            for k in range(math.ceil((last - _bucket_start(own[0][:13])).total_seconds() / 3600) + 1)
        ]
        points = self.lake.read(
            self.uri(METRIC_POINTS),
            partitions=("date", sorted({h[:10] for h in hours})),
            within=("time", earliest, last + timedelta(hours=1)),
        )
        assert points is not None  # the added points are in it
        # the earliest minute as text: a timestamp literal is compiled into Spark's generated code
        minute = F.date_format("time", _MINUTE)
        later = points.where(F.date_format("time", _HOUR).isin(hours) & (minute >= own[0]))
        return sorted(set(own) | set(_distinct(following_minutes(later, own, self.lookback_s), "minute")))

    def client_minutes(self, version: int, minutes: list[str]) -> DataFrame:
        """The 1-minute client rows of these minutes, from their points and the previous points of
        their series. Those are looked for first in the files that may hold points from a short while
        before the minutes on (``SEED_WINDOWS_S``, data skipping). The series with no point in a
        window (a new client instance, a new attribute set, one that pushes less often) find theirs
        in the lookback hours, read for those series alone (``_with_older``), when they are few
        (``SEED_NAMED_SERIES``) or the window is the longest; many are looked for in the next window
        first. Only a catch-up, whose minutes span more than the longest window, reads every point
        of the lookback hours."""
        wanted = sorted({h for minute in minutes for h in _hours_before(minute[:13], self.lookback_s)})
        dates = ("date", sorted({h[:10] for h in wanted}))
        until = _bucket_start(minutes[-1]) + timedelta(minutes=1)
        # minutes spanning more than the longest window (a catch-up) read about everything anyway
        windows = sorted({min(w, self.lookback_s) for w in SEED_WINDOWS_S})
        if until - _bucket_start(minutes[0]) > timedelta(seconds=windows[-1]):
            windows = []
        for window_s in windows:
            within = ("time", _bucket_start(minutes[0]) - timedelta(seconds=window_s), until)
            recent = self.lake.read(self.uri(METRIC_POINTS), version, partitions=dates, within=within)
            assert recent is not None  # it has a version
            missing = unseeded(recent, minutes, window_s).select(*SERIES).distinct()
            found = missing.limit(SEED_NAMED_SERIES + 1).collect()
            if not found:
                self.progress(f"{ROLLUP_CLIENT_1M}: previous points from the {window_s} s before the minutes")
                numbers_only = self.numbers_only(within[1], until)
                return client_minutes(recent, minutes, self.lookback_s, numbers_only=numbers_only)
            # a few series missing (newcomers) are read for on their own; many (a fleet pushing less
            # often than the window) are looked for in the next window first
            if len(found) <= SEED_NAMED_SERIES or window_s == windows[-1]:
                points = self._with_older(version, recent, missing, found, since=within[1], hours=wanted)
                numbers_only = self.numbers_only(*_span(wanted))
                return client_minutes(points, minutes, self.lookback_s, numbers_only=numbers_only)
        self.progress(f"{ROLLUP_CLIENT_1M}: previous points from the lookback hours (a catch-up)")
        points = self.read(METRIC_POINTS, version, dates)
        points = points.where(F.date_format("time", _HOUR).isin(wanted))
        numbers_only = self.numbers_only(*_span(wanted))
        return client_minutes(points, minutes, self.lookback_s, numbers_only=numbers_only)

    def _with_older(
        self,
        version: int,
        recent: DataFrame,
        series: DataFrame,
        found: list[Row],
        *,
        since: datetime,
        hours: list[str],
    ) -> DataFrame:
        """``recent``'s points (read for the files that may hold points from ``since``, the start of
        a seed window, on) from ``since`` on, and the points before it in the lookback
        ``hours`` of the ``series`` without a point since (``unseeded``'s; ``found``: the first of
        them, all of them if at most ``SEED_NAMED_SERIES``). Every kept point's previous point is
        among them, as among every point of the lookback: a seeded series' is within the window, an
        unseeded one's among its own points. So the rows are the same, for a read of the older points
        of a few series. Those are read from the files whose statistics may hold them, and filtered
        by client instance in the scan (Parquet skips the row groups whose dictionaries or statistics
        rule them out) when there are at most ``SEED_NAMED_SERIES`` series, as a minute's newcomers
        have."""
        low, _ = _span(hours)
        dates = ("date", sorted({h[:10] for h in hours}))
        older = self.lake.read(
            self.uri(METRIC_POINTS), version, partitions=dates, within=("time", low, since)
        )
        assert older is not None  # it has a version
        named = len(found) <= SEED_NAMED_SERIES
        if named:  # (else the join alone picks them, in a plan that computes them again)
            series = self.lake.spark.createDataFrame(found, series.schema)
            older = older.where(F.col("client_instance_id").isin(sorted({row[0] for row in found})))
        # the cut as text: a timestamp literal is compiled into Spark's generated code. ``since`` is a
        # minute's start (a window of whole minutes), or the lookback's own start, before which no
        # point is a previous one: the minute holding it cuts as well
        cut = since.strftime("%Y-%m-%dT%H:%M")
        minute = F.date_format("time", _MINUTE)
        older = older.where(F.date_format("time", _HOUR).isin(hours) & (minute < cut))
        self.progress(
            f"{ROLLUP_CLIENT_1M}: previous points from {cut} on, and from the lookback hours for the "
            f"{len(found) if named else f'more than {SEED_NAMED_SERIES}'} series without a point since"
        )
        return recent.where(minute >= cut).unionByName(older.join(series, list(SERIES), "left_semi"))

    def numbers_only(self, low: datetime, high: datetime) -> bool:
        """Whether silver's points from ``low`` to ``high`` are all sums and gauges
        (``NUMBER_KINDS``), by the statistics in its Delta log: every histogram, exponential
        histogram and summary point has a ``count``, so files whose ``count`` is null in every row
        hold none. Rows made of those points need no plan for the histogram path (a fleet of
        librdkafka clients sends only sums and gauges)."""
        return self.lake.all_null(self.uri(METRIC_POINTS), "count", ("time", low, high))

    def entity_minutes(self, version: int, minutes: list[str]) -> DataFrame:
        """The 1-minute entity rows of these minutes, from their client rows (read from the files
        that may hold them)."""
        hours = ("bucket_hour", sorted({m[:13] for m in minutes}))
        low, high = _bucket_start(minutes[0]), _bucket_start(minutes[-1]) + timedelta(minutes=1)
        within = ("bucket_start", low, high)
        rows = self.lake.read(self.uri(ROLLUP_CLIENT_1M), version, partitions=hours, within=within)
        assert rows is not None  # it has a version
        rows = rows.where(F.date_format("bucket_start", _MINUTE).isin(minutes))
        return entity_rollup(rows, "1m", numbers_only=self.numbers_only(low, high))

    def client_hours(self, version: int, hours: list[str]) -> DataFrame:
        """The 1-hour client rows of these (closed) hours, from all their 1-minute rows."""
        rows = self.read(ROLLUP_CLIENT_1M, version, ("bucket_hour", hours))
        columns = [name for name in rollup_schema("client", "1m").names if name != PARTITION_OF["1m"]]
        rows = rows.where(F.date_format("bucket_start", _HOUR).isin(hours)).select(*columns)
        return client_rollup(rows, "1h", numbers_only=self.numbers_only(*_span(hours)))

    def entity_hours(self, version: int, hours: list[str]) -> DataFrame:
        """The 1-hour entity rows of these hours, from their client rows."""
        rows = self.read(ROLLUP_CLIENT_1H, version, ("bucket_date", sorted({h[:10] for h in hours})))
        rows = rows.where(F.date_format("bucket_start", _HOUR).isin(hours))
        return entity_rollup(rows, "1h", numbers_only=self.numbers_only(*_span(hours)))

    def activity_minutes(self, _: int, minutes: list[str]) -> DataFrame:
        """Every source's samples in these minutes (all shards, at their latest versions), read from
        the files whose statistics may hold them: a minute's new pushes cost the files they landed
        in, not the day's."""
        low, high = _bucket_start(minutes[0]), _bucket_start(minutes[-1]) + timedelta(minutes=1)
        dates = ("date", sorted({m[:10] for m in minutes}))
        parts = []
        for table, time_column, to_samples in (
            (BRONZE_PUSHES, "received_at", push_activity),
            (BRONZE_QUOTA_SAMPLES, "sampled_at", sample_activity),
        ):
            for shard in self.lake.shards(self.uri(table)):
                frame = self.lake.read(shard, partitions=dates, within=(time_column, low, high))
                if frame is not None:
                    parts.append(to_samples(frame))
        quarantined = self.lake.read(
            self.uri(QUARANTINE), partitions=dates, within=("received_at", low, high)
        )
        if quarantined is not None:
            parts.append(quarantine_activity(quarantined))
        samples = functools.reduce(DataFrame.unionByName, parts)
        samples = samples.where(F.date_format("time", _MINUTE).isin(minutes))
        return activity_rollup(samples, "1m", from_samples=True)

    def activity_hours(self, version: int, hours: list[str]) -> DataFrame:
        """The 1-hour activity rows of these hours, from their 1-minute rows (read from the files
        that may hold them)."""
        rows = self.read(ROLLUP_ENTITY_ACTIVITY_1M, version, ("bucket_hour", hours)).where(
            F.date_format("bucket_start", _HOUR).isin(hours)
        )
        return activity_rollup(rows, "1h", from_samples=False)

    def metric_steps(self) -> list[tuple[_Step, str]]:
        """The four metric rollups, each with the table it follows, in the order they are refreshed."""
        return [
            (
                _Step(
                    ROLLUP_CLIENT_1M,
                    rollup_schema("client", "1m"),
                    "1m",
                    self.minutes_of_points,
                    self.client_minutes,
                    by="minute",
                    clustered=("bucket_start", CLIENT_MINUTE_FILE_ROWS),
                ),
                METRIC_POINTS,
            ),
            (
                _Step(
                    ROLLUP_CLIENT_1H,
                    rollup_schema("client", "1h"),
                    "1h",
                    _hours_of("bucket_start"),
                    self.client_hours,
                    by="hour",
                    closed_only=True,
                ),
                ROLLUP_CLIENT_1M,
            ),
            (
                _Step(
                    ROLLUP_ENTITY_1M,
                    rollup_schema("entity", "1m"),
                    "1m",
                    _minutes_of("bucket_start"),
                    self.entity_minutes,
                    by="minute",
                ),
                ROLLUP_CLIENT_1M,
            ),
            (
                _Step(
                    ROLLUP_ENTITY_1H,
                    rollup_schema("entity", "1h"),
                    "1h",
                    _hours_of("bucket_start"),
                    self.entity_hours,
                    by="hour",
                    closed_only=True,
                ),
                ROLLUP_CLIENT_1H,
            ),
        ]

    def refresh_metrics(self, forced: list[str], pool: ThreadPoolExecutor) -> None:
        """The 1-minute client rows first; then the 1-hour client rows (and the 1-hour entity rows
        after them) beside the 1-minute entity rows, which follow only the 1-minute client rows."""
        (client_1m, points), (client_1h, minutes), (entity_1m, _), (entity_1h, hours) = self.metric_steps()

        def refresh(step: _Step, source: str) -> None:
            self.refresh(step, [(self.uri(source), _app(step.table))], forced)

        refresh(client_1m, points)
        beside = pool.submit(inheritable_thread_target(self.lake.spark)(refresh), entity_1m, minutes)
        refresh(client_1h, minutes)
        refresh(entity_1h, hours)
        beside.result()

    def refresh_activity(self, forced: list[str]) -> None:
        """The 1-minute activity table follows every shard of every bronze table (a watermark each)
        and the quarantine, by the minute: the minutes the sources gained rows in are recomputed
        from every source, in one commit that moves every watermark (``DeltaLake.per_commit``: one
        source a commit on the connector); the 1-hour one follows the 1-minute one, by the hour."""
        time_column = {}
        sources = []
        for table, column in ((BRONZE_PUSHES, "received_at"), (BRONZE_QUOTA_SAMPLES, "sampled_at")):
            for shard in self.lake.shards(self.uri(table)):
                time_column[shard] = column
                sources.append((shard, _activity_app(table, shard)))
        quarantine = self.uri(QUARANTINE)
        time_column[quarantine] = "received_at"
        sources.append((quarantine, _QUARANTINE_APP))
        minutes = _Step(
            ROLLUP_ENTITY_ACTIVITY_1M,
            activity_schema("1m"),
            "1m",
            lambda added: added.keys(time_column[added.uri], "minute"),
            self.activity_minutes,
            by="minute",
        )
        activity_forced = forced  # recomputed with the first commit's minutes
        for group in self.lake.per_commit(sources):
            self.refresh(minutes, group, activity_forced)
            activity_forced = []
        hours = _Step(
            ROLLUP_ENTITY_ACTIVITY_1H,
            activity_schema("1h"),
            "1h",
            _hours_of("bucket_start"),
            self.activity_hours,
            by="hour",
            closed_only=True,
        )
        self.refresh(hours, [(self.uri(minutes.table), _app(hours.table))], forced)

    def follows(self) -> list[tuple[str, str, str]]:
        """Each (source, table, app id) where ``table`` follows ``source`` (one of the tables the
        rollup writes) under that ``txn`` app id."""
        return [
            *((source, step.table, _app(step.table)) for step, source in self.metric_steps()),
            (ROLLUP_ENTITY_ACTIVITY_1M, ROLLUP_ENTITY_ACTIVITY_1H, _app(ROLLUP_ENTITY_ACTIVITY_1H)),
            (QUARANTINE, ROLLUP_ENTITY_ACTIVITY_1M, _QUARANTINE_APP),
        ]

    def read_through(self, tables: Sequence[str]) -> dict[str, int]:
        """Each of these tables the rollup writes (its URI) -> the version up to which every table
        that follows it has read it: its latest version where none does (only the latest is read),
        -1 where a follower has read none of it; tables that do not exist are left out."""
        through: dict[str, int] = {}
        for table in tables:
            version = self.lake.version(self.uri(table))
            if version is not None:
                through[self.uri(table)] = version
        for source, table, app_id in self.follows():
            if self.uri(source) in through:
                read = self.lake.txn_version(self.uri(table), app_id)
                through[self.uri(source)] = min(through[self.uri(source)], read)
        return through


def _app(table: str) -> str:
    """The ``txn`` app id under which ``table`` follows its one source table."""
    return f"{ROLLUP_APP}/{table}"


_QUARANTINE_APP: Final = f"{ROLLUP_APP}/{ROLLUP_ENTITY_ACTIVITY_1M}/{QUARANTINE}"
"""The ``txn`` app id under which the 1-minute activity table follows the quarantine."""


def _activity_app(table: str, shard: str) -> str:
    """The ``txn`` app id under which the 1-minute activity table follows a bronze shard."""
    return f"{ROLLUP_APP}/{ROLLUP_ENTITY_ACTIVITY_1M}/{table}/{shard.rstrip('/').rsplit('/', 1)[-1]}"


def _read_through(lake: DeltaLake, data_root: str, table: str, shard: str) -> int:
    """The bronze shard's version up to which every table the rollup keeps from it has read it: the
    1-minute activity table, and for ``telemetry_pushes`` silver and the quarantine."""
    activity = lake.txn_version(table_uri(data_root, ROLLUP_ENTITY_ACTIVITY_1M), _activity_app(table, shard))
    return min(activity, decoded_through(lake, data_root, shard)) if table == BRONZE_PUSHES else activity


def run_rollup(
    lake: DeltaLake,
    data_root: str,
    *,
    lookback_s: int = DEFAULT_LOOKBACK_S,
    since: datetime | None = None,
    decode: bool = True,
    now: datetime | None = None,
    compact_at_files: int = COMPACT_AT_FILES,
    progress: Callable[[str], None] = lambda _: None,
) -> RollupReport:
    """Decode what bronze gained, then bring the six gold tables (``spark_jobs.tables``'
    ``ROLLUP_TABLES`` and ``ACTIVITY_TABLES``) up to date, then compact the bronze shards that hold
    ``compact_at_files`` small files or more (``jobs.upkeep``); ``now`` (the wall clock unless given)
    decides which hours are closed."""
    report = RollupReport()
    began = datetime.now(UTC)
    started = now or began
    if decode:
        report.decode = run_decode(lake, data_root, progress=progress)
    run = _RollupRun(lake, data_root, lookback_s, since, progress, report, started)
    forced = run.forced_hours()
    # the activity tables and the metric tables read nothing of each other: Spark runs their jobs
    # side by side (most of a small run's time is per-job latency, which then overlaps)
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="rollup") as pool:
        activity = pool.submit(inheritable_thread_target(lake.spark)(run.refresh_activity), forced)
        run.refresh_metrics(forced, pool)
        activity.result()
    report.compactions = compact_bronze(
        data_root,
        storage_options=lake.storage_options,
        at_files=compact_at_files,
        read_through=functools.partial(_read_through, lake, data_root),
        progress=progress,
    )
    # a table's log can lose entries only behind its latest checkpoint (every 100 commits): the
    # tables checkpointed during this run
    uris = [run.uri(table) for table in DERIVED_TABLES]
    checkpointed = checkpointed_since(uris, began, storage_options=lake.storage_options)
    try:  # the run's tables are written: a log that cannot be expired now is expired by a later run
        if checkpointed:
            through = run.read_through([t for t in DERIVED_TABLES if run.uri(t) in checkpointed])
            report.logs_expired = expire_logs(through, storage_options=lake.storage_options)
    except Exception as exc:  # storage faults surface as many types (OSError, DeltaError, ...)
        log.warning("expiring the logs of %s failed: %s", ", ".join(checkpointed), exc)
    report.lag_s = lag_s(lake, data_root)
    return report
