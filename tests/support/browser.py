"""Real headless Chromium (Debian's ``chromium``, which ``make test`` installs) driven by Playwright.

``open_page(url)`` loads a page and returns it with every console message and page error seen, so a
test can assert there were none. Chromium runs with the flags this machine's closed network needs
(no background networking, no component updates), in a new empty profile.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@dataclass
class Loaded:
    page: Page
    console: list[tuple[str, str]] = field(default_factory=list)
    """(type, text) of every console message, and ("pageerror", message) for uncaught errors."""
    requests: list[str] = field(default_factory=list)
    """Every URL the page asked for (an offline page asks for none but its own)."""

    def errors(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self.console if kind in ("error", "pageerror")]


@contextmanager
def open_page(url: str, *, width: int = 1400, height: int = 900) -> Iterator[Loaded]:
    executable = shutil.which("chromium") or CHROMIUM
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(FLAGS))
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            loaded = Loaded(page)
            page.on("console", lambda message: loaded.console.append((message.type, message.text)))
            page.on("pageerror", lambda error: loaded.console.append(("pageerror", str(error))))
            page.on("request", lambda request: loaded.requests.append(request.url))
            page.goto(url, wait_until="load")
            yield loaded
        finally:
            browser.close()
