"""Windowed statistics and quota bounds: Kafka's ``SampledStat``, ``WindowedSum``, ``Rate``, ``Avg``,
``TokenBucket``, ``Quota`` and ``MetricConfig`` (docs/rules.md STAT-1..STAT-6, TB-1..TB-3).

Every stat takes ``now`` in ms and the config it is measured with; arithmetic is done in the order
Kafka does it, so rates are the same IEEE doubles a broker computes (C-5). Samples live in parallel
lists (values, event counts, start and last-event times) of at most ``samples + 1`` slots. Cached
values keep measuring cheap without changing results: a lower bound of the samples' last-event
times (no purge scan until it could matter), the oldest sample start, and a running total while
every value is an integer below 2**52 (then every summation order gives the same double).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from quotas.java import LONG_MAX

__all__ = [
    "Avg",
    "Gauge",
    "Measurable",
    "MetricConfig",
    "Quota",
    "Rate",
    "SampledStat",
    "TokenBucket",
    "WindowedCount",
    "WindowedSum",
]

_EXACT_LIMIT: Final = float(2**52)
NEVER: Final = -(1 << 62)
"""The last update time of a token bucket that has never been used (PD-9: it starts full)."""


class Quota(NamedTuple):
    """A bound on a metric: ``upper`` means the value must stay <= bound (STAT-6)."""

    bound: float
    upper: bool = True

    def acceptable(self, value: float) -> bool:
        """NaN is never acceptable."""
        return value <= self.bound if self.upper else value >= self.bound


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """Kafka's ``MetricConfig`` (STAT-1): sample count, window length, event window and quota."""

    samples: int = 2
    time_window_ms: int = 30_000
    event_window: int = LONG_MAX
    quota: Quota | None = None

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("The number of samples must be at least 1.")
        if self.time_window_ms < 1:
            raise ValueError("The time window must be at least 1 ms.")

    def with_quota(self, quota: Quota | None) -> MetricConfig:
        return MetricConfig(self.samples, self.time_window_ms, self.event_window, quota)


class Measurable(Protocol):
    """What a sensor records into and a metric measures."""

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None: ...

    def measure(self, config: MetricConfig, now_ms: int) -> float: ...


class SampledStat:
    """A ring of samples over consecutive windows (STAT-2 record, STAT-3 advance, STAT-4 purge)."""

    __slots__ = (
        "_counts",
        "_current",
        "_exact",
        "_last_events",
        "_max_last_event",
        "_min_last_event",
        "_oldest_start",
        "_starts",
        "_total",
        "_total_abs",
        "_values",
    )

    def __init__(self) -> None:
        self._values: list[float] = []
        self._counts: list[int] = []
        self._starts: list[int] = []
        self._last_events: list[int] = []
        self._current = 0
        self._min_last_event = LONG_MAX  # a lower bound of every sample's last event time
        self._max_last_event = -LONG_MAX  # the latest last event time of any sample
        self._oldest_start: int | None = None  # None: recompute
        self._total = 0.0  # the sum of the values; exact (hence Java's sum too) while _exact
        self._total_abs = 0.0  # bounds every partial sum Java could form, for _exact
        self._exact = True

    def _append(self, now_ms: int) -> int:
        self._values.append(0.0)
        self._counts.append(0)
        self._starts.append(now_ms)
        self._last_events.append(now_ms)
        if self._oldest_start is not None and now_ms < self._oldest_start:
            self._oldest_start = now_ms
        if now_ms < self._min_last_event:
            self._min_last_event = now_ms
        if now_ms > self._max_last_event:
            self._max_last_event = now_ms
        return len(self._values) - 1

    def _reset(self, i: int, now_ms: int) -> None:
        old = self._values[i]
        if old:
            self._values[i] = 0.0
            self._total -= old
        if self._starts[i] == self._oldest_start:
            self._oldest_start = None
        elif self._oldest_start is not None and now_ms < self._oldest_start:
            self._oldest_start = now_ms  # the clock went backwards
        self._counts[i] = 0
        self._starts[i] = now_ms
        self._last_events[i] = now_ms
        if now_ms > self._max_last_event:
            self._max_last_event = now_ms
        if now_ms < self._min_last_event:
            self._min_last_event = now_ms

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        """Add ``value`` to the current sample, first advancing if it is complete (STAT-3)."""
        values = self._values
        if not values:
            self._append(now_ms)
        i = self._current
        if now_ms - self._starts[i] >= config.time_window_ms or self._counts[i] >= config.event_window:
            i = self._current = (i + 1) % (config.samples + 1)
            if i >= len(values):
                self._append(now_ms)
            else:
                self._reset(i, now_ms)
        values[i] += value
        self._counts[i] += 1
        self._last_events[i] = now_ms
        if now_ms < self._min_last_event:
            self._min_last_event = now_ms
        if now_ms > self._max_last_event:
            self._max_last_event = now_ms
        if self._exact:
            self._total += value
            self._total_abs += abs(value)
            if value % 1.0 or self._total_abs >= _EXACT_LIMIT:
                self._exact = False  # fractions (or huge sums): Java's left-to-right loop from now on

    def _restart(self, config: MetricConfig, value: float, now_ms: int) -> None:
        """``record`` then ``purge`` when every sample is already expired, in O(1) list operations.

        The caller checked that the current sample is complete, so recording advances to the next
        slot, and that every last event is a whole span old, so the purge resets every other slot.
        What is left is fully determined: every slot starts and last saw an event at ``now``, and
        only the new current slot holds a value.
        """
        current = (self._current + 1) % (config.samples + 1)
        n = max(len(self._values), current + 1)
        self._values = [0.0] * n
        self._values[current] = 0.0 + value
        self._counts = [0] * n
        self._counts[current] = 1
        self._starts = [now_ms] * n
        self._last_events = [now_ms] * n
        self._current = current
        self._min_last_event = self._max_last_event = self._oldest_start = now_ms
        self._total = 0.0 + value
        self._total_abs = abs(self._total)
        self._exact = not value % 1.0 and self._total_abs < _EXACT_LIMIT

    def purge(self, config: MetricConfig, now_ms: int) -> None:
        """Reset every sample whose last event is ``samples x window`` old or older (STAT-4)."""
        expire_age = config.samples * config.time_window_ms
        if now_ms - self._min_last_event >= expire_age:  # else no sample can be that old
            self._purge(now_ms, expire_age)

    def _purge(self, now_ms: int, expire_age: int) -> None:
        lowest = LONG_MAX
        for i, last in enumerate(self._last_events):
            kept = last
            if now_ms - last >= expire_age:
                self._reset(i, now_ms)
                kept = now_ms
            if kept < lowest:
                lowest = kept
        self._min_last_event = lowest

    def oldest_start(self, now_ms: int) -> int:
        """Start time of the oldest sample (creating the first one if there is none)."""
        if not self._values:
            self._append(now_ms)
        oldest = self._oldest_start
        if oldest is None:
            oldest = self._oldest_start = min(self._starts)
        return oldest

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        self.purge(config, now_ms)
        return self.combine(config, now_ms)

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        raise NotImplementedError

    def _sum(self) -> float:
        """The sum of the samples' values exactly as Java adds them (left to right)."""
        if self._exact:
            return self._total  # integers below 2**52: every order gives the same double
        total = 0.0
        for value in self._values:  # sum() compensates on Python 3.12+, Java does not
            total += value
        return total


class WindowedSum(SampledStat):
    """The sum of the recorded values over the live samples."""

    __slots__ = ()

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        return self._sum()


class WindowedCount(WindowedSum):
    """The number of recordings over the live samples."""

    __slots__ = ()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        super().record(config, 1.0, now_ms)

    def _restart(self, config: MetricConfig, value: float, now_ms: int) -> None:
        super()._restart(config, 1.0, now_ms)


class Avg(SampledStat):
    """The mean of the recorded values over the live samples (NaN when there are none)."""

    __slots__ = ()

    def combine(self, config: MetricConfig, now_ms: int) -> float:
        count = sum(self._counts)
        return self._sum() / count if count else float("nan")


class Rate:
    """Per-second rate of a windowed sum (or count) with Kafka's window padding rule (STAT-5)."""

    __slots__ = ("stat",)

    def __init__(self, stat: WindowedSum | None = None) -> None:
        self.stat = stat if stat is not None else WindowedSum()

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        self.stat.record(config, value, now_ms)

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        value = self.stat.measure(config, now_ms)
        return value / (self.window_size(config, now_ms) / 1000.0)

    def record_and_measure(self, config: MetricConfig, value: float, now_ms: int) -> float:
        """``record`` then ``measure`` in one step: the quota check after every record."""
        stat = self.stat
        window = config.time_window_ms
        samples = config.samples
        expire_age = samples * window
        if (
            stat._values
            and now_ms - stat._max_last_event >= expire_age
            and now_ms - stat._starts[stat._current] >= window
        ):
            stat._restart(config, value, now_ms)  # idle for a whole span: every sample expired
        else:
            stat.record(config, value, now_ms)
            if now_ms - stat._min_last_event >= expire_age:
                stat._purge(now_ms, expire_age)
        total = stat._sum()
        oldest = stat._oldest_start
        if oldest is None:
            oldest = stat.oldest_start(now_ms)
        elapsed = now_ms - oldest
        full = elapsed // window if elapsed >= 0 else -(-elapsed // window)  # Java truncation
        if full < samples - 1:
            elapsed += (samples - 1 - full) * window
        return total / ((elapsed if elapsed > 1 else 1) / 1000.0)

    def window_size(self, config: MetricConfig, now_ms: int) -> int:
        """The span the rate is averaged over, in ms: at least ``samples - 1`` full windows."""
        stat = self.stat
        stat.purge(config, now_ms)
        elapsed = now_ms - stat.oldest_start(now_ms)
        window = config.time_window_ms
        full = elapsed // window if elapsed >= 0 else -(-elapsed // window)  # Java truncation
        min_full = config.samples - 1
        if full < min_full:
            elapsed += (min_full - full) * window
        return max(elapsed, 1)


class Gauge:
    """A value read when measured (a queue length, a connection count); recording does nothing."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        return None

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        return float(self._read())


class TokenBucket:
    """KIP-599's token bucket (TB-1): refill at ``quota``/s up to ``burst``, spend what is recorded.

    ``burst = samples x window_s x quota``. Tokens may go negative; the quota is violated while they
    are below 0. A new bucket starts full (PD-9; Kafka starts at epoch 0, which fills it on a real
    clock). With no quota, measuring gives ``2**63-1`` and recording does nothing.
    """

    __slots__ = ("last_update_ms", "tokens")

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last_update_ms = NEVER

    @staticmethod
    def burst(config: MetricConfig, quota: float) -> float:
        return (config.samples * (config.time_window_ms / 1000.0)) * quota

    def _refill(self, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.tokens + quota * ((now_ms - self.last_update_ms) / 1000.0))
        self.last_update_ms = now_ms

    def measure(self, config: MetricConfig, now_ms: int) -> float:
        if config.quota is None:
            return float(LONG_MAX)
        quota = config.quota.bound
        self._refill(quota, self.burst(config, quota), now_ms)
        return self.tokens

    def record(self, config: MetricConfig, value: float, now_ms: int) -> None:
        if config.quota is None:
            return
        quota = config.quota.bound
        burst = self.burst(config, quota)
        self._refill(quota, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)
