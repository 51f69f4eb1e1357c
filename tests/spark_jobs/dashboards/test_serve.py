"""``DashboardServer``, a real HTTP server on loopback: the page once rendered, a self-reloading 503
before that, the previous page kept when a render fails, JSON errors for anything else."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from spark_jobs.dashboards.serve import DashboardServer


class Pages:
    """A render function whose pages (or failures) the test hands out one at a time."""

    def __init__(self) -> None:
        self.queue: list[str | Exception] = []
        self.ready = threading.Semaphore(0)

    def give(self, page: str | Exception) -> None:
        self.queue.append(page)
        self.ready.release()

    def __call__(self) -> str:
        self.ready.acquire()
        page = self.queue.pop(0)
        if isinstance(page, Exception):
            raise page
        return page


@pytest.fixture
def pages() -> Pages:
    return Pages()


@pytest.fixture
def server(pages: Pages) -> Iterator[DashboardServer]:
    # refresh_s=0: the next render starts at once and waits for the test's next page
    server = DashboardServer(pages, host="127.0.0.1", port=0, refresh_s=0)
    server.start()
    yield server
    pages.give("<html>last</html>")  # let a waiting render finish so the thread can stop
    server.stop()


def get(server: DashboardServer, path: str, method: str = "GET") -> httpx.Response:
    return httpx.request(method, f"http://127.0.0.1:{server.port}{path}", timeout=10)


def test_before_the_first_render_the_page_is_a_503_that_reloads_itself(server: DashboardServer) -> None:
    answer = get(server, "/")
    assert answer.status_code == 503
    assert '<meta http-equiv="refresh" content="2">' in answer.text
    assert "being rendered" in answer.text
    assert get(server, "/healthz").json() == {"status": "ok", "rendered_at": None, "last_error": None}


def test_the_latest_render_is_served(server: DashboardServer, pages: Pages) -> None:
    pages.give("<html>one</html>")
    assert server.wait_for_render(1, timeout_s=10)
    answer = get(server, "/")
    assert (answer.status_code, answer.text) == (200, "<html>one</html>")
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["cache-control"] == "no-store"
    pages.give("<html>two</html>")
    assert server.wait_for_render(2, timeout_s=10)
    assert get(server, "/index.html").text == "<html>two</html>"
    head = get(server, "/", method="HEAD")
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "16")
    assert get(server, "/healthz").json()["rendered_at"] is not None


def test_a_failed_render_keeps_the_previous_page_and_is_reported(
    server: DashboardServer, pages: Pages
) -> None:
    pages.give("<html>good</html>")
    pages.give(RuntimeError("storage unreachable\nmore detail"))
    assert server.wait_for_render(2, timeout_s=10)
    assert get(server, "/").text == "<html>good</html>"
    assert get(server, "/healthz").json()["last_error"] == "storage unreachable"
    pages.give("<html>better</html>")
    assert server.wait_for_render(3, timeout_s=10)
    assert get(server, "/healthz").json()["last_error"] is None


def test_a_first_render_that_fails_says_why_on_the_waiting_page(
    server: DashboardServer, pages: Pages
) -> None:
    pages.give(RuntimeError("no <such> bucket"))
    assert server.wait_for_render(1, timeout_s=10)
    answer = get(server, "/")
    assert answer.status_code == 503
    assert "The last render failed: no &lt;such&gt; bucket." in answer.text


def test_other_paths_and_methods_get_json_errors(server: DashboardServer) -> None:
    missing = get(server, "/nope")
    assert (missing.status_code, missing.json()) == (404, {"error": "no such page: /nope"})
    posted = get(server, "/", method="POST")
    assert (posted.status_code, posted.json()) == (405, {"error": "only GET and HEAD"})
