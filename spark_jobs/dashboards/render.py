"""The dashboard page: query results -> one self-contained HTML page that works offline.

The page carries plotly.js itself (plotly's offline bundle, from the ``plotly`` package), the
charts as plotly figures built here, the tables, and every query's rows as JSON
(``<script type="application/json" id="dashboard-data">``), which is what the charts and tables show.
Sections, in order: fleet overview (totals, per-minute clients, pushes, bytes and error answers, errors
by code), Kafka client metrics (top client instances and top quota entities for a metric chosen in a
menu), throttling by quota entity (the most throttled, throttle time and token levels over time), the
client instances (a filter, and a click shows one instance's metrics) and the config history.

A query with no rows, or over a table that does not exist yet, shows an empty state saying so.
Everything a client sent (client ids, principals, attributes) is escaped: as HTML text, or as JSON
with ``<``, ``>`` and ``&`` written as ``\\u003c``-style escapes.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from spark_jobs.dashboards.queries import QueryResult, Window
from subscriptions.errors import error_name

__all__ = ["PREFERRED_METRICS", "render_page"]

PREFERRED_METRICS: Final = (
    "org.apache.kafka.producer.node.request.latency.avg",
    "org.apache.kafka.consumer.node.request.latency.avg",
    "org.apache.kafka.producer.record.queue.time.avg",
)
"""The metric the rankings open on when none is chosen: the first of these with data, else the first
metric by name."""
_PLOT_CONFIG: Final = {"displaylogo": False, "responsive": True}
_CSS: Final = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1f2933;
       background: #f5f7fa; }
header { background: #1f2933; color: #f5f7fa; padding: 16px 24px; }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 0; color: #cbd2d9; font-size: 13px; }
section { background: #fff; margin: 16px 24px; padding: 12px 20px 20px; border-radius: 6px;
          box-shadow: 0 1px 3px rgba(0, 0, 0, .08); }
h2 { font-size: 18px; margin: 8px 0 12px; }
.tiles { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 12px; }
.tile { border: 1px solid #e4e7eb; border-radius: 6px; padding: 8px 14px; min-width: 130px; }
.tile .value { font-size: 22px; font-weight: 600; }
.tile .label { font-size: 12px; color: #616e7c; }
.chart { width: 100%; min-height: 360px; }
.empty { border: 1px dashed #9aa5b1; border-radius: 6px; padding: 18px; color: #52606d;
         background: #f9fafb; margin: 8px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e4e7eb; }
th { background: #f5f7fa; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { max-height: 480px; overflow: auto; }
#clients-table tbody tr { cursor: pointer; }
#clients-table tbody tr:hover, #clients-table tbody tr.selected { background: #e6f6ff; }
input[type=search] { padding: 6px 8px; width: 320px; margin-bottom: 8px; }
tr.before-window td { color: #7b8794; }
.note { color: #616e7c; font-size: 12px; }
"""
_SCRIPT: Final = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("dashboard-data").textContent);
  var filter = document.getElementById("client-filter");
  var table = document.getElementById("clients-table");
  var rows = table ? Array.prototype.slice.call(table.tBodies[0].rows) : [];
  if (filter) {
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      rows.forEach(function (r) { r.hidden = q !== "" && r.textContent.toLowerCase().indexOf(q) < 0; });
    });
  }
  var detail = document.getElementById("client-detail");
  var metrics = data.client_metrics || {columns: [], rows: []};
  function cell(tr, text, numeric) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (numeric) { td.className = "num"; }
    tr.appendChild(td);
  }
  function show(id) {
    rows.forEach(function (r) { r.classList.toggle("selected", r.dataset.client === id); });
    var c = metrics.columns;
    var mine = metrics.rows.filter(function (r) { return r[c.indexOf("client_instance_id")] === id; });
    detail.replaceChildren();
    var title = document.createElement("h3");
    title.textContent = "Metrics of client instance " + id;
    detail.appendChild(title);
    var t = document.createElement("table");
    var head = t.createTHead().insertRow();
    ["metric", "kind", "unit", "measure", "value", "peak", "series", "points"].forEach(function (h) {
      var th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    });
    var body = t.createTBody();
    mine.forEach(function (r) {
      var tr = body.insertRow();
      cell(tr, r[c.indexOf("metric_name")]); cell(tr, r[c.indexOf("metric_kind")]);
      cell(tr, r[c.indexOf("metric_unit")]); cell(tr, r[c.indexOf("measure")]);
      var v = r[c.indexOf("value")], p = r[c.indexOf("peak")];
      cell(tr, v === null ? "" : Number(v).toPrecision(6), true);
      cell(tr, p === null ? "" : Number(p).toPrecision(6), true);
      cell(tr, r[c.indexOf("series")], true); cell(tr, r[c.indexOf("points")], true);
    });
    detail.appendChild(t);
  }
  rows.forEach(function (r) { r.addEventListener("click", function () { show(r.dataset.client); }); });
})();
"""


@dataclass(frozen=True)
class _Page:
    results: Mapping[str, QueryResult]
    window: Window

    def result(self, name: str) -> QueryResult:
        return self.results[name]

    def empty(self, name: str, what: str) -> str | None:
        """The empty state of query ``name`` (None when it has rows)."""
        result = self.results[name]
        if result.missing:
            tables = ", ".join(result.missing)
            verb = "does" if len(result.missing) == 1 else "do"
            return _empty(f"{what}: no data yet ({tables} {verb} not exist; run `telemetry-sink rollup`).")
        if not result.rows:
            return _empty(f"{what}: nothing in this window.")
        return None


def _empty(message: str) -> str:
    return f'<div class="empty">{html.escape(message)}</div>'


def _time(text: str) -> str:
    return _plot_time(text) + " UTC"


def _plot_time(text: object) -> str:
    """An ISO 8601 UTC time of the results as plotly.js reads dates (``YYYY-MM-DD HH:MM:SS``, UTC)."""
    return str(text).replace("T", " ").split(".")[0].removesuffix("Z")


def _number(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def _bytes(value: object) -> str:
    amount = float(value) if isinstance(value, int | float) else 0.0
    for unit in ("B", "KiB", "MiB", "GiB"):
        if amount < 1024 or unit == "GiB":
            return f"{amount:,.0f} {unit}" if unit == "B" else f"{amount:,.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def _text(value: object) -> str:
    """What a client sent, as text in a chart: plotly.js reads ``<br>``, ``<a href>`` and other tags in
    labels, names and titles, so they are escaped (plotly shows the entities as the characters)."""
    return html.escape(str(value), quote=False)


def _figure_html(figure: go.Figure, div_id: str, query: str) -> str:
    figure.update_layout(margin={"l": 60, "r": 20, "t": 50, "b": 40}, template="plotly_white")
    body = figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOT_CONFIG)
    return f'<div class="chart" data-query="{query}">{body}</div>'


def _table(
    columns: Sequence[tuple[str, str]],
    records: Iterable[Mapping[str, object]],
    *,
    table_id: str,
    row_attrs: Callable[[Mapping[str, object]], str] = lambda record: "",
) -> str:
    """An HTML table of ``records``: ``columns`` are (key, heading); numbers right-aligned."""
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for record in records:
        cells = []
        for key, _ in columns:
            value = record.get(key)
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            text = _time(value) if key in _TIME_COLUMNS and isinstance(value, str) else _number(value)
            cells.append(
                f'<td class="num">{html.escape(text)}</td>' if numeric else f"<td>{html.escape(text)}</td>"
            )
        body.append(f"<tr{row_attrs(record)}>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


_TIME_COLUMNS: Final = frozenset({"first_seen", "last_seen", "written_at", "bucket_start"})


# -- sections ----------------------------------------------------------------------------------------


def _overview(page: _Page) -> str:
    parts = ["<h2>Fleet overview</h2>"]
    totals = page.result("fleet_totals")
    if totals.rows and not totals.missing:
        record = totals.records()[0]
        tiles = [
            ("client instances", _number(record["client_instances"])),
            ("quota entities", _number(record["quota_entities"])),
            ("pushes landed", _number(record["pushes"])),
            ("payload bytes", _bytes(record["payload_bytes"])),
            ("terminating pushes", _number(record["terminating_pushes"])),
            ("error answers", _number(record["error_answers"])),
            ("quarantined pushes", _number(record["quarantined_pushes"])),
            ("longest throttle (ms)", _number(record["max_throttle_ms"]) or "0"),
        ]
        parts.append(
            '<div class="tiles" data-query="fleet_totals">'
            + "".join(
                f'<div class="tile"><div class="value">{html.escape(v)}</div>'
                f'<div class="label">{html.escape(k)}</div></div>'
                for k, v in tiles
            )
            + "</div>"
        )
    else:
        parts.append(page.empty("fleet_totals", "Fleet totals") or "")
    per_minute = page.result("fleet_per_minute")
    idle = not any(any(v for k, v in r.items() if k != "bucket_start") for r in per_minute.records())
    parts.append(
        page.empty("fleet_per_minute", "Fleet activity per minute")
        or (_empty("Fleet activity per minute: nothing in this window.") if idle else _fleet_chart(page))
    )
    parts.append(page.empty("errors_by_code", "Error answers by code") or _errors_chart(page))
    return "".join(parts)


def _fleet_chart(page: _Page) -> str:
    records = page.result("fleet_per_minute").records()
    series = (
        ("client_instances", "client instances sending metrics"),
        ("pushes", "pushes landed"),
        ("payload_bytes", "payload bytes"),
        ("error_answers", "error answers"),
    )
    figure = make_subplots(
        rows=len(series), cols=1, shared_xaxes=True, subplot_titles=[t + " per minute" for _, t in series]
    )
    x = [_plot_time(r["bucket_start"]) for r in records]
    for row, (key, title) in enumerate(series, start=1):
        figure.add_trace(
            go.Scatter(x=x, y=[r[key] for r in records], name=title, mode="lines"), row=row, col=1
        )
    figure.update_layout(height=720, showlegend=False, title_text="Fleet activity per minute")
    return _figure_html(figure, "chart-fleet", "fleet_per_minute")


def _errors_chart(page: _Page) -> str:
    records = page.result("errors_by_code").records()
    traces: dict[tuple[str, int], list[Mapping[str, object]]] = {}
    for record in records:
        traces.setdefault((str(record["rpc"]), int(str(record["error_code"]))), []).append(record)
    figure = go.Figure()
    for (rpc, code), rows in sorted(traces.items()):
        figure.add_trace(
            go.Bar(
                x=[_plot_time(r["bucket_start"]) for r in rows],
                y=[r["answers"] for r in rows],
                name=_text(f"{rpc} {error_name(code)} ({code})"),
            )
        )
    figure.update_layout(barmode="stack", height=360, title_text="Error answers per minute, by RPC and code")
    return _figure_html(figure, "chart-errors", "errors_by_code")


def _ranking_chart(
    page: _Page, name: str, label: Callable[[Mapping[str, object]], str], hover: str, wanted: str | None
) -> str:
    """Horizontal bars of one ranking per metric, a menu to choose the metric."""
    groups: dict[str, list[Mapping[str, object]]] = {}
    for record in page.result(name).records():
        unit = f", {record['metric_unit']}" if record.get("metric_unit") else ""
        groups.setdefault(f"{record['metric_name']} ({record['metric_kind']}{unit})", []).append(record)
    keys = sorted(groups)
    shown = _group_key(groups, wanted) or keys[0]
    figure = go.Figure()
    for key in keys:
        rows = groups[key]
        figure.add_trace(
            go.Bar(
                x=[r["value"] for r in rows],
                y=[_text(f"#{r['rank']} {label(r)}") for r in rows],
                orientation="h",
                name=_text(key),
                visible=key == shown,
                customdata=[[r.get("peak"), r.get("points"), _text(r.get("measure"))] for r in rows],
                hovertemplate=hover + "<br>%{customdata[2]}: %{x}<br>peak: %{customdata[0]}"
                "<br>points: %{customdata[1]}<extra></extra>",
            )
        )
    buttons = [
        {
            "label": _text(key),
            "method": "update",
            "args": [
                {"visible": [k == key for k in keys]},
                {"title.text": _ranking_title(name, key, groups)},
            ],
        }
        for key in keys
    ]
    figure.update_layout(
        title_text=_ranking_title(name, shown, groups),
        height=160 + 28 * max(len(g) for g in groups.values()),
        yaxis={"autorange": "reversed", "automargin": True},
        updatemenus=[
            {"buttons": buttons, "active": keys.index(shown), "x": 1, "xanchor": "right", "y": 1.15}
        ],
        showlegend=False,
    )
    return _figure_html(figure, f"chart-{name.replace('_', '-')}", name)


def _group_key(groups: Mapping[str, Sequence[Mapping[str, object]]], metric: str | None) -> str | None:
    """The menu entry of ``metric``, else of the first of ``PREFERRED_METRICS`` with data."""
    for name in (metric, *PREFERRED_METRICS):
        for key, rows in groups.items():
            if rows[0]["metric_name"] == name:
                return key
    return None


def _ranking_title(name: str, key: str, groups: Mapping[str, Sequence[Mapping[str, object]]]) -> str:
    first = groups[key][0]
    who = "client instances" if name == "top_clients" else "quota entities"
    return _text(f"Top {who}: {key}, {first['measure']}")


def _metrics(page: _Page, metric: str | None) -> str:
    parts = [
        "<h2>Kafka client metrics</h2>",
        '<p class="note">Gauges rank by their average over the window, sums by their increase, histograms '
        "and summaries by their average (sum / count). Choose the metric in the menu.</p>",
    ]
    parts.append(
        page.empty("top_clients", "Top client instances")
        or _ranking_chart(
            page,
            "top_clients",
            lambda r: f"{r['client_id'] or '(no client id)'} {str(r['client_instance_id'])[:8]}",
            "client instance %{y}",
            metric,
        )
    )
    parts.append(
        page.empty("top_entities", "Top quota entities")
        or _ranking_chart(page, "top_entities", lambda r: str(r["quota_entity"]), "quota entity %{y}", metric)
    )
    return "".join(parts)


def _lines_chart(page: _Page, name: str, keys: Sequence[str], y: str, *, title: str, y_title: str) -> str:
    lines: dict[str, list[Mapping[str, object]]] = {}
    for record in page.result(name).records():
        lines.setdefault(" ".join(str(record[k]) for k in keys), []).append(record)
    figure = go.Figure()
    for label, rows in lines.items():
        figure.add_trace(
            go.Scatter(
                x=[_plot_time(r["bucket_start"]) for r in rows],
                y=[r[y] for r in rows],
                name=_text(label),
                mode="lines+markers",
            )
        )
    figure.update_layout(height=380, title_text=title, yaxis_title=y_title)
    return _figure_html(figure, f"chart-{name.replace('_', '-')}", name)


def _throttling(page: _Page) -> str:
    parts = ["<h2>Throttling by quota entity</h2>"]
    parts.append(
        page.empty("throttled_entities", "Throttled quota entities")
        or _table(
            (
                ("quota_entity", "quota entity"),
                ("quota_type", "quota type"),
                ("throttle_ms_max", "longest throttle (ms)"),
                ("throttle_ms_avg", "average throttle (ms)"),
                ("samples", "samples"),
            ),
            page.result("throttled_entities").records(),
            table_id="throttled-table",
        )
    )
    parts.append(
        page.empty("throttle_over_time", "Throttle time")
        or _lines_chart(
            page,
            "throttle_over_time",
            ("quota_entity", "quota_type"),
            "throttle_ms_avg",
            title="Average throttle time per minute, most throttled entities",
            y_title="ms",
        )
    )
    parts.append(
        page.empty("token_levels", "Token levels (controller mutations)")
        or _lines_chart(
            page,
            "token_levels",
            ("quota_entity",),
            "tokens_min",
            title="Lowest controller-mutation token level per minute (below 0: throttled)",
            y_title="tokens",
        )
    )
    return "".join(parts)


def _clients(page: _Page) -> str:
    parts = ["<h2>Client instances</h2>"]
    empty = page.empty("clients", "Client instances")
    if empty:
        return "".join([*parts, empty])
    shown = len(page.result("clients").rows)
    parts.append(
        f'<p class="note">{shown:,} client instances, the most recently seen first (at most '
        f"{page.window.max_clients:,}). Click one to see its metrics.</p>"
        '<input type="search" id="client-filter" '
        'placeholder="filter: client id, principal, entity, software">'
    )
    parts.append(
        _table(
            (
                ("client_instance_id", "client instance"),
                ("client_id", "client id"),
                ("principal", "principal"),
                ("quota_entity", "quota entity"),
                ("client_software_name", "software"),
                ("client_software_version", "version"),
                ("first_seen", "first seen"),
                ("last_seen", "last seen"),
                ("metrics", "metrics"),
                ("points", "points"),
                ("unknown_deltas", "unknown deltas"),
            ),
            page.result("clients").records(),
            table_id="clients-table",
            row_attrs=lambda r: f' data-client="{html.escape(str(r["client_instance_id"]))}"',
        )
    )
    parts.append('<div id="client-detail"></div>')
    return "".join(parts)


def _config(page: _Page) -> str:
    parts = [
        "<h2>Config history</h2>",
        '<p class="note">Subscription and client-quota changes made through the admin API, newest first; '
        "changes from before the window are greyed (they may still apply).</p>",
    ]
    parts.append(
        page.empty("config_history", "Config changes")
        or _table(
            (
                ("written_at", "when"),
                ("kind", "kind"),
                ("target", "subscription / quota entity"),
                ("change", "change"),
                ("principal", "by"),
                ("replica_id", "replica"),
            ),
            page.result("config_history").records(),
            table_id="config-table",
            row_attrs=lambda r: "" if r["in_window"] else ' class="before-window"',
        )
    )
    return "".join(parts)


def _data_json(results: Mapping[str, QueryResult]) -> str:
    data: dict[str, Any] = {
        name: {"columns": list(r.columns), "rows": r.rows, "missing": list(r.missing)}
        for name, r in results.items()
    }
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_page(
    results: Mapping[str, QueryResult],
    window: Window,
    *,
    metric: str | None = None,
    refresh_s: float | None = None,
    source: str = "",
    generated_at: datetime | None = None,
) -> str:
    """The whole page. ``metric`` is the one the rankings open on; ``refresh_s`` makes the browser reload
    the page that often (``--serve``); ``source`` (the data root) is shown in the header."""
    page = _Page(results, window)
    generated = (generated_at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    start, end = (w.astimezone(UTC).strftime("%Y-%m-%d %H:%M") for w in (window.start, window.end))
    refresh = f'<meta http-equiv="refresh" content="{max(1, round(refresh_s))}">' if refresh_s else ""
    subtitle = f"{start} to {end} UTC (1-minute and 1-hour rollups) · generated {generated}"
    if source:
        subtitle += f" · {source}"
    sections = (
        ("overview", _overview(page)),
        ("metrics", _metrics(page, metric)),
        ("throttling", _throttling(page)),
        ("clients", _clients(page)),
        ("config", _config(page)),
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>telemetry-sink dashboard</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
        f"<header><h1>Kafka client telemetry</h1><p>{html.escape(subtitle)}</p></header>"
        + "".join(f'<section id="{key}">{body}</section>' for key, body in sections)
        + f'<script type="application/json" id="dashboard-data">{_data_json(results)}</script>'
        f"<script>{_SCRIPT}</script></body></html>"
    )
