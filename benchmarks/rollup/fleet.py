"""The rollup benchmark's bronze data: a fleet of librdkafka clients pushing on schedule, landed with
the real ``DeltaLandingExporter``.

Each instance is a producer, a consumer or an AdminClient (which librdkafka reports as a producer), as
``telemetry-sink loadgen`` simulates them (``loadgen``: ``client_identity``,
``ClientMetricsModel``, ``build_metrics_data``): librdkafka 2.16's metric sets, one ``Metric`` per data
point, per-broker metrics with a ``node.id`` attribute (1-3 brokers, consumers also their bootstrap
connection as node -1), a consumer's ``group_id`` or some producers' ``transactional_id`` as resource
attributes. Half the instances push delta sums (start time: the previous collection), the others
cumulative ones (start time: the client's start); one instance in 50 restarts halfway (new values, new
start time). Instances push every ``interval_ms`` at a phase of their own (plus up to 200 ms of
jitter), and the pushes are landed in the order they arrive, in commits of ``commit_rows`` pushes.
Principals are ``User:team-NN``, and each push counts against its user's ``<user, default client-id>``
quota entity, as the sink records it.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from exporters import DeltaLandingExporter, ExportResult, PushContext, TelemetryPush
from loadgen import (
    CLIENT_KINDS,
    SOFTWARE_NAME,
    SOFTWARE_VERSION,
    ClientIdentity,
    ClientMetricsModel,
    build_metrics_data,
    client_identity,
)

__all__ = ["START_MS", "FleetSpec", "fleet_pushes", "land_fleet"]

START_MS = 1_795_300_000_000
"""2026-11-21T22:26:40Z"""
_NS = 1_000_000
_KINDS = (
    "producer",
    "consumer",
    "producer",
    "consumer",
    "producer",
    "consumer",
    "producer",
    "consumer",
    "admin",
)
"""Four producers, four consumers and an AdminClient in every nine instances."""


@dataclass(frozen=True)
class FleetSpec:
    instances: int
    pushes: int
    interval_ms: int = 30_000
    users: int = 16
    seed: int = 7
    start_ms: int = START_MS
    first_index: int = 0
    """The first instance's index (its id, address and kind follow from it): a fleet that joins
    another starts after the other's last instance."""


class _Instance:
    """One client instance: who it is and the state of its metrics."""

    def __init__(self, index: int, spec: FleetSpec, rng: random.Random, quota_tags: dict[str, str]) -> None:
        kind = _KINDS[index % len(_KINDS)]
        metrics_kind = "producer" if kind == "admin" else kind
        identity = client_identity(index, metrics_kind, prefix="bench")
        if kind == "admin":
            identity = identity._replace(client_id=f"bench-admin-{index:05d}", resource_attributes={})
        self.identity: ClientIdentity = identity
        self.rng = rng
        self.delta = index % 2 == 0
        self.restarts = index % 50 == 7
        self.phase_ms = rng.randrange(spec.interval_ms)
        self.started_ms = spec.start_ms + self.phase_ms - rng.randrange(60_000, 3_600_000)
        self.last_ms = self.started_ms
        self.model = self._model()
        self.instance_id = uuid.UUID(int=(index + 1) * 0x9E3779B97F4A7C15 % (1 << 128))
        self.address = f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"
        self.port = 40_000 + index % 20_000
        self.quota_tags = quota_tags  # shared by the user's instances, as the sink's quota sensors are

    def _model(self) -> ClientMetricsModel:
        kind = self.identity.kind
        return ClientMetricsModel(CLIENT_KINDS[kind], self.rng, bootstrap_node=kind == "consumer")

    def push(self, at_ms: int, restart: bool) -> TelemetryPush:
        if restart:
            self.model, self.started_ms = self._model(), at_ms - self.rng.randrange(1_000, 20_000)
            self.last_ms = self.started_ms
        data = build_metrics_data(
            self.model.collect(delta=self.delta),
            resource_attributes=self.identity.resource_attributes,
            scope_name=self.identity.scope_name,
            start_time_unix_nano=(self.last_ms if self.delta else self.started_ms) * _NS,
            time_unix_nano=at_ms * _NS,
            delta_temporality=self.delta,
        )
        self.last_ms = at_ms
        context = PushContext(
            client_instance_id=self.instance_id,
            subscription_id=1,
            received_ms=at_ms + self.rng.randrange(1, 20),
            principal=f"User:{self.quota_tags['user']}",
            client_id=self.identity.client_id,
            client_software_name=SOFTWARE_NAME,
            client_software_version=SOFTWARE_VERSION,
            client_source_address=self.address,
            client_source_port=self.port,
            quota_tags=self.quota_tags,
        )
        return TelemetryPush(context, data.SerializeToString())


def fleet_pushes(spec: FleetSpec, rounds: range | None = None) -> Iterator[TelemetryPush]:
    """Every push of the fleet (of the push ``rounds`` only, the others made and dropped, so that the
    series go on as if they had been landed), in the order they arrive."""
    rng = random.Random(spec.seed)
    tags = [{"user": f"team-{u:02d}", "client-id": ""} for u in range(spec.users)]
    instances = [
        _Instance(i, spec, random.Random(rng.getrandbits(64)), tags[i % spec.users])
        for i in range(spec.first_index, spec.first_index + spec.instances)
    ]
    instances.sort(key=lambda instance: instance.phase_ms)
    for k in range(spec.pushes):
        for instance in instances:
            at = spec.start_ms + k * spec.interval_ms + instance.phase_ms + instance.rng.randrange(200)
            push = instance.push(at, restart=instance.restarts and k == spec.pushes // 2)
            if rounds is None or k in rounds:
                yield push


async def _land(
    spec: FleetSpec,
    data_root: str,
    commit_rows: int,
    payloads: list[bytes],
    *,
    rounds: range | None,
    replicas: int,
) -> int:
    exporters = [
        DeltaLandingExporter(
            f"{data_root}/telemetry_pushes/r{k + 1}", writer_id=f"bench-r{k + 1}", max_batch_rows=commit_rows
        )
        for k in range(replicas)
    ]
    for exporter in exporters:
        await exporter.start()
    try:
        pushes = fleet_pushes(spec, rounds)
        while chunk := list(islice(pushes, commit_rows * replicas)):
            results = await asyncio.gather(
                *(exporters[p.context.client_instance_id.int % replicas].export(p) for p in chunk)
            )
            if set(results) != {ExportResult.SUCCESS}:
                raise RuntimeError(f"landing failed: {sorted(r.name for r in set(results))}")
            payloads.extend(p.payload for p in chunk)
    finally:
        for exporter in exporters:
            await exporter.shutdown()
    return sum(exporter.commits for exporter in exporters)


def land_fleet(
    spec: FleetSpec, data_root: str, commit_rows: int = 5000, rounds: range | None = None, replicas: int = 1
) -> tuple[list[bytes], int]:
    """Land the fleet's pushes (of push ``rounds`` only: ``range(10, 12)`` is every instance's 11th and
    12th push) in ``<data_root>/telemetry_pushes/r1`` .. ``r<replicas>`` (a bronze shard per sink
    replica, each instance's pushes on one, as the Service's client affinity keeps them) in commits
    of ``commit_rows`` pushes; the payloads in landing order, and the number of commits."""
    payloads: list[bytes] = []
    commits = asyncio.run(_land(spec, data_root, commit_rows, payloads, rounds=rounds, replicas=replicas))
    return payloads, commits
