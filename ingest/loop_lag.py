"""The event loop's lag: how late the sink's one asyncio loop runs what is due (issue 17).

Every listener (gRPC, HTTP, Kafka) shares one event loop, so whatever holds it (a parse or a long
synchronous call in the loop's thread) delays every other client's request by as long. This module
measures that from inside the sink: ``LoopLagMonitor.run`` sleeps ``PERIOD_S`` (10 ms) over and over
and, at each wake-up, records how much later than due it woke (the lag: the wake-up minus the sleep's
start plus ``PERIOD_S``). On a loop nothing holds, the lag is the timer's resolution (well under a
millisecond); a callback that holds the loop for 300 ms shows as one 300 ms lag.

On ``/metrics`` (``ingest.push.metrics.metrics_exposition``):

- ``telemetry_sink_event_loop_lag_seconds`` (histogram): the lag of every wake-up, for rates and
  quantiles over any window (``histogram_quantile``, the share of wake-ups over 50 ms);
- ``telemetry_sink_event_loop_lag_max_seconds`` (gauge): the largest lag since the previous scrape.
  Each scrape reads and resets it, so with one scraper it is the worst stall of each scrape interval
  (which the histogram's buckets only bound); a second scraper makes each see part of the stalls.

The clock (``now``, ``time.monotonic`` by default: the clock ``asyncio.sleep`` uses) and the sleep are
passed in, so tests drive the monitor in virtual time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Final

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["LAG_BUCKETS_S", "PERIOD_S", "LoopLagMonitor"]

PERIOD_S: Final = 0.01
"""How often the monitor asks to be woken: the resolution of the measure, 100 wake-ups a second."""
LAG_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""The histogram's upper bounds, around the 50 ms a request may hold the loop."""


class LoopLagMonitor(Collector):
    """Records the event loop's lag (``run``, one task per loop) and collects it for ``/metrics``."""

    def __init__(self, period_s: float = PERIOD_S, now: Callable[[], float] = time.monotonic) -> None:
        self.period_s = period_s
        self.now = now
        self._max_s = 0.0
        self._histogram = Histogram(
            "telemetry_sink_event_loop_lag_seconds",
            "How much later than due the event loop woke the lag monitor's periodic sleep",
            buckets=LAG_BUCKETS_S,
            registry=None,
        )

    async def run(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Measure until cancelled: sleep ``period_s``, record how late the wake-up came, again."""
        while True:
            due = self.now() + self.period_s
            await sleep(self.period_s)
            self.record(max(0.0, self.now() - due))

    def record(self, lag_s: float) -> None:
        """One wake-up ``lag_s`` seconds late."""
        self._histogram.observe(lag_s)
        if lag_s > self._max_s:
            self._max_s = lag_s

    def take_max(self) -> float:
        """The largest lag recorded since the previous call (0 when none), and start afresh."""
        worst, self._max_s = self._max_s, 0.0
        return worst

    def collect(self) -> Iterator[Metric]:
        """The histogram, and the largest lag since the previous scrape (which this scrape resets)."""
        yield from self._histogram.collect()
        yield GaugeMetricFamily(
            "telemetry_sink_event_loop_lag_max_seconds",
            "The largest event loop lag since the previous scrape of /metrics (reset by each scrape)",
            self.take_max(),
        )
