"""Storage faults at the real boundary between the Delta appender and delta-rs: the
``write_deltalake`` call and the ``DeltaTable`` opening the appender module makes (faults a test
cannot cause with a real local file system: a reply lost after the commit landed, a store that
hangs, a transient error)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import deltalake
import pytest

import exporters.delta.appender as appender_module

__all__ = ["WriteFaults", "read_faults", "write_faults"]

Fault = Literal["before", "after", "hang"]


class WriteFaults:
    """Planned faults for the next ``write_deltalake`` calls, in order; calls beyond the plan write.

    - ``before``: raise without writing (a transient error: nothing committed);
    - ``after``: write, then raise (the commit landed, its reply was lost);
    - ``hang``: block until ``release()``, then write (a stalled store).
    """

    def __init__(self, real: Callable[..., Any]) -> None:
        self._real = real
        self._plan: deque[Fault] = deque()
        self.always: Fault | None = None
        """A fault for every call while set (``before``: storage down)."""
        self.calls = 0
        self.hanging = threading.Event()
        """Set once a ``hang`` call is blocked."""
        self._released = threading.Event()

    def plan(self, *faults: Fault) -> None:
        self._plan.extend(faults)

    def release(self) -> None:
        self._released.set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        fault = self._plan.popleft() if self._plan else self.always
        if fault == "before":
            raise OSError("injected: storage unavailable, nothing written")
        if fault == "hang":
            self.hanging.set()
            self._released.wait()
        result = self._real(*args, **kwargs)
        if fault == "after":
            raise OSError("injected: connection reset after the commit landed")
        return result


@contextmanager
def write_faults() -> Iterator[WriteFaults]:
    """``WriteFaults`` in the appender module for the block; at its exit, hung calls are released and
    the real function is back."""
    faults = WriteFaults(deltalake.write_deltalake)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(appender_module, "write_deltalake", faults)
        try:
            yield faults
        finally:
            faults.release()


@contextmanager
def read_faults(count: int) -> Iterator[None]:
    """The next ``count`` openings of a table by the appender module raise (storage unreachable)."""
    left = count

    class FlakyDeltaTable(deltalake.DeltaTable):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            nonlocal left
            if left > 0:
                left -= 1
                raise OSError("injected: storage unreachable")
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(appender_module, "DeltaTable", FlakyDeltaTable)
        yield
