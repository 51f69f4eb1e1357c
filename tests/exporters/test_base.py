"""The exporter interface, the reference exporters, loading by name and chaining."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence

import pytest

from exporters import (
    ChainExporter,
    DeltaLandingExporter,
    Exporter,
    ExporterLoadError,
    ExportResult,
    ForwardedBatch,
    Health,
    InMemoryExporter,
    LogExporter,
    OtlpForwardingExporter,
    PushContext,
    TelemetryPush,
    load_exporter,
)
from exporters.delta.schema import kafka_instance_id
from ingest.wire import parse_instance_id
from subscriptions import kafka_uuid_string
from tests.support.otlp import push
from tests.support.telemetry import EXAMPLE_UUID


def test_push_context_carries_the_whole_context() -> None:
    context = push(3, quota_tags={"user": "alice", "client-id": "c1"}, terminating=True).context
    assert context.quota_entity == "client-id=c1,user=alice"
    assert len(context.push_id) == 32
    assert push().context.push_id != push().context.push_id
    assert context.terminating


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("client_id", "\udcff"),  # aiohttp's reading of the header byte 0xff (F3)
        ("client_software_name", "a\ud800"),
        ("client_software_version", "\udfff"),
        ("principal", "User:\udc80"),
        ("client_source_address", "\udcff"),
        ("push_id", "\udcff"),
        ("client_id", 7),
        ("quota_tags", {"user": "alice", "client-id": "\udcff"}),
        ("quota_tags", {"\udcff": ""}),
    ],
)
def test_F3_a_push_context_no_row_can_hold_is_refused_naming_the_field(field: str, value: object) -> None:
    fields = {f.name: getattr(push().context, f.name) for f in dataclasses.fields(PushContext) if f.init}
    with pytest.raises(ValueError, match=f"^{field} must be"):
        PushContext(**{**fields, field: value})


def test_a_push_costs_its_payload_and_the_utf8_bytes_of_its_context_text() -> None:
    """F4: what an exporter keeps of a push is counted, not only its payload."""
    base = push(1, payload=b"x" * 10, client_software_name="a")
    longer = push(1, payload=b"x" * 10, client_software_name="a" * 1001)
    wide = push(1, payload=b"x" * 10, client_software_name="\u00e9")  # two bytes in UTF-8
    assert longer.size - base.size == 1000
    assert wide.size - base.size == 1
    assert base.size - len(base.payload) == base.context.text_bytes > 0
    tagged = push(
        1, payload=b"x" * 10, client_software_name="a", quota_tags={"user": "alice", "client-id": "c" * 100}
    )
    assert tagged.size - base.size == 2 * 100  # tags and the quota entity: every row holds both
    assert push(1, client_id=None).context.text_bytes < push(1, client_id="c").context.text_bytes


async def test_in_memory_exporter_keeps_pushes_and_can_fail() -> None:
    exporter = InMemoryExporter()
    await exporter.start()
    assert await exporter.export(push(1)) is ExportResult.SUCCESS
    exporter.result = ExportResult.RETRYABLE
    assert await exporter.export(push(2)) is ExportResult.RETRYABLE
    assert [p.context.client_id for p in exporter.pushes] == ["producer-1"]
    await exporter.shutdown()
    exporter.result = ExportResult.SUCCESS
    assert await exporter.export(push(3)) is ExportResult.RETRYABLE  # after shutdown


async def test_log_exporter_logs_one_line_per_push(caplog: pytest.LogCaptureFixture) -> None:
    exporter, pushed = LogExporter(), push(7)
    with caplog.at_level(logging.INFO, logger="telemetry_sink.exporters.log"):
        assert await exporter.export(pushed) is ExportResult.SUCCESS
    assert "client_id=producer-7" in caplog.text
    assert "entity=client-id=,user=alice" in caplog.text
    instance_id = pushed.context.client_instance_id
    assert f"instance={kafka_uuid_string(instance_id)} " in caplog.text  # Kafka's form, as landed
    assert str(instance_id) not in caplog.text


@pytest.mark.parametrize(
    "instance_id",
    [
        EXAMPLE_UUID,
        uuid.UUID(int=0),
        uuid.UUID(int=2**128 - 1),
        uuid.UUID("f8000000-0000-4000-8000-000000000000"),
    ],
)
def test_exporters_write_instance_ids_as_kafkas_uuid_to_string(instance_id: uuid.UUID) -> None:
    """The exporters' own ``kafka_instance_id`` (they import no other package of the repo) is
    ``subscriptions.kafka_uuid_string``: 22 chars of base64url, no padding, read back by the sink."""
    text = kafka_instance_id(instance_id)
    assert text == kafka_uuid_string(instance_id)
    assert len(text) == 22
    assert parse_instance_id(text) == instance_id


@pytest.mark.parametrize(
    ("spec", "options", "cls"),
    [
        ("delta", {"table_uri": "/tmp/x"}, DeltaLandingExporter),
        ("memory", {}, InMemoryExporter),
        ("log", {"level": "DEBUG"}, LogExporter),
        ("otlp", {"endpoint": "localhost:4317"}, OtlpForwardingExporter),
        ("exporters.in_memory:InMemoryExporter", {}, InMemoryExporter),
        ("exporters.log.LogExporter", {}, LogExporter),
    ],
)
def test_exporters_load_by_entry_point_or_dotted_path(
    spec: str, options: dict[str, object], cls: type
) -> None:
    assert isinstance(load_exporter(spec, options), cls)


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("nope", {}, "unknown exporter 'nope'; built in: delta, log, memory, otlp"),
        ("no.such.module:Thing", {}, "cannot load exporter"),
        ("json:dumps", {}, "is not an Exporter class"),
        ("memory", {"bogus": 1}, "bad options for exporter 'memory'"),
    ],
)
def test_bad_exporter_names_and_options_are_clear_errors(
    spec: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ExporterLoadError, match=message.replace("(", r"\(")):
        load_exporter(spec, options)


async def test_chain_runs_in_order_and_stops_at_the_first_failure() -> None:
    first, failing, never = InMemoryExporter(), InMemoryExporter(ExportResult.PERMANENT), InMemoryExporter()
    chain = ChainExporter([first, failing, never])
    await chain.start()
    assert all(e.started for e in (first, failing, never))
    assert await chain.export(push()) is ExportResult.PERMANENT
    assert (len(first.pushes), len(never.pushes)) == (1, 0)
    assert await chain.force_flush()
    await chain.shutdown()
    assert all(e.closed for e in (first, failing, never))


async def test_chain_takes_a_forwarded_batch_exporter_by_exporter_and_a_duplicate_goes_no_further() -> None:
    class Seen(InMemoryExporter):
        """Holds pushes 0 and 1 from an earlier attempt of the batch."""

        async def export_batch(
            self, pushes: Sequence[TelemetryPush], batch: ForwardedBatch
        ) -> list[ExportResult]:
            seen = {push(0).payload, push(1).payload}
            return [ExportResult.DUPLICATE if p.payload in seen else await self.export(p) for p in pushes]

    failing = InMemoryExporter(ExportResult.RETRYABLE)
    later = InMemoryExporter()
    chain = ChainExporter([Seen(), failing, later])
    await chain.start()
    results = await chain.export_batch([push(n) for n in range(3)], ForwardedBatch("User:b/f", 2, True))
    assert results == [ExportResult.DUPLICATE, ExportResult.DUPLICATE, ExportResult.RETRYABLE]
    assert later.pushes == []
    await chain.shutdown()


def test_chain_health_names_the_unhealthy_exporter() -> None:
    class Sick(InMemoryExporter):
        name = "sick"

        def health(self) -> Health:
            return Health(False, "disk full")

    assert ChainExporter([InMemoryExporter(), Sick()]).health() == (False, "sick: disk full")
    with pytest.raises(ValueError, match="at least one"):
        ChainExporter([])


def test_exporter_contract() -> None:
    """Pins the interface third-party exporters implement."""
    assert set(Exporter.__abstractmethods__) == {"export"}
    for method in ("start", "export", "force_flush", "shutdown", "health"):
        assert callable(getattr(Exporter, method))
