"""The dashboard page of a fixed dataset in real headless Chromium: it loads offline with no console
errors, every chart is drawn with the data the queries answered, and the drill-down works."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_jobs.dashboards import build_page
from spark_jobs.lake import DeltaLake
from tests.spark_jobs.dashboards.conftest import HOSTILE, Dataset
from tests.support.browser import open_page

pytestmark = [pytest.mark.spark, pytest.mark.browser]
CHARTS = (
    "chart-fleet",
    "chart-errors",
    "chart-top-clients",
    "chart-top-entities",
    "chart-throttle-over-time",
    "chart-token-levels",
)
LATENCY = "org.apache.kafka.producer.node.request.latency.avg"


def _plot_time(iso: object) -> str:
    return str(iso).replace("T", " ")[:19]


def test_the_page_draws_every_chart_from_the_query_results_offline_with_no_console_errors(
    spark: SparkSession, dataset: Dataset, tmp_path: Path
) -> None:
    html, results = build_page(spark, DeltaLake(spark), dataset.root, dataset.window)
    file = tmp_path / "dashboard.html"
    file.write_text(html, encoding="utf-8")
    with open_page(file.as_uri()) as loaded:
        page = loaded.page
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(CHARTS)}"
        )
        assert loaded.errors() == []
        assert loaded.requests == [file.as_uri()]  # plotly.js and the data are in the page
        assert page.title() == "telemetry-sink dashboard"  # the hostile client id ran nothing
        for chart in CHARTS:
            box = page.locator(f"#{chart}").bounding_box()
            assert box is not None, chart
            assert box["width"] > 300, chart
            assert box["height"] > 150, chart
            drawn = page.evaluate(
                "id => document.getElementById(id).querySelectorAll('.trace path[d]').length",
                chart,
            )
            assert drawn > 0, chart
        # what is drawn is what the queries answered
        fleet = page.evaluate("document.getElementById('chart-fleet').data.map(t => [t.x, t.y])")
        rows = results["fleet_per_minute"].records()
        for (x, y), column in zip(
            fleet, ("client_instances", "pushes", "payload_bytes", "error_answers"), strict=True
        ):
            assert x == [_plot_time(r["bucket_start"]) for r in rows]
            assert y == [r[column] for r in rows]
        shown = page.evaluate(
            "document.getElementById('chart-top-clients').data"
            ".filter(t => t.visible === true).map(t => [t.name, t.x])"
        )
        top = [r for r in results["top_clients"].records() if r["metric_name"] == LATENCY]
        assert shown == [[f"{LATENCY} (gauge)", [r["value"] for r in top]]]
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert (tmp_path / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # the client drill-down: the hostile id is text, the filter narrows, a click shows the metrics
        table = page.locator("#clients-table tbody tr")
        assert table.count() == len(results["clients"].rows)
        assert page.locator("#clients-table").inner_text().count(HOSTILE) == 1
        page.fill("#client-filter", "client-3")
        assert page.locator("#clients-table tbody tr:visible").count() == 1
        page.locator("#clients-table tbody tr:visible").click()
        detail = page.locator("#client-detail tbody tr")
        [instance] = [
            c["client_instance_id"] for c in results["clients"].records() if c["client_id"] == "client-3"
        ]
        mine = [r for r in results["client_metrics"].records() if r["client_instance_id"] == instance]
        assert detail.count() == len(mine) > 0
        assert loaded.errors() == []
