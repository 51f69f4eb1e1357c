"""``telemetry-sink serve`` under cProfile, for ``bench.py --profile FILE``.

The event loop's thread and every thread started after it (the Delta exporter's commit threads from
``asyncio.to_thread``) each get their own profiler; their statistics are merged into ``FILE`` (a
``pstats`` dump) when the sink exits after SIGTERM.

Run: ``.venv/bin/python benchmarks/push_path/profiled_serve.py FILE --config telemetry-sink.yaml``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import threading
from types import FrameType
from typing import Any

from telemetry_sink.cli import main as cli_main

_profiles: list[cProfile.Profile] = []


def _profile_new_thread(frame: FrameType, event: str, arg: Any) -> None:
    """Installed by ``threading.setprofile``: the first event in a new thread swaps this hook for a
    profiler of the thread's own."""
    profile = cProfile.Profile()
    _profiles.append(profile)
    profile.enable()


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    threading.setprofile(_profile_new_thread)
    loop_thread = cProfile.Profile()
    loop_thread.enable()
    try:
        code = cli_main(["serve", *argv])
    finally:
        loop_thread.disable()
        threading.setprofile(None)
        stats = pstats.Stats(loop_thread)
        for profile in _profiles:
            profile.disable()
            stats.add(profile)
        stats.dump_stats(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
