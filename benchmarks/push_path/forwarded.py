"""Benchmark of forwarded OTLP exports: many Kafka clients per request against one client per request.

A forwarder (a broker plugin, an OpenTelemetry Collector's batch processor) sends many clients'
telemetry in one OTLP export, each client in a ``ResourceMetrics`` of its own named by resource
labels; the sink lands one row per client per request (``ingest.security.attribution``). This measures what
that split costs. A fleet of ``--clients`` simulated librdkafka clients, each a ``ResourceMetrics``
taken from a real captured push (``tests/fixtures/librdkafka``, decompressed) with the forwarder
labels ``client_instance_id`` (Kafka's 22-character base64url form) and ``client_id`` appended,
drives one ``telemetry-sink serve`` (``harness.start_sink``: Delta exporter at its default bounds, in
a temporary directory) over OTLP gRPC (``MetricsService/Export`` on its gRPC port), in two phases:

(a) unbatched: one client per request;
(b) batched: ``--clients-per-request`` (50) clients per request, as a forwarder sends them.

Both are closed loops with the same ``--in-flight`` client payloads in flight (unbatched: that many
requests; batched: that many / 50), the same warm-up and the same measured window. Printed for each:
accepted data points/s in the window (points of exports answered OK, less any ``partial_success``
rejections), requests/s, latency, and the sink's CPU seconds per 1,000 accepted data points (its
process and its decoder processes, over the whole phase). Goal: batched / unbatched >= 0.8.

The two phases use different instance ids (the same payloads and labels otherwise), so that the
Delta table tells them apart: after the run the sink is stopped and the table must hold, for every
client, exactly one row per acknowledged request that carried it (rows counted by
``client_instance_id``).

Run: ``.venv/bin/python benchmarks/push_path/forwarded.py [--measure-s 15 --in-flight 1000 ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
import grpc.aio
from deltalake import DeltaTable
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from benchmarks.push_path.harness import (
    MAX_MESSAGE_BYTES,
    MIN_INTERVAL_MS,
    PayloadGroup,
    Server,
    cpu_seconds,
    load_payloads,
    percentile,
    start_sink,
)
from ingest.push.codec import decompress
from ingest.security.attribution import point_count
from ingest.wire import METRICS_SERVICE, parse_instance_id
from subscriptions import kafka_uuid_string
from tests.support.attacks import varint

EXPORT: Final = f"/{METRICS_SERVICE}/Export"
STREAMS_PER_CHANNEL: Final = 50  # under the sink's grpc_max_concurrent_streams (100)
_RESOURCE_METRICS_TAG: Final = b"\x0a"  # field 1, length-delimited: ExportMetricsServiceRequest's RMs


@dataclass(frozen=True)
class ClientPush:
    """One client's push as a forwarder sends it: a ``ResourceMetrics`` with the forwarder's labels,
    as the length-delimited field of an ``ExportMetricsServiceRequest``, and its data points."""

    field: bytes
    points: int


def labelled_pushes(group: PayloadGroup, instance_id: uuid.UUID, client_id: str) -> list[ClientPush]:
    """The captured pushes of ``group``, decompressed, each ``ResourceMetrics`` labelled as a broker
    plugin labels it (appended: ``client_instance_id`` in Kafka's form, ``client_id``)."""
    labels = (
        KeyValue(key="client_instance_id", value=AnyValue(string_value=kafka_uuid_string(instance_id))),
        KeyValue(key="client_id", value=AnyValue(string_value=client_id)),
    )
    pushes = []
    for payload in group.payloads:
        data = MetricsData.FromString(decompress(payload, group.compression_type, MAX_MESSAGE_BYTES))
        for resource_metrics in data.resource_metrics:
            resource_metrics.resource.attributes.extend(labels)
            encoded = resource_metrics.SerializeToString()
            pushes.append(
                ClientPush(
                    _RESOURCE_METRICS_TAG + varint(len(encoded)) + encoded, point_count(resource_metrics)
                )
            )
    return pushes


@dataclass(frozen=True)
class Export:
    """One prebuilt export request: its bytes, the clients it carries (by index) and its points."""

    body: bytes
    clients: tuple[int, ...]
    points: int


def build_exports(
    groups: Sequence[PayloadGroup], clients: int, per_request: int, namespace: str
) -> tuple[list[Export], list[uuid.UUID]]:
    """Every client's pushes grouped ``per_request`` clients to an export (round ``k`` of a chunk
    carries each of its clients' ``k``-th push), and the clients' instance ids (one namespace per
    phase, so the Delta table tells the phases apart)."""
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"forwarded/{namespace}/{n}") for n in range(clients)]
    pushes = [
        labelled_pushes(groups[n % len(groups)], ids[n], f"{groups[n % len(groups)].kind}-{n}")
        for n in range(clients)
    ]
    exports = []
    for start in range(0, clients, per_request):
        chunk = range(start, min(start + per_request, clients))
        for k in range(max(len(pushes[n]) for n in chunk)):
            parts = [pushes[n][k % len(pushes[n])] for n in chunk]
            exports.append(
                Export(b"".join(p.field for p in parts), tuple(chunk), sum(p.points for p in parts))
            )
    return exports, ids


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its descendants alive now (the sink and its decoder processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited meanwhile
            children.setdefault(parent, []).append(int(entry))
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += cpu_seconds(current)
        except (FileNotFoundError, ProcessLookupError):
            continue
        pending += children.get(current, [])
    return total


@dataclass
class PhaseStats:
    """Answers of one phase; ``window_*`` only those completed inside the measured window."""

    requests: int = 0
    accepted_requests: int = 0
    accepted_points: int = 0
    rejected_points: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # gRPC status -> count
    first_failure: str = ""
    accepted_by_client: Counter[int] = field(default_factory=Counter)
    window_requests: int = 0
    window_points: int = 0
    window_latencies_s: list[float] = field(default_factory=list)


async def run_phase(
    target: str, exports: Sequence[Export], in_flight: int, warmup_s: float, measure_s: float
) -> PhaseStats:
    """A closed loop of ``in_flight`` exports, each worker sending the next export in turn."""
    channels = [
        grpc.aio.insecure_channel(
            target,
            options=[
                ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        for _ in range(max(1, math.ceil(in_flight / STREAMS_PER_CHANNEL)))
    ]
    calls: list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = [
        channel.unary_unary(EXPORT) for channel in channels
    ]
    stats = PhaseStats()
    now = time.perf_counter()
    window = (now + warmup_s, now + warmup_s + measure_s)
    next_export = 0

    async def worker(call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]) -> None:
        nonlocal next_export
        while time.perf_counter() < window[1]:
            export = exports[next_export % len(exports)]
            next_export += 1
            started = time.perf_counter()
            stats.requests += 1
            try:
                answer = ExportMetricsServiceResponse.FromString(await call(export.body))
            except grpc.aio.AioRpcError as exc:
                stats.failures[exc.code().name] += 1
                stats.first_failure = stats.first_failure or f"{exc.code().name}: {exc.details()}"
                continue
            done = time.perf_counter()
            points = export.points - answer.partial_success.rejected_data_points
            stats.accepted_requests += 1
            stats.accepted_points += points
            stats.rejected_points += answer.partial_success.rejected_data_points
            stats.accepted_by_client.update(export.clients)
            if window[0] <= done < window[1]:
                stats.window_requests += 1
                stats.window_points += points
                stats.window_latencies_s.append(done - started)

    try:
        await asyncio.gather(*(worker(calls[n % len(calls)]) for n in range(in_flight)))
    finally:
        for channel in channels:
            await channel.close()
    return stats


def phase_result(stats: PhaseStats, cpu_s: float, elapsed_s: float, measure_s: float) -> dict[str, Any]:
    latencies = sorted(stats.window_latencies_s)
    return {
        "points_per_s": stats.window_points / measure_s,
        "requests_per_s": stats.window_requests / measure_s,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "accepted_requests": stats.accepted_requests,
        "accepted_points": stats.accepted_points,
        "rejected_points": stats.rejected_points,
        "failures": dict(stats.failures),
        "first_failure": stats.first_failure,
        "sink_cores": cpu_s / elapsed_s,  # warm-up included
        "sink_cpu_s_per_1000_points": 1000 * cpu_s / stats.accepted_points if stats.accepted_points else None,
    }


def verify_table(table_uri: str, expected: dict[uuid.UUID, int]) -> dict[str, int]:
    """Rows of the bronze table per client instance against the acknowledged requests that carried
    each client (ids read in either form the table may hold)."""
    column = DeltaTable(table_uri).to_pyarrow_table(columns=["client_instance_id"]).column(0)
    rows: Counter[uuid.UUID] = Counter()
    for value in column.to_pylist():
        parsed = parse_instance_id(value)
        if parsed is not None:
            rows[parsed] += 1
    wanted = Counter(expected)
    phase_rows = Counter({k: v for k, v in rows.items() if k in expected})
    return {
        "rows": phase_rows.total(),
        "expected": wanted.total(),
        "missing": (wanted - phase_rows).total(),  # acknowledged but not in the table
        "extra": (phase_rows - wanted).total(),  # in the table but never acknowledged
        "clients_off": sum(1 for k in expected if rows[k] != expected[k]),
    }


PHASES: Final = ("unbatched", "batched")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=2000, help="simulated clients (each phase)")
    parser.add_argument("--clients-per-request", type=int, default=50, help="clients per batched export")
    parser.add_argument(
        "--in-flight", type=int, default=1000, help="client payloads in flight (requests x clients each)"
    )
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=15.0)
    args = parser.parse_args()
    if args.in_flight < args.clients_per_request:
        parser.error("--in-flight must be at least --clients-per-request")
    groups = load_payloads()
    per_request = {"unbatched": 1, "batched": args.clients_per_request}
    built = {phase: build_exports(groups, args.clients, per_request[phase], phase) for phase in PHASES}
    requests_in_flight = {phase: args.in_flight // per_request[phase] for phase in PHASES}
    workdir = Path(tempfile.mkdtemp(prefix="forwarded-bench-"))
    results: dict[str, dict[str, Any]] = {}
    acked: dict[str, dict[uuid.UUID, int]] = {}
    try:
        server: Server = start_sink(workdir, MIN_INTERVAL_MS, max_in_flight=2 * args.in_flight)
        try:
            for phase in PHASES:
                exports, ids = built[phase]
                cpu_before, started = tree_cpu_seconds(server.process.pid), time.perf_counter()
                stats = asyncio.run(
                    run_phase(
                        server.target, exports, requests_in_flight[phase], args.warmup_s, args.measure_s
                    )
                )
                elapsed = time.perf_counter() - started
                cpu = tree_cpu_seconds(server.process.pid) - cpu_before
                results[phase] = phase_result(stats, cpu, elapsed, args.measure_s)
                acked[phase] = {ids[n]: count for n, count in stats.accepted_by_client.items()}
        finally:
            code = server.stop()
        if code != 0:
            raise SystemExit(f"sink exited {code}; log:\n{server.log_tail()}")
        assert server.table_uri is not None
        for phase in PHASES:
            results[phase]["table"] = verify_table(server.table_uri, acked[phase])
        report(args, requests_in_flight, groups, built, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(
    args: argparse.Namespace,
    requests_in_flight: dict[str, int],
    groups: Sequence[PayloadGroup],
    built: dict[str, tuple[list[Export], list[uuid.UUID]]],
    results: dict[str, dict[str, Any]],
) -> None:
    batched = built["batched"][0]
    print(
        f"forwarded OTLP: {args.clients:,} clients (librdkafka captures: "
        f"{', '.join(sorted({g.kind for g in groups}))}), {args.in_flight:,} client payloads in flight, "
        f"warm-up {args.warmup_s:g} s, measured {args.measure_s:g} s, OTLP gRPC to telemetry-sink serve"
    )
    print(
        f"  batched exports: {args.clients_per_request} clients each, "
        f"{sum(len(e.body) for e in batched) / len(batched):,.0f} B and "
        f"{sum(e.points for e in batched) / len(batched):,.0f} data points on average"
    )
    for phase in PHASES:
        r = results[phase]
        t = r["table"]
        per_1000 = r["sink_cpu_s_per_1000_points"]
        print(
            f"  {phase:<9} ({requests_in_flight[phase]:>4} requests in flight) "
            f"{r['points_per_s']:>9,.0f} points/s  {r['requests_per_s']:>7,.0f} requests/s  "
            f"p50 {r['p50_ms']:>6.1f} ms  p99 {r['p99_ms']:>6.1f} ms  "
            f"sink {r['sink_cores']:.2f} cores, "
            f"{'n/a' if per_1000 is None else f'{per_1000 * 1000:.1f}'} ms CPU per 1,000 points  "
            f"failures {r['failures'] or 0}"
        )
        if r["first_failure"]:
            print(f"    first failure: {r['first_failure']}")
        verdict = "one row per client per request" if not (t["missing"] or t["extra"]) else "MISMATCH"
        print(
            f"    Delta: {t['rows']:,} rows for {t['expected']:,} (client, acknowledged request) pairs "
            f"(missing {t['missing']}, extra {t['extra']}, clients off {t['clients_off']}): {verdict}"
        )
    ratio = results["batched"]["points_per_s"] / results["unbatched"]["points_per_s"]
    cost = [results[p]["sink_cpu_s_per_1000_points"] for p in PHASES]
    cost_ratio = cost[1] / cost[0] if cost[0] and cost[1] else None
    print(f"  ratio (accepted points/s, batched / unbatched)   {ratio:.3f}   (goal >= 0.800)")
    if cost_ratio is not None:
        print(f"  sink CPU per point, batched / unbatched           {cost_ratio:.3f}")
    print(
        json.dumps(
            {
                "benchmark": "push_path.forwarded",
                "python": platform.python_version(),
                "clients": args.clients,
                "clients_per_request": args.clients_per_request,
                "in_flight": args.in_flight,
                "measure_s": args.measure_s,
                **results,
                "ratio": ratio,
                "cpu_per_point_ratio": cost_ratio,
            }
        )
    )
    if any(results[p]["table"]["missing"] or results[p]["table"]["extra"] for p in PHASES):
        raise SystemExit("the Delta table does not hold one row per client per acknowledged request")


if __name__ == "__main__":
    main()
