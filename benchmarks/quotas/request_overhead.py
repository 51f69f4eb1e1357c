"""Benchmark of the request quota's cost on the push path (issue 21): what metering a push's handler
time and recording it into the request quota costs, against the CPU of the whole push, in one run.

The push path is the real ``TelemetryPipeline`` (the subscription core, the quota engine with a
``request_percentage`` quota on the pushing entity, the codec decoding a captured librdkafka push of
about 2 KB inline, an in-memory exporter), driven in-process: ``--pushes`` pushes from ``--instances``
client instances, each Get once first, the clock advanced past the push interval before each push so
every push is accepted. The overhead is measured on its own over as many pushes: a ``metering()``
context with one ``waiting()`` in it (a push pauses its meter once, for the commit) around nothing,
plus ``record_request_time`` for the same entities, plus what the Kafka listener adds for a push
(AUD-D9): the six network-clock readings around parsing, encoding and writing and
``record_network_time``. Both are CPU time of this process. The ratio is overhead / push; the goal is
< 0.05.

Run: ``make bench`` or ``.venv/bin/python benchmarks/quotas/request_overhead.py [--pushes N]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import gc
import json
import platform
import time
from uuid import UUID

from exporters import InMemoryExporter
from ingest.handler_time import metering, waiting
from ingest.push.pipeline import TelemetryPipeline
from quotas import ClientQuotaEntity, QuotaConfig, create_quota_managers
from subscriptions import (
    ClientContext,
    ClientMetricsManager,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    SubscriptionStore,
)

PAYLOAD = (
    Path(__file__).resolve().parents[2]
    / "tests"
    / "fixtures"
    / "librdkafka"
    / "librdkafka-producer-push001-zstd.bin"
)
ZSTD = 4


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def now_ms(self) -> int:
        return self.ms

    async def wait(self, event: asyncio.Event, timeout_ms: float | None) -> bool:  # unused here
        return event.is_set()


async def _pushes(instances: int, pushes: int) -> tuple[float, TelemetryPipeline, list[ClientContext]]:
    clock = _Clock()
    store = SubscriptionStore()
    store.update("kafka", {"metrics": "org.apache.kafka.", "interval.ms": 100})
    manager = ClientMetricsManager(store)
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(ClientQuotaEntity(user="bench"), "request_percentage", 10_000)  # recorded, never throttling
    exporter = InMemoryExporter()
    pipeline = TelemetryPipeline(manager, quotas, exporter, clock=clock)
    clients = [ClientContext(client_id=f"c-{n}", principal="User:bench") for n in range(instances)]
    ids = []
    for client in clients:
        answer = await pipeline.get_subscriptions(GetTelemetrySubscriptionsRequest(UUID(int=0)), client)
        ids.append((answer.client_instance_id, answer.subscription_id))
    payload = PAYLOAD.read_bytes()
    gc.collect()
    started = time.process_time()
    for n in range(pushes):
        clock.ms += 101 if n % instances == 0 else 0
        instance_id, subscription_id = ids[n % instances]
        request = PushTelemetryRequest(instance_id, subscription_id, False, ZSTD, payload)
        response = await pipeline.push(request, clients[n % instances])
        if response.error_code != Errors.NONE:
            raise SystemExit(f"push {n} answered {Errors(response.error_code).name}")
        exporter.pushes.clear()
    return time.process_time() - started, pipeline, clients


def _overhead(pipeline: TelemetryPipeline, clients: list[ClientContext], pushes: int) -> float:
    request = pipeline.quotas.request
    now = 1_700_000_000_000
    clock = time.perf_counter_ns
    gc.collect()
    started = time.process_time()
    for n in range(pushes):
        client = clients[n % len(clients)]
        parsing = clock()  # the Kafka listener times parsing, encoding and writing
        network_ns = clock() - parsing
        with metering() as meter, waiting():  # a push pauses once, for its commit
            pass
        request.record_request_time(client.principal, client.client_id or "", meter.total_ns(), now)
        encoding = clock()
        network_ns += clock() - encoding
        writing = clock()
        request.record_network_time(
            client.principal, client.client_id or "", network_ns + clock() - writing, now
        )
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pushes", type=int, default=50_000)
    parser.add_argument("--instances", type=int, default=1000)
    args = parser.parse_args()
    push_s, pipeline, clients = asyncio.run(_pushes(args.instances, args.pushes))
    overhead_s = _overhead(pipeline, clients, args.pushes)
    ratio = overhead_s / push_s
    print(
        f"request quota on the push path: {args.pushes:,} pushes from {args.instances:,} instances\n"
        f"  push (whole pipeline, CPU)         {push_s / args.pushes * 1e6:8.1f} us\n"
        f"  request-quota metering + records   {overhead_s / args.pushes * 1e6:8.1f} us\n"
        f"  ratio (overhead / push)            {ratio:8.3f}   (goal < 0.05)"
    )
    print(
        json.dumps(
            {
                "benchmark": "request_quota_overhead",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "date": time.strftime("%Y-%m-%d"),
                "pushes": args.pushes,
                "push_us": push_s / args.pushes * 1e6,
                "overhead_us": overhead_s / args.pushes * 1e6,
                "ratio": ratio,
            }
        )
    )


if __name__ == "__main__":
    main()
