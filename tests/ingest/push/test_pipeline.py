"""The push path end to end, with the real core, quota engine, codec and an in-memory exporter."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from typing import ClassVar
from uuid import UUID

import pytest
import zstandard
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from exporters import ExportResult, InMemoryExporter, TelemetryPush
from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push import decoding as decoding_module
from ingest.push.decoding import INLINE_DECODE_BYTES, decode_push
from ingest.push.otlp_scan import Structure, scan_metrics
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
from tests.support.clock import FakeClock
from tests.support.otlp import metrics_data
from tests.support.paths import LIBRDKAFKA_FIXTURES

FIXTURES = LIBRDKAFKA_FIXTURES
CLIENT = ClientContext(
    client_id="rdkafka",
    client_software_name="librdkafka",
    client_software_version="2.16.0",
    client_source_address="127.0.0.1",
    client_source_port=40001,
    principal="User:alice",
)


class Harness:
    made: ClassVar[list[Harness]] = []
    """Every harness of the running test, closed after it by ``_close_the_harnesses``."""

    def __init__(self, exporter: InMemoryExporter | None = None, decode_processes: int = 2) -> None:
        Harness.made.append(self)
        self.clock = FakeClock()
        store = SubscriptionStore()
        store.update("kafka", {"metrics": "org.apache.kafka.", "interval.ms": 1000})
        self.manager = ClientMetricsManager(store)
        self.quotas = create_quota_managers(QuotaConfig(), self.clock)
        self.exporter = exporter or InMemoryExporter()
        self.handler_ns = 0  # how long each request takes to handle (fake time)
        self._ticks = 0
        self.pipeline = TelemetryPipeline(
            self.manager,
            self.quotas,
            self.exporter,
            clock=self.clock,
            clock_ns=self._thread_time,
            decode_processes=decode_processes,
        )
        self.instance_id = UUID(int=0)
        self.subscription_id = 0

    def _thread_time(self) -> int:
        self._ticks += self.handler_ns // 2  # called at the start and at the end of a request
        return self._ticks

    async def get(self) -> int:
        response = await self.pipeline.get_subscriptions(
            GetTelemetrySubscriptionsRequest(self.instance_id), CLIENT
        )
        if response.error_code == Errors.NONE:
            self.instance_id, self.subscription_id = response.client_instance_id, response.subscription_id
        return response.error_code

    async def push(self, metrics: bytes, compression: int = 0, *, after_ms: int = 1000) -> tuple[int, int]:
        self.clock.advance(after_ms)
        request = PushTelemetryRequest(self.instance_id, self.subscription_id, False, compression, metrics)
        response = await self.pipeline.push(request, CLIENT)
        return response.error_code, response.throttle_time_ms


@pytest.fixture(autouse=True)
async def _close_the_harnesses() -> AsyncIterator[None]:
    """A test's harnesses closed after it, whatever it asserted: their decoder processes stop."""
    yield
    while Harness.made:
        await Harness.made.pop().pipeline.close()


async def test_a_librdkafka_push_lands_decompressed_with_its_context() -> None:
    h = Harness()
    assert await h.get() == Errors.NONE
    captured = (FIXTURES / "librdkafka-producer-push001-zstd.bin").read_bytes()
    assert await h.push(captured, 4) == (Errors.NONE, 0)
    [landed] = h.exporter.pushes
    assert isinstance(landed, TelemetryPush)
    assert landed.payload == decode_push(captured, 4, 1 << 20, DEFAULT_LIMITS)
    c = landed.context
    assert (c.client_instance_id, c.subscription_id) == (h.instance_id, h.subscription_id)
    assert (c.principal, c.client_id, c.client_software_name) == ("User:alice", "rdkafka", "librdkafka")
    assert (c.client_source_address, c.client_source_port, c.compression_type) == ("127.0.0.1", 40001, 4)
    assert c.quota_entity == "client-id=rdkafka,user="  # the entity its usage counts against
    assert c.received_ms == h.clock.now_ms()


async def test_PD_12_a_zip_bomb_is_too_large_and_the_client_carries_on() -> None:
    h = Harness()
    await h.get()
    bomb = zstandard.ZstdCompressor().compress(bytes(100 << 20))
    assert (await h.push(bomb, 4))[0] == Errors.TELEMETRY_TOO_LARGE
    assert await h.push(metrics_data(), 0) == (Errors.NONE, 0)  # next interval: accepted
    assert len(h.exporter.pushes) == 1


