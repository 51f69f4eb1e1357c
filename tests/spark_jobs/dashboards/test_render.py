"""The page from query results, without Spark: empty states, escaping of what clients sent, the metric
the rankings open on, the refresh of ``--serve``, and that it needs nothing from the network."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from spark_jobs.dashboards.queries import QUERY_NAMES, QueryResult, Window
from spark_jobs.dashboards.render import PREFERRED_METRICS, render_page
from tests.support.browser import open_page

WINDOW = Window(datetime(2026, 11, 21, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC))
HOSTILE = "</script><script>document.title='owned'</script>&amp;"
RANKING = (
    "metric_name",
    "metric_kind",
    "metric_unit",
    "measure",
    "rank",
    "client_instance_id",
    "client_id",
    "principal",
    "quota_entity",
    "value",
    "peak",
    "points",
)


def empty(missing: tuple[str, ...] = ()) -> dict[str, QueryResult]:
    return {name: QueryResult(name, (), missing=missing) for name in QUERY_NAMES}


def ranking(*metrics: str, client_id: str = "c") -> QueryResult:
    rows: list[list[object]] = [
        [
            m,
            "gauge",
            "ms",
            "average",
            1,
            "AAAAAAAAAAAAAAAAAAAAAQ",  # Kafka's form, as the tables hold it
            client_id,
            "User:a",
            "user=a",
            1.5,
            2.0,
            3,
        ]
        for m in metrics
    ]
    return QueryResult("top_clients", RANKING, rows)


def data_of(html: str) -> dict[str, dict[str, list[object]]]:
    found = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', html, re.S)
    assert found is not None
    result: dict[str, dict[str, list[object]]] = json.loads(found.group(1))
    return result


def visible_trace(html: str) -> str:
    """The name of the one trace of the top-clients chart drawn at first."""
    figure = re.search(r'Plotly\.newPlot\(\s*"chart-top-clients",\s*(\[.*?\]),\s*\{', html, re.S)
    assert figure is not None
    [name] = [t["name"] for t in json.loads(figure.group(1)) if t["visible"] is True]
    return str(name)


def test_tables_that_do_not_exist_yet_show_an_empty_state_in_every_section() -> None:
    html = render_page(empty(("telemetry.rollup_client_1m",)), WINDOW)
    assert html.count('class="empty"') == len(QUERY_NAMES) - 1  # client_metrics shows with clients
    assert "no data yet (telemetry.rollup_client_1m does not exist; run `telemetry-sink rollup`)" in html
    assert 'class="chart"' not in html


def test_an_empty_window_says_so_instead_of_drawing_empty_charts() -> None:
    html = render_page(empty(), WINDOW)
    assert "Top client instances: nothing in this window." in html
    assert "Config changes: nothing in this window." in html
    assert 'class="chart"' not in html


def test_what_clients_sent_is_escaped_in_the_tables_and_in_the_data() -> None:
    results = empty()
    columns = (
        "client_instance_id",
        "client_id",
        "principal",
        "quota_entity",
        "client_software_name",
        "client_software_version",
        "first_seen",
        "last_seen",
        "metrics",
        "points",
        "unknown_deltas",
    )
    results["clients"] = QueryResult(
        "clients",
        columns,
        [
            [
                "id-1",
                HOSTILE,
                HOSTILE,
                "e",
                HOSTILE,
                "1",
                "2026-11-21T00:00:00.000000Z",
                "2026-11-21T00:01:00.000000Z",
                1,
                2,
                0,
            ]
        ],
    )
    results["top_clients"] = ranking(PREFERRED_METRICS[0], client_id=HOSTILE)
    html = render_page(results, WINDOW)
    assert HOSTILE not in html
    assert "<script>document.title" not in html
    assert "&lt;/script&gt;&lt;script&gt;document.title=&#x27;owned&#x27;&lt;/script&gt;&amp;amp;" in html
    assert data_of(html)["clients"]["rows"][0][1] == HOSTILE  # type: ignore[index]


def test_the_rankings_open_on_the_chosen_metric_else_a_preferred_one_else_the_first() -> None:
    results = empty()
    results["top_clients"] = ranking("a.metric", PREFERRED_METRICS[1], "z.metric")
    assert visible_trace(render_page(results, WINDOW, metric="z.metric")) == "z.metric (gauge, ms)"
    assert visible_trace(render_page(results, WINDOW)) == f"{PREFERRED_METRICS[1]} (gauge, ms)"
    assert (
        visible_trace(render_page(results, WINDOW, metric="no.such.metric"))
        == f"{PREFERRED_METRICS[1]} (gauge, ms)"
    )
    results["top_clients"] = ranking("b.metric", "a.metric")
    assert visible_trace(render_page(results, WINDOW)) == "a.metric (gauge, ms)"


def test_only_a_served_page_reloads_itself() -> None:
    assert 'http-equiv="refresh"' not in render_page(empty(), WINDOW)
    assert '<meta http-equiv="refresh" content="30">' in render_page(empty(), WINDOW, refresh_s=30)


def test_the_page_carries_plotly_and_loads_nothing_from_the_network() -> None:
    html = render_page({**empty(), "top_clients": ranking(PREFERRED_METRICS[0])}, WINDOW)
    assert get_plotlyjs() in html  # the bundle itself, from the plotly package
    assert not re.search(
        r"<script[^>]*\bsrc=|<link\b|@import", html
    )  # nothing fetched (the browser test counts)


def test_window_problems_are_named() -> None:
    start = datetime(2026, 11, 21, tzinfo=UTC)
    assert Window(start, start).problems() == [
        "the window is empty: from 2026-11-21 00:00:00.000000 is not before to 2026-11-21 00:00:00.000000"
    ]
    assert Window(start, start + timedelta(hours=1), top=0, max_clients=10**6).problems() == [
        "top must be between 1 and 100000, got 0",
        "max clients must be between 1 and 100000, got 1000000",
    ]
    assert Window.last(timedelta(hours=1), datetime(2026, 11, 21, 10, 30, 15, tzinfo=UTC)) == Window(
        datetime(2026, 11, 21, 9, 31, tzinfo=UTC), datetime(2026, 11, 21, 10, 31, tzinfo=UTC)
    )


@pytest.mark.browser
def test_an_empty_page_loads_in_chromium_with_no_console_errors(tmp_path: Path) -> None:
    file = tmp_path / "empty.html"
    file.write_text(render_page(empty(("telemetry.rollup_client_1m",)), WINDOW), encoding="utf-8")
    with open_page(file.as_uri()) as loaded:
        assert loaded.page.locator(".empty").first.is_visible()
        assert loaded.page.locator(".empty").count() == len(QUERY_NAMES) - 1
        assert loaded.errors() == []


def test_what_clients_sent_is_text_in_the_charts_not_plotly_markup() -> None:
    results = empty()
    results["top_clients"] = ranking("m<br>x", client_id='<a href="https://evil.example">c</a>')
    html = render_page(results, WINDOW)
    figure = re.search(r'Plotly\.newPlot\(\s*"chart-top-clients",\s*(\[.*?\]),\s*\{', html, re.S)
    assert figure is not None
    [trace] = json.loads(figure.group(1))
    assert trace["name"] == "m&lt;br&gt;x (gauge, ms)"  # plotly shows the entities as the characters
    assert trace["y"] == ['#1 &lt;a href="https://evil.example"&gt;c&lt;/a&gt; AAAAAAAA']


def test_a_metric_reported_in_two_units_gets_a_ranking_per_unit() -> None:
    results = empty()
    rows = [*ranking("m").rows, *ranking("m").rows]
    rows[1] = [*rows[1][:2], "s", *rows[1][3:]]
    results["top_clients"] = QueryResult("top_clients", RANKING, rows)
    html = render_page(results, WINDOW)
    figure = re.search(r'Plotly\.newPlot\(\s*"chart-top-clients",\s*(\[.*?\]),\s*\{', html, re.S)
    assert figure is not None
    assert sorted(t["name"] for t in json.loads(figure.group(1))) == ["m (gauge, ms)", "m (gauge, s)"]
