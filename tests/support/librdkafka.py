"""Real Kafka clients (librdkafka through confluent-kafka) in tests: each client made, polled and
closed in its own thread, and an exporter wrapper the test waits on as pushes land (never on wall
time)."""

from __future__ import annotations

import asyncio
import gc
import threading
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


class ClientThread:
    """A client made, polled and closed in its own thread; the test reaches it only through
    ``call``, so that the thread holds its last reference and closing it really destroys it (Producer
    and AdminClient send their terminating push then)."""

    def __init__(self, make: Callable[[], Any], close: Callable[[Any], None] | None = None) -> None:
        self._make = make
        self._close = close
        self._client: Any = None
        self._stop = threading.Event()

    def _run(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Event) -> None:
        self._client = self._make()
        loop.call_soon_threadsafe(ready.set)
        while not self._stop.is_set():
            self._client.poll(0.05)
        if self._close is not None:
            self._close(self._client)
        self._client = None  # the last reference: rd_kafka_destroy runs here, in this thread
        gc.collect()

    async def call(self, function: Callable[[Any], Any]) -> Any:
        return await asyncio.to_thread(function, self._client)


@asynccontextmanager
async def running_client(
    make: Callable[[], Any], close: Callable[[Any], None] | None = None
) -> AsyncIterator[ClientThread]:
    """The client runs until the block ends, then is closed; the block waits for that."""
    client = ClientThread(make, close)
    ready = asyncio.Event()
    thread = asyncio.create_task(asyncio.to_thread(client._run, asyncio.get_running_loop(), ready))
    try:
        await asyncio.wait([thread, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
        yield client
    finally:
        client._stop.set()
        await thread
