"""A fake millisecond clock. Starts at a realistic epoch value, as docs/rules.md asks (C-1).

It also implements ``quotas.clock.Clock``: ``wait`` never sleeps; when nothing sets the event
it jumps the clock forward by the timeout (virtual time), so waits in tests take no wall time.
``SteppedClock`` holds waits until the test moves it on; ``eventually`` lets the event loop run until
a server has caught up with what a test did on its sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self, start_ms: int = T0) -> None:
        self.time_ms = start_ms

    def now_ms(self) -> int:
        return self.time_ms

    def advance(self, ms: int) -> int:
        self.time_ms += ms
        return self.time_ms

    async def wait(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        await asyncio.sleep(0)  # let everything that can run now run first
        if event.is_set():
            return True
        if timeout_ms is None:
            await event.wait()
            return True
        self.time_ms += max(timeout_ms, 0)
        return False


class SteppedClock(FakeClock):
    """A fake clock whose waits last until the test moves it past their end (or the event is set),
    so a test can look at a connection while it waits; ``pending`` lists the waits in progress."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[int] = []
        self._moved = asyncio.Event()

    def advance(self, ms: int) -> int:
        now = super().advance(ms)
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
        return now

    async def wait(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        if timeout_ms is None:
            await event.wait()
            return True
        end = self.time_ms + timeout_ms
        self.pending.append(timeout_ms)
        try:
            while not event.is_set() and self.time_ms < end:
                waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._moved.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiting in waits:
                        waiting.cancel()
            return event.is_set()
        finally:
            self.pending.remove(timeout_ms)


async def eventually(predicate: Callable[[], bool]) -> None:
    """Let the loop run (no wall-time waits) until the server has caught up with the sockets."""
    for _ in range(200_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")
