"""Spark SQL dashboards: named queries over the ``telemetry`` views, rendered as one offline HTML page.

Data flow: ``register_views`` (``spark_jobs.views``) -> ``queries.run_queries`` (the ``queries/*.sql``
files, with the window as session variables) -> ``render.render_page`` (plotly charts, tables, the
rows as JSON) -> a file, or ``serve.DashboardServer`` (``telemetry-sink dashboard --serve``).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_jobs.dashboards.queries import QueryResult, Window, run_queries
from spark_jobs.dashboards.render import render_page
from spark_jobs.lake import DeltaLake
from spark_jobs.views import register_views

__all__ = ["QueryResult", "Window", "build_page"]


def build_page(
    spark: SparkSession,
    lake: DeltaLake,
    data_root: str,
    window: Window,
    *,
    metric: str | None = None,
    refresh_s: float | None = None,
) -> tuple[str, dict[str, QueryResult]]:
    """Register the views as of now, run every query over ``window``, render the page: (page, results)."""
    views = register_views(lake, data_root)
    results = run_queries(spark, views, window)
    page = render_page(results, window, metric=metric, refresh_s=refresh_s, source=data_root)
    return page, results
