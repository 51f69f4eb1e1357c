"""Time for the asynchronous parts of the engine (the throttle reaper, connection-slot waits).

The quota maths takes ``now`` as an argument; only code that must wait needs a ``Clock``. Tests use a
fake clock that jumps ahead instead of waiting.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (Kafka's ``Time.milliseconds``)."""
        ...

    async def wait(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        """Wait until ``event`` is set (True) or ``timeout_ms`` has passed (False)."""
        ...


class SystemClock:
    """The wall clock and the running event loop's timers."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def wait(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        if timeout_ms is None:
            await event.wait()
            return True
        try:
            await asyncio.wait_for(event.wait(), max(timeout_ms, 0) / 1000)
        except TimeoutError:
            return False
        return True
