"""The dashboard's named Spark SQL queries: the ``.sql`` files next to this module, their parameters,
and running them.

Each ``queries/<name>.sql`` is one query that a user can also run in ``spark-sql``. The parameters are
Spark SQL session variables, declared with their defaults by ``queries/variables.sql``:
``dashboard_from`` and ``dashboard_to`` (the window, ``[from, to)``, UTC), ``dashboard_top`` (how many
clients or entities a ranking keeps) and ``dashboard_max_clients`` (how many client instances the
drill-down lists). ``queries/window.sql`` defines the temporary views ``dashboard_*`` that the queries
read: the window's rows of the rollups, over the ``telemetry.<table>`` views (``spark_jobs.views``).

``run_queries`` declares the variables, sets them from a ``Window``, creates the window's views and
runs every query. A view over a table that does not exist yet is not created, and a query that needs
it gives no rows and names the missing tables (the page shows an empty state, not an error).

``shared_views(namespace)`` gives the same window views and queries as views any session can read
(``telemetry.dashboard_<name>``, for ``telemetry-sink sql-server``): the variables replaced by their
defaults (the 24 hours up to the end of the current minute, the top 10, 1,000 clients), which a
query evaluates when it runs. A session that wants another window runs the ``.sql`` files themselves.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Final

import pyarrow as pa
from pyspark.sql import SparkSession

__all__ = [
    "MAX_LIMIT",
    "QUERY_NAMES",
    "QueryResult",
    "Window",
    "create_window_views",
    "query_text",
    "run_queries",
    "set_variables",
    "shared_views",
]

QUERY_NAMES: Final = (
    "fleet_totals",
    "fleet_per_minute",
    "errors_by_code",
    "top_clients",
    "top_entities",
    "throttled_entities",
    "throttle_over_time",
    "token_levels",
    "clients",
    "client_metrics",
    "config_history",
)
"""Every query of the page, in the order the page shows them."""
VARIABLES: Final = "variables"
WINDOW_VIEWS: Final = "window"
MAX_LIMIT: Final = 100_000
_TABLE: Final = re.compile(r"\btelemetry\.\w+")
_VIEW: Final = re.compile(r"CREATE OR REPLACE TEMPORARY VIEW (\w+)")
_DECLARE: Final = re.compile(r"DECLARE OR REPLACE VARIABLE (\w+) \w+ DEFAULT (.+)", re.DOTALL)
SHARED_PREFIX: Final = "dashboard_"
"""The shared views of the queries are ``<namespace>.dashboard_<query>``; the window's views keep
their names (``dashboard_activity``, ...)."""


@dataclass(frozen=True)
class Window:
    """What the page shows: ``[start, end)`` (UTC), the ``top`` of each ranking, at most
    ``max_clients`` client instances in the drill-down."""

    start: datetime
    end: datetime
    top: int = 10
    max_clients: int = 1000

    def problems(self) -> list[str]:
        found = []
        if self.start.tzinfo is None or self.end.tzinfo is None:
            found.append("the window's times must carry a time zone")
        elif self.start >= self.end:
            found.append(
                f"the window is empty: from {_sql_time(self.start)} is not before to {_sql_time(self.end)}"
            )
        if not 1 <= self.top <= MAX_LIMIT:
            found.append(f"top must be between 1 and {MAX_LIMIT}, got {self.top}")
        if not 1 <= self.max_clients <= MAX_LIMIT:
            found.append(f"max clients must be between 1 and {MAX_LIMIT}, got {self.max_clients}")
        return found

    @classmethod
    def last(cls, span: timedelta, now: datetime, **limits: int) -> Window:
        """The ``span`` up to the end of ``now``'s minute."""
        end = now.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        return cls(end - span, end, **limits)


