"""Soak of the push path: the sink's memory under a steady load.

``telemetry-sink serve`` (default Delta exporter, landing in a temporary directory) is driven by the
fleet of ``bench.py`` in open loop at a steady ``--rate`` pushes/s for ``--duration-s`` (default 600 s):
``--instances`` client instances, each pushing every ``instances / rate`` seconds with the
subscription's ``interval.ms`` set a little below that, so every push is accepted. The sink process's
resident memory (``VmRSS``) is sampled every ``--sample-s`` seconds. Goal: RSS grows by under 10%
from the end of the warm-up (``--warmup-s``, default 60 s) to the end.

Run: ``.venv/bin/python benchmarks/push_path/soak.py [--duration-s 600 --rate 300 ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import json
import platform
import shutil
import tempfile
import time
from typing import Any

from deltalake import DeltaTable

from benchmarks.push_path.harness import (
    MIN_INTERVAL_MS,
    Server,
    TelemetryFleet,
    load_payloads,
    percentile,
    rss_bytes,
    start_sink,
)

GOAL_GROWTH = 0.10


async def soak(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    fleet = TelemetryFleet(server.target, load_payloads(), args.instances, args.channels)
    samples: list[tuple[float, int, int]] = []  # (seconds since start, RSS bytes, answered pushes)

    async def sample(start: float) -> None:
        while True:
            stats = fleet.stats
            answered = stats.accepted + stats.error_count
            samples.append((time.perf_counter() - start, rss_bytes(server.process.pid), answered))
            t, rss, _ = samples[-1]
            if args.verbose:
                print(f"  {t:6.0f} s  RSS {rss / 2**20:7.1f} MiB  {answered:>9,} pushes", flush=True)
            await asyncio.sleep(args.sample_s)

    try:
        await fleet.subscribe()
        start = time.perf_counter()
        sampler = asyncio.create_task(sample(start))
        await fleet.run_paced(args.rate, args.duration_s, args.warmup_s)
        sampler.cancel()
        answered = fleet.stats.accepted + fleet.stats.error_count
        samples.append((time.perf_counter() - start, rss_bytes(server.process.pid), answered))
    finally:
        await fleet.close()
    stats = fleet.stats
    after_warmup = next((s for s in samples if s[0] >= args.warmup_s), samples[-1])
    end = samples[-1]
    latencies = sorted(stats.window_latencies_s)
    window_s = args.duration_s - args.warmup_s
    return {
        "rss_after_warmup_mib": after_warmup[1] / 2**20,
        "rss_warmup_at_s": after_warmup[0],
        "rss_end_mib": end[1] / 2**20,
        "rss_min_mib": min(s[1] for s in samples) / 2**20,
        "rss_max_mib": max(s[1] for s in samples) / 2**20,
        "growth": end[1] / after_warmup[1] - 1,
        "achieved_pushes_per_s": stats.window_completed / window_s,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "accepted": stats.accepted,
        "errors": {str(code): n for code, n in sorted(stats.errors.items())},
        "rpc_failures": dict(stats.rpc_failures),
        "samples": [(round(t, 1), rss) for t, rss, _ in samples],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration-s", type=float, default=600.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=300.0, help="pushes/s, steady")
    parser.add_argument("--instances", type=int, default=3000)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--verbose", action="store_true", help="print every RSS sample")
    args = parser.parse_args()
    period_ms = args.instances / args.rate * 1000
    # below the period, so a push answered late still finds its interval passed by the next slot
    interval_ms = max(MIN_INTERVAL_MS, int(period_ms * 0.9))
    if interval_ms > period_ms:
        raise SystemExit(f"{args.instances} instances cannot push {args.rate:g}/s (interval.ms >= 100)")
    workdir = Path(tempfile.mkdtemp(prefix="push-path-soak-"))
    try:
        server = start_sink(workdir, interval_ms)
        try:
            r = asyncio.run(soak(server, args))
        finally:
            code = server.stop()
        if code != 0:
            raise SystemExit(f"sink exited {code}; log:\n{server.log_tail()}")
        assert server.table_uri is not None
        r["rows"] = DeltaTable(server.table_uri).to_pyarrow_dataset().count_rows()
        report(args, interval_ms, r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(args: argparse.Namespace, interval_ms: int, r: dict[str, Any]) -> None:
    errors = sum(r["errors"].values()) + sum(r["rpc_failures"].values())
    print(
        f"push path soak: {args.rate:g} pushes/s for {args.duration_s:g} s, {args.instances:,} instances "
        f"over {args.channels} channels, interval.ms {interval_ms}"
    )
    print(
        f"  achieved            {r['achieved_pushes_per_s']:>9,.1f} pushes/s   p50 {r['p50_ms']:.1f} ms   "
        f"p99 {r['p99_ms']:.1f} ms (after warm-up)"
    )
    print(f"  accepted            {r['accepted']:>9,}   errors {errors:,}   Delta rows {r['rows']:,}")
    print(f"  RSS after warm-up   {r['rss_after_warmup_mib']:>9.1f} MiB (at {r['rss_warmup_at_s']:.0f} s)")
    print(f"  RSS at the end      {r['rss_end_mib']:>9.1f} MiB (max {r['rss_max_mib']:.1f} MiB)")
    verdict = "PASS" if r["growth"] < GOAL_GROWTH else "FAIL"
    print(f"  growth              {r['growth'] * 100:>9.1f} %   (goal < 10 %): {verdict}")
    print(json.dumps({"benchmark": "push_path_soak", "python": platform.python_version(), **r}))
    if r["rows"] != r["accepted"]:
        raise SystemExit(f"{r['rows']} rows for {r['accepted']} acknowledged pushes")


if __name__ == "__main__":
    main()
