"""A sink-like writer process for crash and concurrency tests.

Usage: python -m tests.exporters.delta.writer_process TABLE WRITER_ID COUNT [CONCURRENCY]

Exports COUNT pushes (ids ``<writer id>-<pid>-<n>``) through a DeltaLandingExporter, CONCURRENCY at
a time, and prints ``ACK <push_id>`` for each push only after its commit succeeded, then ``DONE``.

Environment:

- ``WRITER_KILL_AT=N:before`` (or ``N:after``): the process SIGKILLs itself at the N-th Delta write
  (the first is the writer id's claim), before the write or after it landed;
- ``WRITER_FAULT_RATE=0.2``: each Delta write fails with that probability, half of them before
  writing and half after the commit landed (its answer lost), seeded by ``WRITER_SEED``;
- ``WRITER_RETRY=1``: a push answered RETRYABLE is exported again, as a client would (while another
  process holds the writer id, or after a crash until the lease has run out);
- ``WRITER_LEASE_MS``: the exporter's ``writer_lease_ms``.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from typing import Any

import deltalake

import exporters.delta.appender as appender_module
from exporters import DeltaLandingExporter, ExportResult
from tests.support.otlp import push


async def main(table: str, writer_id: str, count: int, concurrency: int) -> None:
    lease_ms = int(os.environ.get("WRITER_LEASE_MS") or 30_000)
    exporter = DeltaLandingExporter(
        table,
        writer_id=writer_id,
        max_batch_rows=50,
        max_batch_latency_ms=5,
        retry_backoff_ms=10,
        writer_lease_ms=lease_ms,
    )
    await exporter.start()
    slots = asyncio.Semaphore(concurrency)
    retry = os.environ.get("WRITER_RETRY") == "1"

    async def one(n: int) -> None:
        async with slots:
            p = push(n, push_id=f"{writer_id}-{os.getpid()}-{n:06d}")
            result = await exporter.export(p)
            while retry and result is ExportResult.RETRYABLE:
                await asyncio.sleep(0.05)
                result = await exporter.export(p)
            if result is ExportResult.SUCCESS:
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


def faulty_writes(rate: float, seed: int) -> None:
    """Each Delta write fails with probability ``rate``: half before writing, half after it landed."""
    real = deltalake.write_deltalake
    chance = random.Random(seed)

    def write(*args: Any, **kwargs: Any) -> Any:
        draw = chance.random()
        if draw < rate / 2:
            raise OSError("injected: storage unavailable, nothing written")
        result = real(*args, **kwargs)
        if draw < rate:
            raise OSError("injected: connection reset after the commit landed")
        return result

    vars(appender_module)["write_deltalake"] = write


if __name__ == "__main__":
    if os.environ.get("WRITER_KILL_AT"):
        kill_at(os.environ["WRITER_KILL_AT"])
    if os.environ.get("WRITER_FAULT_RATE"):
        faulty_writes(float(os.environ["WRITER_FAULT_RATE"]), int(os.environ.get("WRITER_SEED") or 0))
    table, writer_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run(main(table, writer_id, count, int(sys.argv[4]) if len(sys.argv) > 4 else 100))
