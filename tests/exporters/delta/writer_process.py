"""A sink-like writer process for crash and concurrency tests.

Usage: python -m tests.exporters.delta.writer_process TABLE WRITER_ID COUNT [CONCURRENCY]

Exports COUNT pushes through a DeltaLandingExporter, CONCURRENCY at a time, and prints
``ACK <push_id>`` for each push only after its commit succeeded, then ``DONE``.
"""

from __future__ import annotations

import asyncio
import sys

from exporters import DeltaLandingExporter, ExportResult
from tests.support.otlp import push


async def main(table: str, writer_id: str, count: int, concurrency: int) -> None:
    exporter = DeltaLandingExporter(table, writer_id=writer_id, max_batch_rows=50, max_batch_latency_ms=5)
    await exporter.start()
    slots = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with slots:
            p = push(n, push_id=f"{writer_id}-{n:06d}")
            if await exporter.export(p) is ExportResult.SUCCESS:
                sys.stdout.write(f"ACK {p.context.push_id}\n")
                sys.stdout.flush()

    await asyncio.gather(*(one(n) for n in range(count)))
    await exporter.shutdown()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()


if __name__ == "__main__":
    table, writer_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run(main(table, writer_id, count, int(sys.argv[4]) if len(sys.argv) > 4 else 100))
