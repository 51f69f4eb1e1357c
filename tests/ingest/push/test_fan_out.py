"""One OTLP export, many clients (T3-7, T3-6): ``TelemetryPipeline.export_otlp`` with the real core,
quota engine, decoders and instance owners, and an in-memory exporter. The clients one export may
carry are capped by its sender, the work per client yields to the event loop in slices, and no export
can take another principal's instance."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from exporters import ExportResult, InMemoryExporter, TelemetryPush
from ingest.limits import RequestLimits
from ingest.push.pipeline import FAN_OUT_SLICE, TelemetryPipeline
from ingest.security.authentication import Authenticator
from ingest.security.instance_owners import InstanceOwners
from subscriptions import ClientContext, Errors
from tests.support import attacks
from tests.support.clock import FakeClock
from tests.support.otlp import resource_payload
from tests.support.pipeline import kafka_pipeline

ANONYMOUS = ClientContext(principal="User:ANONYMOUS", client_source_address="127.0.0.1")
FORWARDER = ClientContext(principal="User:collector", client_source_address="10.0.0.9")
VICTIM = ClientContext(principal="User:victim", client_source_address="10.0.0.1")
MALLORY = ClientContext(principal="User:mallory", client_source_address="10.0.0.2")
LIMITS = RequestLimits(max_clients_per_export=300, max_clients_per_forwarder_export=700)


class _Ticker:
    """A task that counts the loop's turns: what another request would get while an export runs."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    def __enter__(self) -> _Ticker:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


class _Recording(InMemoryExporter):
    """Records the ticker's count as each export starts."""

    def __init__(self, turns: Callable[[], int]) -> None:
        super().__init__()
        self.turns = turns
        self.seen: list[int] = []

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.seen.append(self.turns())
        return await super().export(push)


class _RecordingOwners:
    """``InstanceOwners`` whose claims record the ticker's count."""

    def __init__(self, owners: InstanceOwners, turns: Callable[[], int]) -> None:
        self.owners, self.turns, self.seen = owners, turns, list[int]()

    def claim(self, *args: Any) -> bool:
        self.seen.append(self.turns())
        return self.owners.claim(*args)


@pytest.fixture
async def pipelines() -> AsyncIterator[Callable[..., TelemetryPipeline]]:
    made: list[TelemetryPipeline] = []

    def make(exporter: InMemoryExporter | None = None) -> TelemetryPipeline:
        authenticator = Authenticator(trusted_forwarders=[FORWARDER.principal])
        pipeline = kafka_pipeline(
            FakeClock(), exporter or InMemoryExporter(), authenticator=authenticator, limits=LIMITS
        )
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:
        await pipeline.close()


def _instances(exporter: InMemoryExporter) -> set[uuid.UUID]:
    return {p.context.client_instance_id for p in exporter.pushes}


@pytest.mark.parametrize(
    ("sender", "clients", "lands"),
    [
        (ANONYMOUS, 300, True),
        (ANONYMOUS, 301, False),
        (MALLORY, 301, False),  # authenticated is not trusted
        (FORWARDER, 700, True),
        (FORWARDER, 701, False),
    ],
)
async def test_T3_7_the_clients_of_one_export_are_capped_by_its_sender(
    pipelines: Callable[..., TelemetryPipeline], sender: ClientContext, clients: int, lands: bool
) -> None:
    pipeline = pipelines()
    exporter = pipeline.exporter
    assert isinstance(exporter, InMemoryExporter)
    outcome = await pipeline.export_otlp(attacks.fan_out_points(clients), 0, sender)
    if lands:
        assert outcome.error is Errors.NONE, outcome
        assert _instances(exporter) == set(attacks.fan_out_ids(clients))
    else:
        assert outcome.error is Errors.TELEMETRY_TOO_LARGE
        limit = LIMITS.max_clients_per_forwarder_export if sender is FORWARDER else 300
        assert outcome.message.startswith(f"more than {limit} clients in one export")
        assert exporter.pushes == []
        assert len(pipeline.instance_owners) == 0  # refused before any client was resolved


async def test_T3_7_the_clients_of_an_export_are_resolved_and_exported_in_slices_that_yield(
    pipelines: Callable[..., TelemetryPipeline],
) -> None:
    """Between two slices of ``FAN_OUT_SLICE`` clients the loop runs something else, both while the
    clients are resolved (each claims its instance) and while their exports start."""
    with _Ticker() as ticker:
        exporter = _Recording(lambda: ticker.turns)
        pipeline = pipelines(exporter)
        owners = _RecordingOwners(pipeline.instance_owners, lambda: ticker.turns)
        pipeline.instance_owners = owners  # type: ignore[assignment]
        outcome = await pipeline.export_otlp(attacks.fan_out_points(300), 0, ANONYMOUS)
    assert outcome.error is Errors.NONE
    slices = -(-300 // FAN_OUT_SLICE)
    for seen in (owners.seen, exporter.seen):
        assert len(seen) == 300
        assert len(set(seen)) == slices  # one turn of the loop per slice, and never within one
        assert [seen.count(turn) for turn in sorted(set(seen))] == [FAN_OUT_SLICE] * (slices - 1) + [
            300 - FAN_OUT_SLICE * (slices - 1)
        ]


async def test_T3_6_an_export_of_many_ids_does_not_take_another_principals_instance(
    pipelines: Callable[..., TelemetryPipeline],
) -> None:
    """Mallory names more new ids than her share of the ownership table, in exports under the cap; the
    victim's instance is still the victim's: mallory's export naming it lands all but that client."""
    pipeline = pipelines()
    exporter = pipeline.exporter
    assert isinstance(exporter, InMemoryExporter)
    pipeline.instance_owners = InstanceOwners(pipeline.manager, 600, 1000)  # small, as the defaults are
    victims = attacks.fan_out_ids(1, seed=0x51C)[0]
    assert (await pipeline.export_otlp(resource_payload(), 0, VICTIM, str(victims))).error is Errors.NONE
    for seed in range(1, 5):  # 1,200 ids: twice her share, more than the table
        outcome = await pipeline.export_otlp(attacks.fan_out_points(300, seed=seed), 0, MALLORY)
        assert outcome.error is Errors.NONE
    assert pipeline.instance_owners.held_by(MALLORY.principal) == 600
    assert pipeline.instance_owners.owner_of(victims) == VICTIM.principal
    refused = await pipeline.export_otlp(resource_payload(), 0, MALLORY, str(victims))
    assert refused.error is Errors.CLUSTER_AUTHORIZATION_FAILED
    export = MetricsData.FromString(attacks.fan_out_points(3, seed=9))
    points = export.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points
    points[1].attributes[0].value.string_value = str(victims)  # the victim's, among her own
    partial = await pipeline.export_otlp(export.SerializeToString(), 0, MALLORY)
    assert (partial.error, partial.rejected_points) == (Errors.NONE, 1)
    assert "belongs to another principal" in partial.message
    owners = {p.context.principal for p in exporter.pushes if p.context.client_instance_id == victims}
    assert owners == {VICTIM.principal}
