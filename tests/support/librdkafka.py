"""Real Kafka clients (librdkafka through confluent-kafka) in tests: each client made, polled and
closed in its own thread, and an exporter wrapper the test waits on as pushes land (never on wall
time)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from exporters import Exporter, ExportResult, TelemetryPush

WAIT_S = 60
"""A hang guard: each wait ends as soon as the pushes it waits for have landed."""


class Landed(Exporter):
    """The sink's real exporter, with an event per landed push for the test to wait on."""

    def __init__(self, inner: Exporter) -> None:
        self.inner = inner
        self.pushes: list[TelemetryPush] = []
        self._changed = asyncio.Event()

    async def start(self) -> None:
        await self.inner.start()

    async def export(self, push: TelemetryPush) -> ExportResult:
        result = await self.inner.export(push)
        if result is ExportResult.SUCCESS:
            self.pushes.append(push)
            self._changed.set()
        return result

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    async def until(self, predicate: Callable[[list[TelemetryPush]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate(self.pushes):
                self._changed.clear()
                await self._changed.wait()


class TelemetryLog(logging.Handler):
    """librdkafka's telemetry debug lines (``debug=telemetry``), which it hands to ``logger`` as the
    client is polled: whether the client's last push has been answered.

    librdkafka sends its terminating push on close only from its "push scheduled" state, not while a
    push is in flight (``rd_kafka_telemetry_schedule_termination``): a test that expects the terminating
    push closes the client once its last push was answered (``running_client(..., telemetry=log)``)."""

    SENT = "Sending PushTelemetryRequest"
    ANSWERED = "PushTelemetryRequest succeeded"

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.Logger(f"librdkafka-telemetry-{id(self)}", logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def conf(self) -> dict[str, Any]:
        """What a client's configuration needs for this log to see its telemetry."""
        return {"debug": "telemetry", "logger": self.logger}

    def last_push_answered(self) -> bool:
        pushes = [line for line in self.lines if self.SENT in line or self.ANSWERED in line]
        return bool(pushes) and self.ANSWERED in pushes[-1]


class ClientThread:
    """A client made, polled and closed in its own thread; the test reaches it only through
    ``call``, so that the thread holds its last reference and closing it really destroys it (Producer
    and AdminClient send their terminating push then, if ``telemetry`` says their last push has been
    answered: the thread closes the client only then, within ``WAIT_S``)."""

    def __init__(
        self,
        make: Callable[[], Any],
        close: Callable[[Any], None] | None = None,
        telemetry: TelemetryLog | None = None,
    ) -> None:
        self._make = make
        self._close = close
        self._telemetry = telemetry
        self._client: Any = None
        self._stop = threading.Event()

    def _run(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Event) -> None:
        self._client = self._make()
        loop.call_soon_threadsafe(ready.set)
        while not self._stop.is_set():
            self._client.poll(0.05)
        deadline = time.monotonic() + WAIT_S
        while self._telemetry is not None and not self._telemetry.last_push_answered():
            if time.monotonic() > deadline:
                break  # the test then fails waiting for the terminating push, with the lines to show
            self._client.poll(0.01)
        if self._close is not None:
            self._close(self._client)
        self._client = None  # the last reference: rd_kafka_destroy runs here, in this thread
        gc.collect()

    async def call(self, function: Callable[[Any], Any]) -> Any:
        return await asyncio.to_thread(function, self._client)


@asynccontextmanager
async def running_client(
    make: Callable[[], Any], close: Callable[[Any], None] | None = None, telemetry: TelemetryLog | None = None
) -> AsyncIterator[ClientThread]:
    """The client runs until the block ends, then is closed (once its last push was answered, given
    the ``telemetry`` log its configuration names); the block waits for that."""
    client = ClientThread(make, close, telemetry)
    ready = asyncio.Event()
    thread = asyncio.create_task(asyncio.to_thread(client._run, asyncio.get_running_loop(), ready))
    try:
        await asyncio.wait([thread, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
        yield client
    finally:
        client._stop.set()
        await thread
