"""Micro-benchmark of the silver decode: ``spark_jobs.transforms.decode.decode_batches`` on one Arrow
batch of 50 pushes, against two ceilings measured in the same run on the same payloads:

- ``parse``: ``MetricsData.FromString`` alone;
- ``parse+read``: ``MetricsData.FromString`` and reading, for every data point, what the decode needs
  (times, value or histogram fields, flags, every attribute's key and string value) into nothing.

Each push is one resource (a Kafka Java producer: ``client.id``, ``client.instance.id``, ...) with 41
metrics named like the client's (``org.apache.kafka.producer.record.queue.time.avg``, ...): 26 with one
point (attribute ``client_id``), 8 per topic (3 points: ``client_id``, ``topic``), 4 per partition (6
points: ``client_id``, ``topic``, ``partition``) and 3 histograms of 12 bounds: 77 points per push.
Two workloads: ``10 clients`` (the 50 pushes come from 10 clients, so attribute sets repeat within the
batch) and ``50 clients`` (every push from its own client: no attribute set repeats). Each run is a
fresh ``decode_batches`` call, so its caches start cold.

Run: ``.venv/bin/python benchmarks/rollup/decode_micro.py [--seconds S]``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time
from collections.abc import Callable
from functools import partial

import pyarrow as pa
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from spark_jobs.transforms.decode import decode_batches

PUSHES = 50
T0_NANOS = 1_795_000_000_000_000_000
PREFIX = "org.apache.kafka.producer."
CLIENT_METRICS = [
    "record.queue.time.avg",
    "record.queue.time.max",
    "record.send.rate",
    "record.send.total",
    "record.error.rate",
    "record.error.total",
    "record.retry.rate",
    "record.retry.total",
    "record.size.avg",
    "record.size.max",
    "request.latency.avg",
    "request.latency.max",
    "request.rate",
    "request.total",
    "response.rate",
    "response.total",
    "batch.size.avg",
    "batch.size.max",
    "compression.rate.avg",
    "buffer.available.bytes",
    "buffer.total.bytes",
    "bufferpool.wait.ratio",
    "io.wait.ratio",
    "io.ratio",
    "connection.count",
    "connection.creation.total",
]
TOPIC_METRICS = [
    "topic.record.send.rate",
    "topic.record.send.total",
    "topic.byte.rate",
    "topic.byte.total",
    "topic.record.error.rate",
    "topic.record.retry.rate",
    "topic.compression.rate",
    "topic.records.per.request.avg",
]
PARTITION_METRICS = [
    "partition.record.queue.time.avg",
    "partition.record.queue.time.max",
    "partition.batch.size.avg",
    "partition.records.total",
]
HISTOGRAMS = ["request.latency", "record.queue.time", "batch.size"]
TOPICS = ["orders", "payments", "clickstream"]
BOUNDS = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]


def _attributes(**values: str) -> list[KeyValue]:
    return [KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in values.items()]


def _number(name: str, push: int, points: list[dict[str, str]]) -> Metric:
    data_points = []
    for i, attributes in enumerate(points):
        point = NumberDataPoint(
            start_time_unix_nano=T0_NANOS,
            time_unix_nano=T0_NANOS + (push + 1) * 30_000_000_000,
            attributes=_attributes(**attributes),
        )
        if name.endswith("total"):
            point.as_int = push * 7 + i
        else:
            point.as_double = push * 0.5 + i
        data_points.append(point)
    if name.endswith("total"):
        return Metric(
            name=PREFIX + name,
            description=f"The {name}.",
            sum=Sum(
                data_points=data_points,
                aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
                is_monotonic=True,
            ),
        )
    return Metric(name=PREFIX + name, description=f"The {name}.", gauge=Gauge(data_points=data_points))


def payload(push: int, client: str) -> bytes:
    """One push of ``client``: 41 metrics, 77 points."""
    metrics = [_number(name, push, [{"client_id": client}]) for name in CLIENT_METRICS]
    metrics += [
        _number(name, push, [{"client_id": client, "topic": topic} for topic in TOPICS])
        for name in TOPIC_METRICS
    ]
    metrics += [
        _number(
            name,
            push,
            [
                {"client_id": client, "topic": topic, "partition": str(p)}
                for topic in TOPICS
                for p in range(2)
            ],
        )
        for name in PARTITION_METRICS
    ]
    metrics += [
        Metric(
            name=PREFIX + name,
            unit="ms",
            histogram=Histogram(
                aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
                data_points=[
                    HistogramDataPoint(
                        start_time_unix_nano=T0_NANOS,
                        time_unix_nano=T0_NANOS + (push + 1) * 30_000_000_000,
                        count=78,
                        sum=4321.5,
                        min=0.5,
                        max=4000.0,
                        explicit_bounds=BOUNDS,
                        bucket_counts=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 6, 6],
                        attributes=_attributes(client_id=client),
                    )
                ],
            ),
        )
        for name in HISTOGRAMS
    ]
    resource = Resource(
        attributes=_attributes(
            **{
                "client.id": client,
                "client.instance.id": f"7d0f1c2e-0000-4000-8000-{hash(client) % 10**12:012d}",
                "client.software.name": "apache-kafka-java",
                "client.software.version": "4.2.0",
            }
        )
    )
    data = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=resource,
                scope_metrics=[
                    ScopeMetrics(scope=InstrumentationScope(name="org.apache.kafka"), metrics=metrics)
                ],
            )
        ]
    )
    return data.SerializeToString()


def bronze_batch(payloads: list[bytes]) -> pa.RecordBatch:
    n = len(payloads)
    return pa.RecordBatch.from_pydict(
        {
            "push_id": [f"push-{i}" for i in range(n)],
            "received_at": pa.array([T0_NANOS // 1000] * n, pa.timestamp("us", tz="UTC")),
            "client_instance_id": [f"instance-{i}" for i in range(n)],
            "principal": ["User:alice"] * n,
            "client_id": [f"producer-{i}" for i in range(n)],
            "client_software_name": ["apache-kafka-java"] * n,
            "client_software_version": ["4.2.0"] * n,
            "quota_entity": ["client-id=producer,user=alice"] * n,
            "payload": pa.array(payloads, pa.binary()),
        }
    )


def parse_only(payloads: list[bytes]) -> None:
    for data in payloads:
        MetricsData.FromString(data)


def parse_and_read(payloads: list[bytes]) -> int:
    """Parse and touch every field the decode reads; returns the number of points."""
    points = 0
    for data in payloads:
        for resource_metrics in MetricsData.FromString(data).resource_metrics:
            for attribute in resource_metrics.resource.attributes:
                _ = attribute.key, attribute.value.string_value
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    assert kind is not None
                    _ = metric.name, metric.unit, metric.description
                    for point in getattr(metric, kind).data_points:
                        _ = point.time_unix_nano, point.start_time_unix_nano, point.flags
                        if kind == "histogram":
                            _ = point.count, point.sum, point.min, point.max
                            _ = point.explicit_bounds[:], point.bucket_counts[:]
                        else:
                            _ = getattr(point, point.WhichOneof("value"))
                        for attribute in point.attributes:
                            _ = attribute.key, attribute.value.string_value
                        points += 1
    return points


def decode(batch: pa.RecordBatch) -> int:
    return sum(out.num_rows for out in decode_batches([batch]))


def points_per_second(run: Callable[[], object], points: int, seconds: float) -> float:
    """Best of 5 rounds of ``seconds / 5`` each."""
    best = 0.0
    for _ in range(5):
        gc.collect()
        runs = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 5:
            run()
            runs += 1
        best = max(best, points * runs / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement (default 5)")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'workload':<11} {'points':>6} {'parse/s':>10} {'parse+read/s':>13} {'decode/s':>10} "
          f"{'vs parse':>8} {'vs parse+read':>13}")  # fmt: skip
    for clients in (10, 50):
        payloads = [payload(push, f"producer-{push % clients}") for push in range(PUSHES)]
        batch = bronze_batch(payloads)
        points = parse_and_read(payloads)
        assert decode(batch) == points, "decode lost or invented points"
        parse = points_per_second(partial(parse_only, payloads), points, args.seconds)
        read = points_per_second(partial(parse_and_read, payloads), points, args.seconds)
        decoded = points_per_second(partial(decode, batch), points, args.seconds)
        print(
            f"{f'{clients} clients':<11} {points:>6} {parse:>10,.0f} {read:>13,.0f} {decoded:>10,.0f} "
            f"{decoded / parse:>8.3f} {decoded / read:>13.3f}"
        )


if __name__ == "__main__":
    main()
