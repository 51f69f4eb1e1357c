"""Counts the work ``drop_invalid_points`` does, run as a child process with protobuf's pure-Python
implementation, whose repeated fields are Python lists a test can count operations on (upb's are C).

``python -m tests.ingest.push.otlp_points_work METRICS POINTS`` filters one scope of METRICS metrics, every
other one without a name, the valid ones each a gauge of POINTS points, every other one without
``time_unix_nano``, and prints as JSON: ``checks`` (points checked), ``moves`` (elements moved by
deletions from repeated fields), ``copies`` (elements appended to repeated fields), ``kept`` (points
left) and ``rejected`` (points refused).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

from google.protobuf.internal import api_implementation, containers
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, MetricsData, NumberDataPoint

from ingest.push import otlp_points

T = 1_700_000_000_000_000_000


def main(metrics: int, points: int) -> dict[str, int]:
    assert api_implementation.Type() == "python"
    work = {"checks": 0, "moves": 0, "copies": 0}
    repeated = containers.RepeatedCompositeFieldContainer
    delete, extend, append, check = (
        repeated.__delitem__,
        repeated.extend,
        repeated.append,
        otlp_points.point_problem,
    )

    def counted_delete(self: Any, key: int | slice) -> None:
        start = key.indices(len(self))[0] if isinstance(key, slice) else key % len(self)
        work["moves"] += len(self) - start - 1  # the elements after it move down
        delete(self, key)

    def counted_extend(self: Any, elements: Any) -> None:
        elements = list(elements)
        work["copies"] += len(elements)
        extend(self, elements)

    def counted_append(self: Any, element: Any) -> None:
        work["copies"] += 1
        append(self, element)

    def counted_check(kind: str, point: Any) -> str | None:
        work["checks"] += 1
        return check(kind, point)

    data = MetricsData()
    scope = data.resource_metrics.add().scope_metrics.add()
    for m in range(metrics):
        gauge = Gauge(
            data_points=[NumberDataPoint(time_unix_nano=T * (p % 2), as_int=p) for p in range(points)]
        )
        scope.metrics.append(Metric(name=f"m{m}" if m % 2 else "", gauge=gauge))
    counted = {"__delitem__": counted_delete, "extend": counted_extend, "append": counted_append}
    for name, wrapper in counted.items():
        setattr(repeated, name, wrapper)
    otlp_points.point_problem = counted_check
    rejected = otlp_points.drop_invalid_points(data)
    kept = sum(len(m.gauge.data_points) for m in data.resource_metrics[0].scope_metrics[0].metrics)
    return {**work, "kept": kept, "rejected": rejected.points}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
