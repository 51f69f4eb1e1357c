"""Benchmark of the Delta landing exporter (issue 4).

1. Throughput: pushes/s and MB/s landed through ``DeltaLandingExporter`` at its default batch
   bounds, by as many concurrent connections as one batch holds (each pushing in turn), against
   writing the same Arrow batches with ``pyarrow.parquet`` to the same disk (the ceiling), in one
   run. Goal: ratio >= 0.7.
2. Commit latency p50/p99 and files per hour at a steady 1,000 pushes/s (paced for ``--paced-s``
   seconds of wall time).

Payloads are 1,500 bytes, about the size of a decompressed librdkafka producer push.

Run: ``make bench`` or ``.venv/bin/python benchmarks/landing/bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid

import pyarrow.parquet as pq

from exporters import DeltaLandingExporter, ExportResult, PushContext, TelemetryPush
from exporters.delta.landing import DEFAULT_MAX_BATCH_ROWS
from exporters.delta.schema import pushes_to_table

T0 = 1_700_000_000_000


def make_pushes(count: int, payload_bytes: int = 1500) -> list[TelemetryPush]:
    payload = os.urandom(payload_bytes)  # incompressible: the writer's compression gains nothing
    return [
        TelemetryPush(
            PushContext(
                uuid.UUID(int=n + 2),
                422777291,
                T0 + n,
                client_id=f"producer-{n % 1000}",
                client_software_name="librdkafka",
                client_software_version="2.16.0",
                client_source_address="10.0.0.1",
                client_source_port=40000 + n % 20000,
                quota_tags={"user": "alice", "client-id": ""},
                compression_type=4,
            ),
            payload,
        )
        for n in range(count)
    ]


async def land(table: str, pushes: list[TelemetryPush]) -> tuple[float, DeltaLandingExporter]:
    """One worker per concurrent client connection (a full batch of them), each pushing in turn."""
    exporter = DeltaLandingExporter(table, writer_id="bench")
    await exporter.start()
    connections = DEFAULT_MAX_BATCH_ROWS
    failures = 0

    async def connection(k: int) -> None:
        nonlocal failures
        for p in pushes[k::connections]:
            failures += await exporter.export(p) is not ExportResult.SUCCESS

    start = time.perf_counter()
    await asyncio.gather(*(connection(k) for k in range(connections)))
    elapsed = time.perf_counter() - start
    await exporter.shutdown()
    assert failures == 0
    return elapsed, exporter


def ceiling(directory: str, pushes: list[TelemetryPush]) -> float:
    batches = [
        pushes_to_table(pushes[i : i + DEFAULT_MAX_BATCH_ROWS], "bench", i)
        for i in range(0, len(pushes), DEFAULT_MAX_BATCH_ROWS)
    ]
    os.makedirs(directory)
    start = time.perf_counter()
    for i, batch in enumerate(batches):
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        pq.write_table(batch, path)
        with open(path, "rb") as f:  # durable, as a Delta commit is
            os.fsync(f.fileno())
    return time.perf_counter() - start


async def paced(table: str, rate: int, seconds: float) -> dict[str, float]:
    exporter = DeltaLandingExporter(table, writer_id="paced")
    await exporter.start()
    pushes = make_pushes(int(rate * seconds))
    tasks = []
    start = time.perf_counter()
    for n, p in enumerate(pushes):
        due = start + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(exporter.export(p)))
    results = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    await exporter.shutdown()
    assert set(results) == {ExportResult.SUCCESS}
    latencies = sorted(exporter.commit_latencies_ms)
    return {
        "rate": rate,
        "commits": exporter.commits,
        "files_per_hour": exporter.commits / elapsed * 3600,  # one file per commit per date partition
        "commit_latency_p50_ms": statistics.median(latencies),
        "commit_latency_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pushes", type=int, default=50_000)
    parser.add_argument("--payload-bytes", type=int, default=1500)
    parser.add_argument("--paced-s", type=float, default=10.0)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="landing-bench-")
    try:
        pushes = make_pushes(args.pushes, args.payload_bytes)
        megabytes = args.pushes * args.payload_bytes / 1e6
        exporter_s, exporter = asyncio.run(land(os.path.join(work, "telemetry_pushes"), pushes))
        ceiling_s = ceiling(os.path.join(work, "ceiling"), pushes)
        latencies = sorted(exporter.commit_latencies_ms)
        print(f"landing {args.pushes:,} pushes of {args.payload_bytes:,} B at the default batch bounds:")
        for label, seconds in (("exporter", exporter_s), ("ceiling (pyarrow)", ceiling_s)):
            rate = f"{args.pushes / seconds:>10,.0f} pushes/s {megabytes / seconds:>8.1f} MB/s"
            print(f"  {label:<19} {rate}")
        print(f"  ratio               {ceiling_s / exporter_s:>10.3f}   (goal >= 0.700)")
        print(f"  commits             {exporter.commits:>10}   p50 {statistics.median(latencies):.0f} ms")
        steady = asyncio.run(paced(os.path.join(work, "paced"), 1000, args.paced_s))
        print(f"steady 1,000 pushes/s for {args.paced_s:g} s:")
        p50, p99 = steady["commit_latency_p50_ms"], steady["commit_latency_p99_ms"]
        print(f"  commit latency      p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        print(f"  files per hour      {steady['files_per_hour']:>10,.0f}   ({steady['commits']:.0f} commits)")
        print(
            json.dumps(
                {
                    "benchmark": "landing",
                    "python": platform.python_version(),
                    "pushes": args.pushes,
                    "payload_bytes": args.payload_bytes,
                    "exporter_pushes_per_s": args.pushes / exporter_s,
                    "ceiling_pushes_per_s": args.pushes / ceiling_s,
                    "exporter_mb_per_s": megabytes / exporter_s,
                    "ratio": ceiling_s / exporter_s,
                    **{f"steady_{k}": v for k, v in steady.items()},
                }
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