@dataclass(frozen=True)
class QueryResult:
    """One query's rows (JSON-ready: times as ISO 8601 UTC strings, NaN as None); ``missing`` names the
    views it needs that do not exist (then there are no rows)."""

    name: str
    columns: tuple[str, ...]
    rows: list[list[object]] = field(default_factory=list)
    missing: tuple[str, ...] = ()
    seconds: float = 0.0

    def records(self) -> list[dict[str, object]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def query_text(name: str) -> str:
    """The SQL of ``queries/<name>.sql``."""
    return resources.files(__package__).joinpath("queries", f"{name}.sql").read_text(encoding="utf-8")


def _statements(text: str) -> list[str]:
    """The statements of a file of them (each ends with ``;`` at the end of a line; no comments kept)."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", code) if s.strip()]


def _sql_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def set_variables(spark: SparkSession, window: Window) -> None:
    """Declare the session variables (``variables.sql``) and set them to ``window``."""
    for statement in _statements(query_text(VARIABLES)):
        spark.sql(statement)
    spark.sql(f"SET VAR dashboard_from = TIMESTAMP '{_sql_time(window.start)}'")
    spark.sql(f"SET VAR dashboard_to = TIMESTAMP '{_sql_time(window.end)}'")
    spark.sql(f"SET VAR dashboard_top = {int(window.top)}")
    spark.sql(f"SET VAR dashboard_max_clients = {int(window.max_clients)}")


def _json_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def _rows(table: pa.Table) -> list[list[object]]:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [[_json_value(v) for v in row] for row in zip(*columns, strict=True)]


def create_window_views(spark: SparkSession, views: Collection[str]) -> dict[str, set[str]]:
    """Create the views of ``window.sql`` whose tables are among ``views``; the tables each view needs."""
    needs = {}
    for statement in _statements(query_text(WINDOW_VIEWS)):
        view = _VIEW.search(statement)
        if view is None:
            raise ValueError(f"window.sql holds a statement that is not a view: {statement[:60]!r}")
        needs[view.group(1)] = set(_TABLE.findall(statement))
        if needs[view.group(1)] <= set(views):
            spark.sql(statement)
    return needs


def run_queries(
    spark: SparkSession, views: Collection[str], window: Window, names: tuple[str, ...] = QUERY_NAMES
) -> dict[str, QueryResult]:
    """Run the named queries over ``window``; ``views`` are the ``telemetry.<table>`` views that exist."""
    set_variables(spark, window)
    window_views = create_window_views(spark, views)
    results = {}
    for name in names:
        text = query_text(name)
        needed = set(_TABLE.findall(text)).union(
            *(tables for view, tables in window_views.items() if re.search(rf"\b{view}\b", text))
        )
        missing = tuple(sorted(needed - set(views)))
        started = time.perf_counter()
        if missing:
            results[name] = QueryResult(name, (), missing=missing)
            continue
        table = spark.sql(text).toArrow()
        results[name] = QueryResult(
            name, tuple(table.column_names), _rows(table), seconds=time.perf_counter() - started
        )
    return results


def shared_views(namespace: str) -> dict[str, tuple[str, frozenset[str]]]:
    """The window's views and the named queries as global views of ``namespace`` (the session's
    ``spark.sql.globalTempDatabase``, which Spark wants unnamed in the statement): for each view's
    qualified name, the statement that makes it and the ``telemetry.<table>`` views it reads (through
    the window's views too), in an order in which each view comes after those it reads."""
    defaults = {}
    for statement in _statements(query_text(VARIABLES)):
        declared = _DECLARE.fullmatch(statement)
        if declared is None:
            raise ValueError(f"variables.sql holds a statement that is not a declaration: {statement[:60]!r}")
        defaults[declared.group(1)] = f"({declared.group(2)})"
    window: dict[str, tuple[str, frozenset[str]]] = {}
    for statement in _statements(query_text(WINDOW_VIEWS)):
        view = _VIEW.search(statement)
        if view is None:
            raise ValueError(f"window.sql holds a statement that is not a view: {statement[:60]!r}")
        window[view.group(1)] = (statement[view.end() :], frozenset(_TABLE.findall(statement)))
    names = {name: f"{namespace}.{name}" for name in window}
    names.update(defaults)
    word = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")

    def shared(body: str) -> str:
        return word.sub(lambda m: names[m.group(1)], body)

    made = {
        f"{namespace}.{name}": (
            f"CREATE OR REPLACE GLOBAL TEMPORARY VIEW {name}{shared(body)}",
            tables,
        )
        for name, (body, tables) in window.items()
    }
    for name in QUERY_NAMES:
        text = query_text(name)
        needs = set(_TABLE.findall(text)).union(
            *(tables for view, (_, tables) in window.items() if re.search(rf"\b{view}\b", text))
        )
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        made[f"{namespace}.{SHARED_PREFIX}{name}"] = (
            f"CREATE OR REPLACE GLOBAL TEMPORARY VIEW {SHARED_PREFIX}{name} AS\n"
            f"{shared(body).strip().rstrip(';')}",
            frozenset(needs),
        )
    return made
