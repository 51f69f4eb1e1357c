"""Benchmark of the gRPC push path, end to end.

The same concurrent gRPC client (``harness.TelemetryFleet``: simulated librdkafka instances, each
asking ``GetTelemetrySubscriptions`` once, then pushing real captured librdkafka payloads) drives, in
one run:

(a) the ceiling: a no-op ``grpc.aio`` server of the same ``ClientTelemetry`` service
    (``noop_server.py``), answering at once;
(b) the sink: ``telemetry-sink serve`` with its default Delta exporter, landing in a temporary
    directory (group commit at the default bounds: 5000 rows, 32 MiB, 200 ms; synced to disk
    before a push is acknowledged).

Each server runs in its own process; the client runs in this one, so on a 2-core machine client and
server have a core each. The subscription's ``interval.ms`` is the minimum (100 ms) and the fleet has
far more instances than pushes in flight, so the sink's interval gate accepts every push: accepted
pushes and errors are counted and printed. After a warm-up, pushes answered within a fixed window
are counted (pushes/s) and timed (p50/p99 latency). Afterwards the sink is stopped and its Delta
table must hold exactly one row per acknowledged push, per instance. Goal: ratio >= 0.5.

With ``--profile FILE`` the sink runs under cProfile (``profiled_serve.py``, every thread) and the
top functions of its request path are printed; throughput under the profiler is not the figure.

Run: ``make bench`` or ``.venv/bin/python benchmarks/push_path/bench.py [--measure-s 20 ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import io
import json
import platform
import pstats
import shutil
import tempfile
import time
import uuid
from collections import Counter
from typing import Any

from deltalake import DeltaTable

from benchmarks.push_path.harness import (
    MIN_INTERVAL_MS,
    Server,
    TelemetryFleet,
    admission_configurable,
    cpu_seconds,
    load_payloads,
    percentile,
    start_noop,
    start_sink,
)
from subscriptions import kafka_uuid_string

INTERVAL_MS = MIN_INTERVAL_MS


async def drive(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    fleet = TelemetryFleet(server.target, load_payloads(), args.instances, args.channels)
    try:
        await fleet.subscribe()
        cpu_before = (cpu_seconds(server.process.pid), time.process_time())
        started = time.perf_counter()
        await fleet.run_saturated(args.concurrency, args.warmup_s, args.measure_s)
        elapsed = time.perf_counter() - started
        cpu_after = (cpu_seconds(server.process.pid), time.process_time())
    finally:
        await fleet.close()
    stats = fleet.stats
    latencies = sorted(stats.window_latencies_s)
    return {
        "pushes_per_s": stats.window_completed / args.measure_s,
        "accepted_per_s": stats.window_accepted / args.measure_s,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "accepted": stats.accepted,
        "errors": {str(code): n for code, n in sorted(stats.errors.items())},
        "rpc_failures": dict(stats.rpc_failures),
        "throttled": stats.throttled,
        "server_cpu": (cpu_after[0] - cpu_before[0]) / elapsed,  # cores busy, warm-up included
        "client_cpu": (cpu_after[1] - cpu_before[1]) / elapsed,
        "accepted_by_instance": stats.accepted_by_instance,
    }


def verify_table(table_uri: str, accepted_by_instance: Counter[bytes]) -> dict[str, Any]:
    """Rows of the bronze table against acknowledged pushes, in total and per instance."""
    column = DeltaTable(table_uri).to_pyarrow_table(columns=["client_instance_id"]).column(0)
    rows = Counter(column.to_pylist())
    acked = Counter({kafka_uuid_string(uuid.UUID(bytes=k)): v for k, v in accepted_by_instance.items()})
    return {
        "rows": column.length(),
        "acked": acked.total(),
        "missing": (acked - rows).total(),  # acknowledged but not in the table
        "extra": (rows - acked).total(),  # in the table but never acknowledged
    }


def print_profile(path: Path, top: int) -> None:
    """The sink's hottest functions by cumulative and by own time (all threads merged)."""
    for key, title in (("cumulative", "cumulative time"), ("tottime", "own time")):
        out = io.StringIO()
        stats = pstats.Stats(str(path), stream=out)
        stats.sort_stats(key).print_stats(top)
        print(f"sink profile, top {top} by {title} ({path}):")
        text = out.getvalue()
        print(text[text.index("   ncalls") :] if "   ncalls" in text else text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=4000, help="simulated client instances")
    parser.add_argument("--channels", type=int, default=16, help="gRPC channels (connections)")
    parser.add_argument("--concurrency", type=int, default=1000, help="pushes in flight")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=15.0)
    parser.add_argument(
        "--sink-max-in-flight",
        type=int,
        help="the sink's server.max_concurrent_requests (default: twice --concurrency, so that its "
        "admission control never sheds the benchmark's load; 0: the sink's own default)",
    )
    parser.add_argument("--only", choices=("noop", "sink"), help="run one side only (no ratio)")
    parser.add_argument("--profile", type=Path, metavar="FILE", help="run the sink under cProfile")
    parser.add_argument("--profile-top", type=int, default=30)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="push-path-bench-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for side in ("noop", "sink"):
            if args.only not in (None, side):
                continue
            if side == "noop":
                server = start_noop(workdir, INTERVAL_MS)
            else:
                limit = 2 * args.concurrency if args.sink_max_in_flight is None else args.sink_max_in_flight
                server = start_sink(workdir, INTERVAL_MS, args.profile, max_in_flight=limit or None)
            try:
                results[side] = asyncio.run(drive(server, args))
            finally:
                code = server.stop()
            if code != 0:
                raise SystemExit(f"{server.name} exited {code}; log:\n{server.log_tail()}")
            if side == "sink":
                assert server.table_uri is not None
                results[side]["table"] = verify_table(
                    server.table_uri, results[side].pop("accepted_by_instance")
                )
            else:
                results[side].pop("accepted_by_instance")
        report(args, results)
        if args.profile is not None:
            print_profile(args.profile, args.profile_top)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    print(
        f"push path: {args.instances:,} instances over {args.channels} channels, {args.concurrency:,} "
        f"pushes in flight, interval.ms {INTERVAL_MS}, warm-up {args.warmup_s:g} s, "
        f"measured {args.measure_s:g} s"
    )
    if "sink" in results:
        limit = 2 * args.concurrency if args.sink_max_in_flight is None else args.sink_max_in_flight
        shown = f"{limit:,}" if limit and admission_configurable() else "the sink's default"
        print(f"  sink: server.max_concurrent_requests {shown}, Delta exporter at its default bounds")
    for side, label in (("noop", "no-op grpc.aio (ceiling)"), ("sink", "sink + Delta exporter")):
        if side not in results:
            continue
        r = results[side]
        errors = sum(r["errors"].values()) + sum(r["rpc_failures"].values())
        print(
            f"  {label:<26} {r['pushes_per_s']:>9,.0f} pushes/s   p50 {r['p50_ms']:>7.1f} ms   "
            f"p99 {r['p99_ms']:>7.1f} ms   accepted {r['accepted']:>9,}   errors {errors:,}"
            f"   cpu: server {r['server_cpu']:.2f}, client {r['client_cpu']:.2f}"
        )
        if errors:
            print(f"    error codes {r['errors']}, gRPC failures {r['rpc_failures']}")
    ratio = None
    if "noop" in results and "sink" in results:
        ratio = results["sink"]["accepted_per_s"] / results["noop"]["pushes_per_s"]
        print(f"  ratio (accepted pushes/s, sink / ceiling)   {ratio:.3f}   (goal >= 0.500)")
    if "sink" in results:
        t = results["sink"]["table"]
        verdict = "every acknowledged push landed once" if not (t["missing"] or t["extra"]) else "MISMATCH"
        print(
            f"  Delta table: {t['rows']:,} rows for {t['acked']:,} acknowledged pushes "
            f"(missing {t['missing']}, extra {t['extra']}): {verdict}"
        )
    print(
        json.dumps(
            {
                "benchmark": "push_path",
                "python": platform.python_version(),
                "instances": args.instances,
                "channels": args.channels,
                "concurrency": args.concurrency,
                "measure_s": args.measure_s,
                **results,
                "ratio": ratio,
            }
        )
    )
    if "sink" in results and (results["sink"]["table"]["missing"] or results["sink"]["table"]["extra"]):
        raise SystemExit("the Delta table does not match the acknowledged pushes")


if __name__ == "__main__":
    main()
