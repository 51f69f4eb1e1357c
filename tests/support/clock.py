"""A fake millisecond clock. Starts at a realistic epoch value, as the spec asks (C-1)."""

from __future__ import annotations

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self, start_ms: int = T0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms
