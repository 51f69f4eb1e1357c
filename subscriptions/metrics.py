"""The subscription core's own counters (the ``client-metrics`` group of TEL-24 in docs/rules.md).

Plain integers bumped on the request path; ``samples()`` turns them into named samples at scrape time,
which the front end publishes on ``/metrics``. Per-instance series (Kafka tags them by instance id)
are left out on purpose: a fleet of a million instances would be a million series.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal, NamedTuple

from subscriptions.errors import Errors

__all__ = ["ClientMetricsStats", "Sample"]

Api = Literal["GetTelemetrySubscriptions", "PushTelemetry"]
GET: Api = "GetTelemetrySubscriptions"
PUSH: Api = "PushTelemetry"


class Sample(NamedTuple):
    name: str
    kind: Literal["counter", "gauge"]
    help: str
    labels: dict[str, str]
    value: float


class ClientMetricsStats:
    """Counters of requests, errors by code, throttling, instances and pushes handed to exporters."""

    __slots__ = (
        "accepted_pushes",
        "errors",
        "export_failures",
        "get_requests",
        "instances_created",
        "push_requests",
        "throttled",
    )

    def __init__(self) -> None:
        self.get_requests = 0
        self.push_requests = 0
        self.errors: Counter[tuple[Api, int]] = Counter()
        self.throttled: Counter[Api] = Counter()
        self.instances_created = 0
        self.accepted_pushes = 0
        self.export_failures: Counter[int] = Counter()

    def samples(
        self, *, instance_count: int, evictions: int, expirations: int, disconnects: int
    ) -> list[Sample]:
        p = "telemetry_sink_client_metrics_"
        totals = [
            ("instances_created_total", "Client instances created or re-created.", self.instances_created),
            ("instance_evictions_total", "Instances evicted by the LRU capacity.", evictions),
            ("instance_expirations_total", "Instances removed after inactivity.", expirations),
            ("instance_disconnect_removals_total", "Instances removed on disconnect.", disconnects),
            ("accepted_pushes_total", "Pushes with a payload handed to the exporters.", self.accepted_pushes),
        ]  # fmt: skip
        out = [Sample(p + "instance_count", "gauge", "Client instances in the cache.", {}, instance_count)]
        out += [Sample(p + name, "counter", text, {}, value) for name, text, value in totals]
        out += [
            Sample(p + "requests_total", "counter", "Telemetry requests by API.", {"api": api}, n)
            for api, n in ((GET, self.get_requests), (PUSH, self.push_requests))
        ]
        out += [
            Sample(
                p + "errors_total",
                "counter",
                "Telemetry responses with an error, by API and Kafka error code.",
                {"api": api, "error": Errors(code).name, "code": str(code)},
                n,
            )
            for (api, code), n in sorted(self.errors.items())
        ]
        out += [
            Sample(p + "throttled_total", "counter", "Requests refused as too early (89).", {"api": api}, n)
            for api, n in sorted(self.throttled.items())
        ]
        out += [
            Sample(
                p + "export_failures_total",
                "counter",
                "Accepted pushes whose export failed, by the error answered.",
                {"error": Errors(code).name, "code": str(code)},
                n,
            )
            for code, n in sorted(self.export_failures.items())
        ]
        return out