async def test_F3_client_text_no_row_can_hold_refuses_that_push_alone_without_reaching_the_exporter() -> None:
    """A transport that let a lone surrogate through (the transports check first) still cannot make
    the exporter fail a batch: the pipeline answers that client INVALID_REQUEST on both paths."""
    h = Harness()
    await h.get()
    bad = CLIENT._replace(client_id="\udcff")
    request = PushTelemetryRequest(h.instance_id, h.subscription_id, False, 0, metrics_data())
    h.clock.advance(1000)
    assert (await h.pipeline.push(request, bad)).error_code == Errors.INVALID_REQUEST
    outcome = await h.pipeline.export_otlp(metrics_data(), 0, bad)
    assert outcome.error == Errors.INVALID_REQUEST
    assert "client_id" in outcome.message
    assert h.exporter.pushes == []
    assert await h.push(metrics_data()) == (Errors.NONE, 0)  # the instance carries on


async def test_PD_12_corrupt_or_non_otlp_payloads_are_invalid_record() -> None:
    h = Harness()
    await h.get()
    corrupt = gzip.compress(metrics_data())[:-8]
    assert (await h.push(corrupt, 1))[0] == Errors.INVALID_RECORD
    assert (await h.push(b"\xff\xff\xff", 0))[0] == Errors.INVALID_RECORD
    assert h.exporter.pushes == []


async def test_PD_12_an_exporter_failure_is_retried_at_the_next_interval() -> None:
    h = Harness(InMemoryExporter(ExportResult.RETRYABLE))
    await h.get()
    error, throttle = await h.push(metrics_data())
    assert error == Errors.THROTTLING_QUOTA_EXCEEDED
    assert throttle == 1000  # the push interval: the client comes back then
    h.exporter.result = ExportResult.PERMANENT
    assert (await h.push(metrics_data()))[0] == Errors.INVALID_RECORD


async def test_PD_12_an_exporter_exception_is_ours_not_the_clients() -> None:
    class Broken(InMemoryExporter):
        async def export(self, push: TelemetryPush) -> ExportResult:
            raise RuntimeError("disk on fire")

    h = Harness(Broken())
    await h.get()
    assert (await h.push(metrics_data()))[0] == Errors.THROTTLING_QUOTA_EXCEEDED


async def test_QUO_7_the_byte_rate_quota_throttles_an_accepted_push() -> None:
    h = Harness()
    h.quotas.alter(ClientQuotaEntity(None, "rdkafka"), "producer_byte_rate", 100)
    await h.get()
    error, throttle = await h.push(metrics_data(points=200))  # several KB against 100 B/s
    assert error == Errors.NONE  # stored: the throttle asks the client to slow down
    assert throttle > 0
    assert len(h.exporter.pushes) == 1


async def test_QUO_11_the_request_time_quota_throttles_slow_requests() -> None:
    h = Harness()
    h.quotas.alter(ClientQuotaEntity(None, "rdkafka"), "request_percentage", 1)
    h.handler_ns = 500_000_000  # half a second per request: 50% of a thread
    assert await h.get() == Errors.NONE
    error, throttle = await h.push(metrics_data())
    assert error == Errors.NONE
    assert throttle == 1000  # capped at one quota window


async def test_TEL_17_a_too_early_push_keeps_the_cores_answer() -> None:
    h = Harness()
    await h.get()
    assert (await h.push(metrics_data()))[0] == Errors.NONE
    assert await h.push(metrics_data(), after_ms=400) == (Errors.THROTTLING_QUOTA_EXCEEDED, 600)


