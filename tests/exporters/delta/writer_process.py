"""A sink-like writer process for crash and concurrency tests.

Usage: python -m tests.exporters.delta.writer_process TABLE WRITER_ID COUNT [CONCURRENCY]

Exports COUNT pushes (ids ``<writer id>-<pid>-<n>``) through a DeltaLandingExporter, CONCURRENCY at
a time, and prints ``ACK <push_id>`` for each push only after its commit succeeded, then ``DONE``.

``WRITER_KILL_AT=N:before`` (or ``N:after``) in the environment: the process SIGKILLs itself at the
N-th Delta write (the first is the writer id's claim), before the write or after it landed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import deltalake

import exporters.delta.appender as appender_module
from exporters import DeltaLandingExporter, ExportResult
from tests.support.otlp import push


async def main(table: str, writer_id: str, count: int, concurrency: int) -> None:
    exporter = DeltaLandingExporter(table, writer_id=writer_id, max_batch_rows=50, max_batch_latency_ms=5)
    await exporter.start()
    slots = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with slots:
            p = push(n, push_id=f"{writer_id}-{os.getpid()}-{n:06d}")
            if await exporter.export(p) is ExportResult.SUCCESS:
                sys.stdout.write(f"ACK {p.context.push_id}\n")
                sys.stdout.flush()

    await asyncio.gather(*(one(n) for n in range(count)))
    await exporter.shutdown()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()


def kill_at(spec: str) -> None:
    """SIGKILL this process at the ``N``-th Delta write, ``before`` it or ``after`` it landed."""
    nth, _, when = spec.partition(":")
    real = deltalake.write_deltalake
    calls = 0

    def write(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == int(nth) and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(*args, **kwargs)
        if calls == int(nth):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    vars(appender_module)["write_deltalake"] = write  # as the appender module calls it


if __name__ == "__main__":
    if os.environ.get("WRITER_KILL_AT"):
        kill_at(os.environ["WRITER_KILL_AT"])
    table, writer_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run(main(table, writer_id, count, int(sys.argv[4]) if len(sys.argv) > 4 else 100))
