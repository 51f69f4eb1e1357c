"""Benchmark of the quota engine (issue 3).

``ClientQuotaManager.record_and_get_throttle_time_ms`` across 10,000 (user, client-id) entities with
quotas at two levels (``<user, client>`` for half of them, ``<default client>`` for the rest, so the
8-level precedence walk is in use rather than a single-level fast path), against the ceiling measured
in the same run: a bare dict update of the same per-entity counters. Prints the ratio; the goal is
>= 0.1. About one record in ten is over its quota and answered with a throttle time.

Run: ``make bench`` or ``.venv/bin/python benchmarks/quotas/bench.py [--entities N --rounds R]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import time

from quotas import DEFAULT, ClientQuotaEntity, QuotaConfig, create_quota_managers

T0 = 1_700_000_000_000
SIZES = (500.0, 1000.0, 2000.0, 4000.0, 8000.0)


class _Clock:
    def now_ms(self) -> int:
        return T0

    async def wait(self, event: object, timeout_ms: int | None) -> bool:  # pragma: no cover
        raise NotImplementedError


def run(entities: int, rounds: int, period_ms: int, limit: float) -> dict[str, float]:
    """Each entity records once per ``period_ms`` of simulated time against a quota of ``limit``."""
    rng = random.Random(3)
    records_per_s = 1000 / period_ms  # how often each entity records
    managers = create_quota_managers(QuotaConfig(), _Clock())
    produce = managers.produce
    ops = []
    for i in range(entities):
        user, client = f"user-{i % 500}", f"client-{i}"
        if i % 2 == 0:
            managers.alter(ClientQuotaEntity(user, client), "producer_byte_rate", limit)
        ops.append((f"User:{user}", client, float(20_000 if rng.random() < 0.1 else rng.choice(SIZES))))
    managers.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", limit)

    record = produce.record_and_get_throttle_time_ms
    warm_rounds = max(1, -(-12_000 // period_ms))  # a full quota window of history before timing
    tick = 0
    for _ in range(warm_rounds):
        for principal, client, value in ops:
            tick += 1
            record(principal, client, value, T0 + tick * period_ms // entities)
    start_tick = tick
    gc.collect()
    throttled = 0
    start = time.perf_counter()
    for _ in range(rounds):
        for principal, client, value in ops:
            tick += 1
            throttled += record(principal, client, value, T0 + tick * period_ms // entities) > 0
    engine_s = time.perf_counter() - start

    counters: dict[tuple[str, str], float] = {}
    gc.collect()
    start = time.perf_counter()
    tick = start_tick
    for _ in range(rounds):
        for principal, client, value in ops:
            tick += 1
            now = T0 + tick * period_ms // entities  # noqa: F841  (the same work as the engine's loop)
            key = (principal, client)
            counters[key] = counters.get(key, 0.0) + value
    ceiling_s = time.perf_counter() - start

    n = entities * rounds
    return {
        "entities": entities,
        "records_per_entity_per_s": records_per_s,
        "record_ops_per_s": n / engine_s,
        "ceiling_ops_per_s": n / ceiling_s,
        "ratio": ceiling_s / engine_s,
        "throttled_fraction": throttled / n,
        "sensors": len(managers.metrics),
    }


# pattern -> (how often each entity records, the quota that only the one entity in ten sending
# 20,000 bytes per record exceeds)
PATTERNS = {
    # a telemetry fleet: every client pushes once per 30 s interval, longer than the 11 s quota
    # window, so each record finds all its samples expired (a lone record reads as value / 10 s)
    "telemetry (every 30 s)": (30_000, 1500.0),
    # the worst case: two records per window, so nearly every record advances and purges the ring
    "sparse (every 10 s)": (10_000, 3000.0),
    # a busy client: ten records per one-second sample
    "dense (every 100 ms)": (100, 120_000.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    for pattern, (period_ms, limit) in PATTERNS.items():
        result = run(args.entities, args.rounds, period_ms, limit)
        per_s = result["records_per_entity_per_s"]
        print(f"{pattern}: {args.entities:,} entities with quotas at two levels, {per_s:g} records/s each")
        print(f"  quota engine              {result['record_ops_per_s']:>12,.0f} ops/s")
        print(f"  ceiling: dict update      {result['ceiling_ops_per_s']:>12,.0f} ops/s")
        print(f"  ratio                     {result['ratio']:>12.3f}   (goal >= 0.100)")
        print(f"  throttled records         {result['throttled_fraction']:>12.1%}")
        print(
            json.dumps(
                {"benchmark": "quotas", "pattern": pattern, "python": platform.python_version(), **result}
            )
        )


if __name__ == "__main__":
    main()