async def test_F2_a_zstd_parse_bomb_under_the_cap_is_too_large_by_its_structure() -> None:
    h = Harness()
    await h.get()
    bomb = b"\x0a\x00" * (h.pipeline.max_decompressed_bytes // 2)  # 10M empty ResourceMetrics
    assert (await h.push(zstandard.ZstdCompressor().compress(bomb), 4))[0] == Errors.TELEMETRY_TOO_LARGE
    assert await h.push(metrics_data(), 0) == (Errors.NONE, 0)  # the client carries on
    assert len(h.exporter.pushes) == 1


async def test_small_payloads_are_decoded_on_the_loop_and_large_ones_in_a_worker_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A payload over INLINE_DECODE_BYTES never costs the event loop's GIL: it is decoded in a worker
    process (the scan, spied on in this process, sees only the small one)."""
    scanned: list[int] = []

    def spied(payload: bytes, limits: RequestLimits) -> Structure:
        scanned.append(len(payload))
        return scan_metrics(payload, limits)

    monkeypatch.setattr(decoding_module, "scan_metrics", spied)
    h = Harness()
    await h.get()
    captured = (FIXTURES / "librdkafka-consumer-push001-zstd.bin").read_bytes()
    assert await h.push(captured, 4) == (Errors.NONE, 0)
    large = MetricsData.FromString(metrics_data())
    large.resource_metrics[0].schema_url = "x" * INLINE_DECODE_BYTES
    assert await h.push(large.SerializeToString(), 0) == (Errors.NONE, 0)
    assert h.exporter.pushes[-1].payload == large.SerializeToString()
    assert len(scanned) == 1  # the small push, on the loop; the large one was scanned elsewhere
    assert scanned[0] <= INLINE_DECODE_BYTES
    assert isinstance(h.pipeline.decoders.pool, ProcessPoolExecutor)


async def test_a_dead_decoder_process_is_replaced_and_the_push_is_decoded_by_a_new_one() -> None:
    """On a pool of a size no other test uses: the pools are shared by size within a process, and the
    workers killed here, and the pool started in their place, must be this test's alone."""
    h = Harness(decode_processes=4)
    await h.get()
    large = MetricsData.FromString(metrics_data())
    large.resource_metrics[0].schema_url = "x" * INLINE_DECODE_BYTES
    assert await h.push(large.SerializeToString(), 0) == (Errors.NONE, 0)
    pool = h.pipeline.decoders.pool
    assert pool is not None
    for process in list(pool._processes.values()):  # killed for memory, say
        process.kill()
        process.join()
    assert await h.push(large.SerializeToString(), 0) == (Errors.NONE, 0)
    assert h.pipeline.decoders.pool is not pool
    assert len(h.exporter.pushes) == 2


async def test_QUO_11_a_large_payloads_decoding_in_a_worker_is_request_time() -> None:
    """The loop's clock stands still here: the only handler time is what the decoder process spent."""
    h = Harness()
    h.pipeline = TelemetryPipeline(h.manager, h.quotas, h.exporter, clock=h.clock, clock_ns=lambda: 0)
    h.quotas.alter(ClientQuotaEntity(user="alice"), "request_percentage", 0.01)  # 0.1 ms a second
    assert await h.get() == Errors.NONE
    large = metrics_data(points=20_000)  # about 700 KB: a few ms to scan and parse
    assert len(large) > INLINE_DECODE_BYTES
    error, throttle = await h.push(large, 0)
    assert error == Errors.NONE
    assert throttle > 0


class _CommitOnABusyLoop(InMemoryExporter):
    """An exporter whose durable commit takes a while, during which the loop runs other clients'
    requests: the clock advances by 500 ms that are not this request's."""

    def __init__(self, clock_ns: list[int]) -> None:
        super().__init__()
        self.clock_ns = clock_ns

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.clock_ns[0] += 500_000_000
        return await super().export(push)


async def test_AUD_D8_request_time_is_the_handlers_own_time_not_the_wait_for_the_commit() -> None:
    clock_ns = [0]
    h = Harness(_CommitOnABusyLoop(clock_ns))
    h.pipeline = TelemetryPipeline(
        h.manager, h.quotas, h.exporter, clock=h.clock, clock_ns=lambda: clock_ns[0]
    )
    h.quotas.alter(ClientQuotaEntity(user="alice"), "request_percentage", 1)  # 10 ms of handling per s
    assert await h.get() == Errors.NONE
    captured = (FIXTURES / "librdkafka-producer-push001-zstd.bin").read_bytes()
    assert await h.push(captured, 4) == (Errors.NONE, 0)  # 500 ms of CPU went by, none of it its own
    assert len(h.exporter.pushes) == 1
