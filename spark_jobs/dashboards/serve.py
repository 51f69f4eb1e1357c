"""``telemetry-sink dashboard --serve``: the page over HTTP, rendered again every ``refresh_s``.

A thread of its own renders the page (Spark queries + HTML) at once and then every ``refresh_s``;
requests get the latest page, so a slow render never holds a browser up, and the page tells the
browser to reload it every ``refresh_s``. A failed render is logged and the previous page stays up.

| path | answer |
|---|---|
| ``/`` | the page (200); 503 with a page that reloads itself until the first render is done |
| ``/healthz`` | ``{"status": "ok", "rendered_at": ..., "last_error": ...}`` (200) |
| anything else | 404, JSON ``{"error": ...}``; methods other than GET and HEAD: 405 |
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

__all__ = ["DashboardServer"]

log = logging.getLogger(__name__)

_WAITING: Final = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">'
    "<title>telemetry-sink dashboard</title></head><body><p>{message}</p></body></html>"
)


class DashboardServer:
    """Serves what ``render`` returns on ``host:port`` (port 0: any free port, see ``port``)."""

    def __init__(self, render: Callable[[], str], *, host: str, port: int, refresh_s: float) -> None:
        self._render = render
        self.refresh_s = refresh_s
        self._page: bytes | None = None
        self._rendered_at: str | None = None
        self._last_error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.renders = 0
        """Renders done (successful or not), for whoever waits for one."""
        self._rendered = threading.Condition(self._lock)
        self._http = ThreadingHTTPServer((host, port), self._handler())
        self._http.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._http.serve_forever, name="dashboard-http", daemon=True),
            threading.Thread(target=self._render_loop, name="dashboard-render", daemon=True),
        ]

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_for_render(self, count: int = 1, timeout_s: float | None = None) -> bool:
        """Wait until ``count`` renders are done; False if ``timeout_s`` passed first."""
        with self._rendered:
            return self._rendered.wait_for(lambda: self.renders >= count, timeout_s)

    def stop(self) -> None:
        """Stop serving; a render in progress finishes first."""
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _render_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                page = self._render().encode("utf-8")
            except Exception as exc:  # storage or Spark: keep serving the previous page
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                log.info("dashboard render failed: %s", message)  # the caller's render says it too
                with self._rendered:
                    self._last_error = message
                    self.renders += 1
                    self._rendered.notify_all()
            else:
                with self._rendered:
                    self._page = page
                    self._rendered_at = datetime.now(UTC).isoformat(timespec="seconds")
                    self._last_error = None
                    self.renders += 1
                    self._rendered.notify_all()
            self._stop.wait(max(0.0, self.refresh_s - (time.monotonic() - started)))

    def _snapshot(self) -> tuple[bytes | None, str | None, str | None]:
        with self._lock:
            return self._page, self._rendered_at, self._last_error

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "telemetry-sink-dashboard"

            def do_GET(self) -> None:
                self._answer(send_body=True)

            def do_HEAD(self) -> None:
                self._answer(send_body=False)

            def _not_allowed(self) -> None:
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, _json({"error": "only GET and HEAD"}), "json", True)

            do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed  # noqa: N815 - http.server's names

            def _answer(self, *, send_body: bool) -> None:
                path = self.path.split("?", 1)[0]
                page, rendered_at, last_error = server._snapshot()
                if path in ("/", "/index.html"):
                    if page is None:
                        message = (
                            f"The last render failed: {last_error}. Trying again in {server.refresh_s:g} s."
                            if last_error
                            else "The dashboard is being rendered; this page reloads by itself."
                        )
                        body = _WAITING.format(message=html.escape(message)).encode("utf-8")
                        self._send(HTTPStatus.SERVICE_UNAVAILABLE, body, "html", send_body)
                    else:
                        self._send(HTTPStatus.OK, page, "html", send_body)
                elif path == "/healthz":
                    status = {"status": "ok", "rendered_at": rendered_at, "last_error": last_error}
                    self._send(HTTPStatus.OK, _json(status), "json", send_body)
                else:
                    self._send(
                        HTTPStatus.NOT_FOUND, _json({"error": f"no such page: {path}"}), "json", send_body
                    )

            def _send(self, status: HTTPStatus, body: bytes, kind: str, send_body: bool) -> None:
                self.send_response(status)
                content_type = "text/html; charset=utf-8" if kind == "html" else "application/json"
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("dashboard %s: " + format, self.address_string(), *args)

        return Handler


def _json(value: object) -> bytes:
    return json.dumps(value).encode("utf-8")
