"""The event loop's lag (``ingest.loop_lag``): a callback holding the loop is reported as late as it
held it, once per wake-up, and ``/metrics`` shows it (issue 17). Virtual time: the monitor's clock and
sleep are fakes the test moves; the event loop that schedules it is the real one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ingest.config import SinkConfig
from ingest.loop_lag import LAG_BUCKETS_S, LoopLagMonitor
from ingest.server import Sink

T0_S = 1_000.0
STEPS = 20
"""Loop iterations a test lets run: the monitor wakes up many times in them."""


class VirtualTime:
    """The monitor's clock and sleep: a sleep moves the clock on by exactly its length and gives the
    loop one turn; ``hold_loop`` is a callback that holds the loop for a virtual duration."""

    def __init__(self) -> None:
        self.now_s = T0_S
        self.sleeps = 0

    def now(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now_s += seconds
        await asyncio.sleep(0)

    def hold_loop(self, seconds: float) -> None:
        self.now_s += seconds


async def turns(count: int = STEPS) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def monitoring(time: VirtualTime) -> AsyncIterator[LoopLagMonitor]:
    monitor = LoopLagMonitor(now=time.now)
    task = asyncio.create_task(monitor.run(time.sleep))
    try:
        yield monitor
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def parse(exposition: str) -> dict[str, float]:
    """Prometheus text: sample name (with ``le`` for buckets, labels otherwise ignored) -> value."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            le = sample.labels.get("le")
            samples[sample.name if le is None else f"{sample.name}{{le={le}}}"] = sample.value
    return samples


def scrape(monitor: LoopLagMonitor) -> dict[str, float]:
    """One ``/metrics`` rendering of the monitor alone."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(monitor)
    return parse(generate_latest(registry).decode())


async def test_a_callback_holding_the_loop_is_reported_as_a_lag_of_its_duration() -> None:
    time = VirtualTime()
    async with monitoring(time) as monitor:
        await turns()
        assert monitor.take_max() == 0.0  # every wake-up on time
        asyncio.get_running_loop().call_soon(time.hold_loop, 0.3)
        await turns()
        assert monitor.take_max() == pytest.approx(0.3)


async def test_the_largest_lag_is_kept_until_read_and_then_starts_afresh() -> None:
    time = VirtualTime()
    async with monitoring(time) as monitor:
        loop = asyncio.get_running_loop()
        for held in (0.2, 0.07, 0.01):  # the 200 ms stall is followed by smaller ones
            loop.call_soon(time.hold_loop, held)
            await turns()
        assert monitor.take_max() == pytest.approx(0.2)
        assert monitor.take_max() == 0.0
        loop.call_soon(time.hold_loop, 0.04)
        await turns()
        assert monitor.take_max() == pytest.approx(0.04)


async def test_every_wake_up_is_observed_once_in_the_histogram_and_a_stall_in_its_bucket() -> None:
    time = VirtualTime()
    async with monitoring(time) as monitor:
        asyncio.get_running_loop().call_soon(time.hold_loop, 0.3)
        await turns()
        samples = scrape(monitor)
        wake_ups = time.sleeps - 1  # the last sleep has not ended yet
    assert wake_ups > 1
    assert samples["telemetry_sink_event_loop_lag_seconds_count"] == wake_ups
    assert samples["telemetry_sink_event_loop_lag_seconds_sum"] == pytest.approx(0.3)
    assert samples[f"telemetry_sink_event_loop_lag_seconds_bucket{{le={LAG_BUCKETS_S[0]}}}"] == wake_ups - 1
    assert samples["telemetry_sink_event_loop_lag_seconds_bucket{le=0.25}"] == wake_ups - 1
    assert samples["telemetry_sink_event_loop_lag_seconds_bucket{le=0.5}"] == wake_ups
    assert samples["telemetry_sink_event_loop_lag_max_seconds"] == pytest.approx(0.3)


def test_a_scrape_resets_the_max_gauge_but_not_the_histogram() -> None:
    monitor = LoopLagMonitor()
    monitor.record(0.12)
    first = scrape(monitor)
    second = scrape(monitor)
    assert first["telemetry_sink_event_loop_lag_max_seconds"] == 0.12
    assert second["telemetry_sink_event_loop_lag_max_seconds"] == 0.0
    assert first["telemetry_sink_event_loop_lag_seconds_count"] == 1
    assert second["telemetry_sink_event_loop_lag_seconds_count"] == 1


async def test_a_wake_up_earlier_than_due_counts_as_no_lag() -> None:
    time = VirtualTime()
    monitor = LoopLagMonitor(now=time.now)

    async def early_then_cancelled(seconds: float) -> None:
        if time.sleeps:
            raise asyncio.CancelledError
        time.sleeps += 1
        time.now_s += seconds / 2

    with pytest.raises(asyncio.CancelledError):
        await monitor.run(early_then_cancelled)
    samples = scrape(monitor)
    assert samples["telemetry_sink_event_loop_lag_seconds_count"] == 1
    assert samples["telemetry_sink_event_loop_lag_seconds_sum"] == 0.0


@pytest.mark.integration
async def test_the_sink_measures_its_loop_on_metrics_and_stops_measuring_when_stopped(
    tmp_path: Path,
) -> None:
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
            "kafka_listener": {"port": None},
            "exporter": {"name": "memory", "quota_sample_period_s": 0},
        }
    )
    sink = Sink(config)
    await sink.start()
    try:
        sink.loop_lag.take_max()  # whatever starting took
        sink.loop_lag.record(0.5)  # as if a request had held the loop for 500 ms
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sink.http_port}") as client:
            first = parse((await client.get("/metrics")).text)
            second = parse((await client.get("/metrics")).text)
        measuring = [task for task in asyncio.all_tasks() if task.get_name() == "loop-lag"]
        assert len(measuring) == 1
    finally:
        await sink.stop()
    assert measuring[0].cancelled()
    assert first["telemetry_sink_event_loop_lag_max_seconds"] >= 0.5  # a real stall can only add to it
    assert (
        second["telemetry_sink_event_loop_lag_max_seconds"]
        < first["telemetry_sink_event_loop_lag_max_seconds"]
    )
    stalls = (
        "telemetry_sink_event_loop_lag_seconds_bucket{le=0.5}",
        "telemetry_sink_event_loop_lag_seconds_bucket{le=0.25}",
    )
    assert first[stalls[0]] - first[stalls[1]] >= 1
