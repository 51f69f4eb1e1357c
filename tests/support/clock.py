"""A fake millisecond clock. Starts at a realistic epoch value, as the spec asks (C-1).

It also implements ``ingest.quotas.clock.Clock``: ``wait`` never sleeps; when nothing sets the event
it jumps the clock forward by the timeout (virtual time), so waits in tests take no wall time.
"""

from __future__ import annotations

import asyncio

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
