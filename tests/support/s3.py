"""A real S3-compatible server on loopback for the object-store tests: moto's S3 (``moto[server]``)
in a child process, one request at a time.

moto answers S3's REST API over HTTP as AWS does, including the conditional put delta-rs commits
with (``PUT`` with ``If-None-Match: *``: 412 Precondition Failed when the object exists). moto checks
the condition and stores the object in two steps, so two requests handled at once by its threaded
server could both pass the check; AWS S3 decides atomically. The child therefore hands moto one
request at a time (``serialised``), which makes the check and the write one step, as on S3, while
the connections stay concurrent: writers really race, and the store picks the winner.

``running_s3()`` starts the server and yields an ``S3`` whose ``bucket()`` creates a fresh bucket
and ``storage_options`` are the delta-rs options for it (credentials for this server only).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY = "telemetry-sink-test"
SECRET_KEY = "telemetry-sink-test-secret"
REGION = "us-east-1"

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class S3:
    """The running server: its endpoint and the options delta-rs (and pyarrow) need to reach it."""

    endpoint: str

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def bucket(self) -> str:
        """A new empty bucket; its ``s3://`` URI."""
        name = f"lake-{uuid.uuid4().hex[:16]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.status
        return f"s3://{name}"


@contextmanager
def running_s3() -> Iterator[S3]:
    """Start the server in a child process on a free loopback port; stop it on the way out."""
    with subprocess.Popen(
        [sys.executable, "-m", "tests.support.s3"],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            port = process.stdout.readline().strip()
            assert port.isdigit(), f"the S3 server did not start: {port!r}"
            yield S3(f"http://127.0.0.1:{port}")
        finally:
            process.terminate()
            process.wait(timeout=10)


def serialised(app: WsgiApp) -> WsgiApp:
    """``app`` answering one request at a time (its whole response built under one lock)."""
    lock = threading.Lock()

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            return list(app(environ, start_response))

    return handle


def _serve() -> None:
    from moto.moto_server.werkzeug_app import (  # noqa: PLC0415 - only the child imports moto
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server  # noqa: PLC0415

    app = serialised(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    _serve()
