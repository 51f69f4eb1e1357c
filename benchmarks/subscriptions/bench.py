"""Benchmark of the subscription core (issue 2).

1. ``process_push`` operations per second with a warm cache of 100,000 instances, against the ceiling
   measured in the same run: a bare dict lookup of the instance id plus CRC32C of the same rendered
   subscription (the two things a push cannot avoid). Prints the ratio; the goal is >= 0.2.
2. Bytes per cached instance at 1,000,000 instances (tracemalloc), each with its own client context
   (distinct source address and port). Goal: < 1 KiB.

Run: ``make bench`` or ``.venv/bin/python benchmarks/subscriptions/bench.py [--instances N ...]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import time
import tracemalloc
from uuid import UUID

from subscriptions import (
    AcceptedPush,
    ClientContext,
    ClientMetricsConfig,
    ClientMetricsManager,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    SubscriptionStore,
    crc32c,
)
from subscriptions.subscription_id import render_subscription

T0 = 1_700_000_000_000
INTERVAL_MS = 30_000
PAYLOAD = b"\x0a" * 512


def _store() -> SubscriptionStore:
    store = SubscriptionStore()
    store.update("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": INTERVAL_MS})
    store.update("consumers", {"metrics": "org.apache.kafka.consumer.", "interval.ms": INTERVAL_MS})
    return store


def _context(rng: random.Random, n: int) -> ClientContext:
    return ClientContext(
        client_id=f"client-{n % 1000}",
        client_software_name="librdkafka",
        client_software_version="2.16.0",
        client_source_address=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
        client_source_port=1024 + rng.randrange(64000),
    )


def _uuid(rng: random.Random) -> UUID:
    return UUID(int=rng.getrandbits(128), version=4)


def bench_push(instances: int, rounds: int) -> dict[str, float]:
    rng = random.Random(42)
    manager = ClientMetricsManager(_store(), ClientMetricsConfig(cache_max_size=instances))
    requests = []
    instance_ids = []
    for n in range(instances):
        instance_id = _uuid(rng)
        response = manager.process_get(GetTelemetrySubscriptionsRequest(instance_id), _context(rng, n), T0)
        requests.append(PushTelemetryRequest(instance_id, response.subscription_id, False, 4, PAYLOAD))
        instance_ids.append(instance_id)
    context = _context(rng, 0)
    resolution = next(iter(manager.instances())).resolution
    rendered = render_subscription(resolution.requested_metrics, resolution.push_interval_ms).encode()
    by_uuid = dict(zip(instance_ids, requests, strict=True))
    by_int = {i.int: r for i, r in zip(instance_ids, requests, strict=True)}

    process_push = manager.process_push
    gc.collect()
    start = time.perf_counter()
    accepted = 0
    for r in range(rounds):
        now = T0 + 1 + r * INTERVAL_MS
        for request in requests:
            accepted += type(process_push(request, context, now)) is AcceptedPush
    push_s = time.perf_counter() - start
    assert accepted == instances * rounds, "every push in the benchmark must be accepted"

    # The ceiling, two ways: a dict keyed by the request's UUID, and (stricter, since uuid.UUID
    # hashes in Python code) a dict keyed by the UUID's int, as the instance cache is.
    gc.collect()
    start = time.perf_counter()
    for _ in range(rounds):
        for instance_id in instance_ids:
            by_uuid[instance_id]
            crc32c(rendered)
    ceiling_uuid_s = time.perf_counter() - start
    gc.collect()
    start = time.perf_counter()
    for _ in range(rounds):
        for instance_id in instance_ids:
            by_int[instance_id.int]
            crc32c(rendered)
    ceiling_int_s = time.perf_counter() - start

    ops = instances * rounds
    return {
        "process_push_ops_per_s": ops / push_s,
        "ceiling_uuid_key_ops_per_s": ops / ceiling_uuid_s,
        "ceiling_int_key_ops_per_s": ops / ceiling_int_s,
        "ratio_uuid_key": ceiling_uuid_s / push_s,
        "ratio_int_key": ceiling_int_s / push_s,
    }


def bench_memory(instances: int) -> dict[str, float]:
    rng = random.Random(7)
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    manager = ClientMetricsManager(_store(), ClientMetricsConfig(cache_max_size=instances))
    for n in range(instances):
        manager.process_get(GetTelemetrySubscriptionsRequest(_uuid(rng)), _context(rng, n), T0)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    assert manager.instance_count == instances
    return {"instances": instances, "bytes_per_instance": used / instances}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-instances", type=int, default=1_000_000)
    args = parser.parse_args()

    push = bench_push(args.instances, args.rounds)
    print(f"process_push, warm cache of {args.instances:,} instances, {args.rounds} rounds:")
    print(f"  process_push                     {push['process_push_ops_per_s']:>12,.0f} ops/s")
    print(f"  ceiling: dict[UUID] + CRC32C     {push['ceiling_uuid_key_ops_per_s']:>12,.0f} ops/s")
    print(f"  ceiling: dict[UUID.int] + CRC32C {push['ceiling_int_key_ops_per_s']:>12,.0f} ops/s")
    print(f"  ratio vs dict[UUID] ceiling      {push['ratio_uuid_key']:>12.3f}   (goal >= 0.200)")
    print(f"  ratio vs dict[UUID.int] ceiling  {push['ratio_int_key']:>12.3f}   (goal >= 0.200)")
    memory = bench_memory(args.memory_instances)
    print(f"memory at {args.memory_instances:,} cached instances (tracemalloc):")
    print(f"  bytes per instance               {memory['bytes_per_instance']:>12,.0f}   (goal < 1024)")
    print(
        json.dumps(
            {
                "benchmark": "subscriptions",
                "python": platform.python_version(),
                "machine": platform.machine(),
                **push,
                **memory,
            }
        )
    )


if __name__ == "__main__":
    main()
