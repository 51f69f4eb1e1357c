"""``spark_jobs.transforms.decode``: bronze pushes in, ``metric_points`` rows and quarantine rows out.
Pure pyarrow and protobuf: no Spark."""

from __future__ import annotations

import base64
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    AGGREGATION_TEMPORALITY_UNSPECIFIED,
    AggregationTemporality,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from exporters.delta.schema import TELEMETRY_PUSHES_SCHEMA, kafka_instance_id
from ingest.limits import DEFAULT_LIMITS
from ingest.push.codec import decompress
from spark_jobs.tables import METRIC_POINTS_SCHEMA
from spark_jobs.transforms import decode as decode_module
from spark_jobs.transforms.decode import (
    BRONZE_COLUMNS,
    DECODED_SCHEMA,
    MAX_BATCH_BYTES,
    MAX_BATCH_ROWS,
    PUSH_BOUNDS,
    PushBounds,
    attributes_key,
    decode_batches,
)
from tests.support.otlp import partly_invalid_payload
from tests.support.paths import LIBRDKAFKA_FIXTURES

FIXTURES = LIBRDKAFKA_FIXTURES
COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TIME = 1_795_391_999_999_999_999
"""2026-11-22T23:59:59.999999999Z: the last nanosecond of a UTC day."""
START = 1_795_300_000_000_000_000
RECEIVED_US = 1_795_392_000_500_000
"""2026-11-23T00:00:00.5Z: the push arrived on the next UTC day."""
POINT_COLUMNS = [name for name in METRIC_POINTS_SCHEMA.names if name not in BRONZE_COLUMNS]
"""Every column a quarantine row has null (``date`` aside)."""


def at(nanos: int) -> datetime:
    return EPOCH + timedelta(microseconds=nanos // 1000)


def kv(key: str, **value: Any) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(**value))


def push(*metrics: Metric, resource: list[KeyValue] | None = None) -> bytes:
    data = MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes=resource or []),
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope(name="producer-1#producer-1", version="2.16.0"),
                        metrics=list(metrics),
                    )
                ],
            )
        ]
    )
    return data.SerializeToString()


def gauge(name: str = "org.apache.kafka.producer.io.ratio", *points: NumberDataPoint) -> Metric:
    return Metric(name=name, gauge=Gauge(data_points=list(points) or [NumberDataPoint(time_unix_nano=TIME)]))


def bronze(payloads: list[bytes]) -> pa.RecordBatch:
    """A ``telemetry_pushes`` batch with every column, in the table's order."""
    n = len(payloads)
    columns: dict[str, list[Any]] = {
        "push_id": [f"push-{i}" for i in range(n)],
        "date": ["2026-11-23"] * n,
        "received_at": [RECEIVED_US] * n,
        "client_instance_id": [kafka_instance_id(uuid.UUID(int=i)) for i in range(n)],  # as bronze has it
        "subscription_id": [7] * n,
        "principal": ["User:alice"] * n,
        "client_id": [f"producer-{i}" for i in range(n)],
        "client_software_name": ["librdkafka"] * n,
        "client_software_version": ["2.16.0"] * n,
        "client_source_address": ["127.0.0.1"] * n,
        "client_source_port": [50000] * n,
        "quota_entity": ["client-id=producer,user=alice"] * n,
        "quota_tags": [[("user", "alice")]] * n,
        "compression_type": [0] * n,
        "terminating": [False] * n,
        "payload_bytes": [len(p) for p in payloads],
        "payload": payloads,
        "writer_id": ["writer-0"] * n,
        "batch_seq": [1] * n,
    }
    return pa.RecordBatch.from_pydict(columns, schema=TELEMETRY_PUSHES_SCHEMA)


def decode(batches: Iterable[pa.RecordBatch], max_rows: int = MAX_BATCH_ROWS) -> list[pa.RecordBatch]:
    out = list(decode_batches(batches, max_rows=max_rows))
    for batch in out:
        assert batch.schema == DECODED_SCHEMA
        assert batch.num_rows <= max_rows
    return out


def rows(*payloads: bytes) -> list[dict[str, Any]]:
    decoded: list[dict[str, Any]] = pa.Table.from_batches(
        decode([bronze(list(payloads))]), DECODED_SCHEMA
    ).to_pylist()
    return decoded


def points(*payloads: bytes) -> list[dict[str, Any]]:
    decoded = rows(*payloads)
    assert all(row["quarantine_reason"] is None and row["payload"] is None for row in decoded)
    return decoded


def test_decoded_schema_is_metric_points_all_nullable_then_quarantine_reason_and_payload() -> None:
    assert DECODED_SCHEMA.names == [*METRIC_POINTS_SCHEMA.names, "quarantine_reason", "payload"]
    assert all(field.nullable for field in DECODED_SCHEMA)
    assert [f.type for f in DECODED_SCHEMA][: len(METRIC_POINTS_SCHEMA)] == METRIC_POINTS_SCHEMA.types
    assert DECODED_SCHEMA.field("quarantine_reason").type == pa.string()
    assert DECODED_SCHEMA.field("payload").type == pa.binary()


def test_bronze_columns_are_telemetry_pushes_columns() -> None:
    assert set(BRONZE_COLUMNS) <= set(TELEMETRY_PUSHES_SCHEMA.names)
    assert BRONZE_COLUMNS[-1] == "payload"


def test_sum_points_carry_temporality_monotonicity_and_integers_widened() -> None:
    def sum_metric(
        name: str, temporality: AggregationTemporality.ValueType, monotonic: bool, point: NumberDataPoint
    ) -> Metric:
        return Metric(
            name=name,
            sum=Sum(data_points=[point], aggregation_temporality=temporality, is_monotonic=monotonic),
        )

    decoded = points(
        push(
            sum_metric(
                "a.total",
                AGGREGATION_TEMPORALITY_DELTA,
                True,
                NumberDataPoint(time_unix_nano=TIME, as_int=42),
            ),
            sum_metric(
                "b.sum",
                AGGREGATION_TEMPORALITY_CUMULATIVE,
                False,
                NumberDataPoint(time_unix_nano=TIME, as_double=2.5),
            ),
            sum_metric(
                "c.sum",
                AGGREGATION_TEMPORALITY_UNSPECIFIED,
                True,
                NumberDataPoint(time_unix_nano=TIME, as_int=-3),
            ),
        )
    )
    got = {
        r["metric_name"]: (r["metric_kind"], r["temporality"], r["is_monotonic"], r["value"]) for r in decoded
    }
    assert got == {
        "a.total": ("sum", "delta", True, 42.0),
        "b.sum": ("sum", "cumulative", False, 2.5),
        "c.sum": ("sum", None, True, -3.0),
    }


def test_gauge_value_is_double_or_widened_int_and_null_when_neither_is_set() -> None:
    decoded = points(
        push(
            gauge(
                "g",
                NumberDataPoint(time_unix_nano=TIME, as_double=1.25, flags=1),
                NumberDataPoint(time_unix_nano=TIME, as_int=7),
                NumberDataPoint(time_unix_nano=TIME, as_double=0.0),
                NumberDataPoint(time_unix_nano=TIME, as_double=-0.0),
                NumberDataPoint(time_unix_nano=TIME, as_int=0),
                NumberDataPoint(time_unix_nano=TIME),
            )
        )
    )
    assert [r["value"] for r in decoded] == [1.25, 7.0, 0.0, 0.0, 0.0, None]
    assert str(decoded[3]["value"]) == "-0.0"
    assert [r["flags"] for r in decoded] == [1, 0, 0, 0, 0, 0]
    assert {(r["metric_kind"], r["temporality"], r["is_monotonic"]) for r in decoded} == {
        ("gauge", None, None)
    }
    assert all(
        r[c] is None for r in decoded for c in ("count", "sum", "explicit_bounds", "quantiles", "scale")
    )


def test_timestamps_are_utc_microseconds_start_zero_is_null_and_date_is_the_utc_day_of_time() -> None:
    decoded = points(
        push(
            gauge(
                "g",
                NumberDataPoint(time_unix_nano=TIME, start_time_unix_nano=START, as_int=1),
                NumberDataPoint(time_unix_nano=TIME + 1, as_int=2),
            )
        )
    )
    assert [(r["start_time"], r["time"], r["date"]) for r in decoded] == [
        (at(START), at(TIME), "2026-11-22"),
        (None, at(TIME + 1), "2026-11-23"),
    ]
    assert decoded[0]["time"] == datetime(2026, 11, 22, 23, 59, 59, 999999, tzinfo=UTC)
    assert DECODED_SCHEMA.field("time").type == pa.timestamp("us", tz="UTC")


def test_histogram_points_keep_bounds_and_counts_and_min_max_sum_only_when_sent() -> None:
    metric = Metric(
        name="org.apache.kafka.producer.request.latency",
        unit="ms",
        histogram=Histogram(
            aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
            data_points=[
                HistogramDataPoint(
                    time_unix_nano=TIME,
                    count=6,
                    sum=12.5,
                    min=0.0,
                    max=9.0,
                    explicit_bounds=[1.0, 5.0],
                    bucket_counts=[1, 2, 3],
                ),
                HistogramDataPoint(time_unix_nano=TIME, count=4, explicit_bounds=[1.0], bucket_counts=[]),
            ],
        ),
    )
    decoded = points(push(metric))
    columns = ("metric_kind", "temporality", "is_monotonic", "count", "sum", "min", "max")
    assert [tuple(r[c] for c in columns) for r in decoded] == [
        ("histogram", "cumulative", None, 6, 12.5, 0.0, 9.0),
        ("histogram", "cumulative", None, 4, None, None, None),
    ]
    assert [(r["explicit_bounds"], r["bucket_counts"]) for r in decoded] == [
        ([1.0, 5.0], [1, 2, 3]),
        ([1.0], []),
    ]
    assert all(r["value"] is None and r["metric_unit"] == "ms" for r in decoded)


def test_exponential_histogram_points_keep_scale_zero_bucket_and_both_ranges() -> None:
    buckets = ExponentialHistogramDataPoint.Buckets
    metric = Metric(
        name="eh",
        exponential_histogram=ExponentialHistogram(
            aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
            data_points=[
                ExponentialHistogramDataPoint(
                    time_unix_nano=TIME,
                    count=10,
                    sum=-3.5,
                    min=-2.0,
                    max=4.0,
                    scale=-2,
                    zero_count=1,
                    zero_threshold=0.001,
                    positive=buckets(offset=-1, bucket_counts=[2, 3]),
                    negative=buckets(offset=4, bucket_counts=[4]),
                ),
                ExponentialHistogramDataPoint(time_unix_nano=TIME, count=0, scale=3),
            ],
        ),
    )
    columns = (
        "metric_kind",
        "temporality",
        "count",
        "sum",
        "min",
        "max",
        "scale",
        "zero_count",
        "zero_threshold",
        "positive_offset",
        "positive_bucket_counts",
        "negative_offset",
        "negative_bucket_counts",
    )
    assert [tuple(r[c] for c in columns) for r in points(push(metric))] == [
        ("exponential_histogram", "delta", 10, -3.5, -2.0, 4.0, -2, 1, 0.001, -1, [2, 3], 4, [4]),
        ("exponential_histogram", "delta", 0, None, None, None, 3, 0, 0.0, 0, [], 0, []),
    ]


def test_summary_points_keep_count_sum_and_quantiles() -> None:
    quantile = SummaryDataPoint.ValueAtQuantile
    metric = Metric(
        name="s",
        summary=Summary(
            data_points=[
                SummaryDataPoint(
                    time_unix_nano=TIME,
                    count=3,
                    sum=6.0,
                    quantile_values=[quantile(quantile=0.5, value=2.0), quantile(quantile=0.99, value=3.0)],
                )
            ]
        ),
    )
    [row] = points(push(metric))
    assert (row["metric_kind"], row["temporality"], row["is_monotonic"], row["count"], row["sum"]) == (
        "summary",
        None,
        None,
        3,
        6.0,
    )
    assert row["quantiles"] == [{"quantile": 0.5, "value": 2.0}, {"quantile": 0.99, "value": 3.0}]


def test_attribute_values_are_written_as_strings_by_type() -> None:
    nested = ArrayValue(
        values=[
            AnyValue(string_value="x"),
            AnyValue(int_value=3),
            AnyValue(double_value=1.5),
            AnyValue(bool_value=False),
            AnyValue(bytes_value=b"\x00\xff"),
            AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)])),
            AnyValue(kvlist_value=KeyValueList(values=[kv("z", int_value=1), kv("a", string_value="b")])),
            AnyValue(),
        ]
    )
    attributes = [
        kv("string", string_value="orders"),
        kv("bool", bool_value=True),
        kv("false", bool_value=False),
        kv("int", int_value=-12),
        kv("double", double_value=0.1),
        kv("bytes", bytes_value=b"\x01\x02\xfe"),
        kv("array", array_value=nested),
        kv("kvlist", kvlist_value=KeyValueList(values=[kv("k", double_value=2.0), kv("b", bool_value=True)])),
        KeyValue(key="unset"),
        KeyValue(key="empty", value=AnyValue()),
    ]
    [row] = points(push(gauge("g", NumberDataPoint(time_unix_nano=TIME, attributes=attributes))))
    expected = {
        "string": "orders",
        "bool": "true",
        "false": "false",
        "int": "-12",
        "double": "0.1",
        "bytes": base64.b64encode(b"\x01\x02\xfe").decode(),
        "array": '["x",3,1.5,false,"AP8=",[1],{"a":"b","z":1},null]',
        "kvlist": '{"b":true,"k":2.0}',
        "unset": "",
        "empty": "",
    }
    assert dict(row["attributes"]) == expected
    assert row["attributes_key"] == attributes_key(expected)


def test_repeated_attribute_key_keeps_the_last_value() -> None:
    attributes = [kv("topic", string_value="a"), kv("node.id", int_value=1), kv("topic", string_value="b")]
    [row] = points(push(gauge("g", NumberDataPoint(time_unix_nano=TIME, attributes=attributes))))
    assert dict(row["attributes"]) == {"topic": "b", "node.id": "1"}
    assert row["attributes_key"] == '{"node.id":"1","topic":"b"}'


def test_attributes_key_is_compact_json_with_sorted_keys() -> None:
    assert attributes_key({}) == "{}"
    assert attributes_key({"topic": "orders", "partition": "3"}) == '{"partition":"3","topic":"orders"}'
    assert attributes_key(MappingProxyType({"b": "1", "a": 'q"'})) == '{"a":"q\\"","b":"1"}'


def test_points_with_the_same_attributes_share_a_key_and_others_do_not() -> None:
    def point(*attributes: KeyValue) -> NumberDataPoint:
        return NumberDataPoint(time_unix_nano=TIME, as_int=1, attributes=list(attributes))

    topic_a, topic_b = kv("topic", string_value="a"), kv("topic", string_value="b")
    first = push(gauge("g", point(topic_a), point(topic_b), point()))
    second = push(gauge("g", point(topic_b), point(kv("topic", int_value=1)), point(topic_a)))
    keys = [(r["push_id"], r["attributes_key"]) for r in points(first, second)]
    assert keys == [
        ("push-0", '{"topic":"a"}'),
        ("push-0", '{"topic":"b"}'),
        ("push-0", "{}"),
        ("push-1", '{"topic":"b"}'),
        ("push-1", '{"topic":"1"}'),
        ("push-1", '{"topic":"a"}'),
    ]


def test_resource_scope_metric_and_push_columns_are_copied_to_each_point() -> None:
    payload = push(
        Metric(
            name="org.apache.kafka.producer.record.queue.time.avg",
            description="The average time in ms record batches spent in the send buffer.",
            unit="ms",
            gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=TIME, as_double=1.0)] * 2),
        ),
        resource=[kv("client_rack", string_value="r1"), kv("transactional_id", string_value="tx")],
    )
    decoded = rows(push(gauge("x")), payload)
    row = decoded[-1]
    assert len(decoded) == 3
    assert {k: row[k] for k in ("push_id", "client_instance_id", "principal", "client_id")} == {
        "push_id": "push-1",
        "client_instance_id": "AAAAAAAAAAAAAAAAAAAAAQ",  # passed through as bronze holds it
        "principal": "User:alice",
        "client_id": "producer-1",
    }
    assert (row["client_software_name"], row["client_software_version"]) == ("librdkafka", "2.16.0")
    assert row["quota_entity"] == "client-id=producer,user=alice"
    assert row["received_at"] == at(RECEIVED_US * 1000)
    assert dict(row["resource_attributes"]) == {"client_rack": "r1", "transactional_id": "tx"}
    assert (row["scope_name"], row["scope_version"]) == ("producer-1#producer-1", "2.16.0")
    assert (row["metric_name"], row["metric_unit"], row["metric_description"]) == (
        "org.apache.kafka.producer.record.queue.time.avg",
        "ms",
        "The average time in ms record batches spent in the send buffer.",
    )
    assert decoded[0]["resource_attributes"] == []


def test_metric_without_data_contributes_no_rows() -> None:
    decoded = points(push(Metric(name="no.data"), gauge("g"), Metric(name="no.points", gauge=Gauge())))
    assert [r["metric_name"] for r in decoded] == ["g"]


def test_columns_are_selected_by_name_whatever_their_order() -> None:
    batch = bronze([push(gauge("g"))])
    shuffled = batch.select(list(reversed(batch.schema.names)))
    [out] = decode([shuffled])
    [row] = out.to_pylist()
    assert (row["push_id"], row["metric_name"], row["client_id"]) == ("push-0", "g", "producer-0")


def test_received_at_in_another_time_zone_is_written_in_utc() -> None:
    batch = bronze([b"not a push"])
    paris = batch.set_column(
        batch.schema.get_field_index("received_at"),
        "received_at",
        batch.column("received_at").cast(pa.timestamp("us", tz="Europe/Paris")),
    )
    [row] = pa.Table.from_batches(decode([paris])).to_pylist()
    assert (row["received_at"], row["date"]) == (at(RECEIVED_US * 1000), "2026-11-23")


def quarantined(decoded: list[dict[str, Any]]) -> dict[str, str]:
    return {r["push_id"]: r["quarantine_reason"] for r in decoded if r["quarantine_reason"] is not None}


def test_garbage_payload_is_quarantined_whole_and_the_other_pushes_decode() -> None:
    good = push(gauge("g"))
    decoded = rows(good, b"\xff\xff\xff\xff garbage", good)
    reasons = quarantined(decoded)
    assert list(reasons) == ["push-1"]
    assert reasons["push-1"].startswith("not OTLP MetricsData: ")
    assert sorted(r["push_id"] for r in decoded if r["quarantine_reason"] is None) == ["push-0", "push-2"]


def test_histogram_with_inconsistent_bucket_counts_quarantines_its_push_with_payload_and_push_columns() -> (
    None
):
    bad = partly_invalid_payload()
    decoded = rows(push(gauge("g")), bad)
    assert quarantined(decoded) == {
        "push-1": "metric org.apache.kafka.latency: histogram point with 3 bounds and 3 bucket counts"
    }
    [row] = [r for r in decoded if r["push_id"] == "push-1"]
    assert row["payload"] == bad
    assert (row["client_id"], row["principal"], row["quota_entity"]) == (
        "producer-1",
        "User:alice",
        "client-id=producer,user=alice",
    )
    assert (row["received_at"], row["date"]) == (at(RECEIVED_US * 1000), "2026-11-23")
    assert all(row[c] is None for c in POINT_COLUMNS if c != "date")
    assert [r["metric_name"] for r in decoded if r["push_id"] == "push-0"] == ["g"]


def test_push_without_payload_is_quarantined() -> None:
    batch = bronze([push(gauge("g")), b""])
    batch = batch.set_column(
        batch.schema.get_field_index("payload"), "payload", pa.array([b"", None], pa.binary())
    )
    decoded = pa.Table.from_batches(decode([batch])).to_pylist()
    assert quarantined(decoded) == {"push-1": "no payload"}
    assert [r["push_id"] for r in decoded] == ["push-1"]  # an empty payload is an empty MetricsData


def test_point_with_time_zero_quarantines_its_push() -> None:
    bad = push(gauge("g"), gauge("late", NumberDataPoint(time_unix_nano=TIME), NumberDataPoint(as_int=1)))
    assert quarantined(rows(bad)) == {"push-0": "metric late: data point with time_unix_nano 0"}


@pytest.mark.parametrize(
    ("metric", "reason"),
    [
        (
            Metric(
                name="h",
                histogram=Histogram(
                    data_points=[HistogramDataPoint(time_unix_nano=TIME, count=2**63, bucket_counts=[])]
                ),
            ),
            "metric h: count 9223372036854775808 out of range",
        ),
        (
            Metric(
                name="h",
                histogram=Histogram(
                    data_points=[
                        HistogramDataPoint(
                            time_unix_nano=TIME, explicit_bounds=[1.0], bucket_counts=[0, 2**64 - 1]
                        )
                    ]
                ),
            ),
            "metric h: bucket count 18446744073709551615 out of range",
        ),
        (
            Metric(
                name="e",
                exponential_histogram=ExponentialHistogram(
                    data_points=[ExponentialHistogramDataPoint(time_unix_nano=TIME, zero_count=2**63)]
                ),
            ),
            "metric e: zero count 9223372036854775808 out of range",
        ),
        (
            Metric(
                name="s",
                summary=Summary(data_points=[SummaryDataPoint(time_unix_nano=TIME, count=2**64 - 1)]),
            ),
            "metric s: count 18446744073709551615 out of range",
        ),
        (
            gauge("g", NumberDataPoint(time_unix_nano=TIME, flags=2**31)),
            "metric g: flags 2147483648 out of range",
        ),
    ],
    ids=["histogram count", "histogram bucket count", "exponential zero count", "summary count", "flags"],
)
def test_values_the_columns_cannot_hold_quarantine_their_push(metric: Metric, reason: str) -> None:
    assert quarantined(rows(push(metric))) == {"push-0": reason}


def length_delimited(field: int, content: bytes) -> bytes:
    """One length-delimited protobuf field (lengths under 128)."""
    assert len(content) < 128
    return bytes([field << 3 | 2, len(content)]) + content


def test_attribute_that_is_not_a_key_value_quarantines_its_push() -> None:
    point = NumberDataPoint(time_unix_nano=TIME).SerializeToString() + length_delimited(7, b"\x0a\x05ab")
    metric = Metric(name="g").SerializeToString() + length_delimited(5, length_delimited(1, point))
    payload = length_delimited(1, length_delimited(2, length_delimited(2, metric)))
    [reason] = quarantined(rows(payload)).values()
    assert reason.startswith("attributes are not OTLP KeyValues: ")


def test_every_output_batch_has_the_decoded_schema() -> None:
    payloads = [push(gauge("g")), b"bad", partly_invalid_payload(), push(gauge("h"))]
    out = list(decode_batches([bronze(payloads)]))
    assert len(out) == 2
    assert all(batch.schema == DECODED_SCHEMA for batch in out)


def test_empty_batch_yields_nothing() -> None:
    assert decode([bronze([])]) == []
    assert decode([]) == []


def test_a_round_ends_before_a_push_that_would_take_it_over_the_cap_and_pushes_are_never_split() -> None:
    three_points = push(gauge("g", *[NumberDataPoint(time_unix_nano=TIME, as_int=i) for i in range(3)]))
    out = decode([bronze([three_points] * 9), bronze([three_points, b"bad", b"bad"])], max_rows=5)
    # 3 + 3 > 5: every push is a round of its own, and no batch goes over the cap
    assert [b.num_rows for b in out] == [3] * 10 + [2]
    table = pa.Table.from_batches(out)
    assert [b.column("push_id").unique().to_pylist() for b in out[:10]] == [
        [f"push-{i}"] for i in range(9)
    ] + [["push-0"]]
    first = Counter({f"push-{i}": 3 for i in range(9)})
    second = Counter({"push-0": 3, "push-1": 1, "push-2": 1})
    assert Counter(table.column("push_id").to_pylist()) == first + second


def test_default_cap_splits_a_big_push() -> None:
    many = push(
        gauge("g", *[NumberDataPoint(time_unix_nano=TIME, as_int=i) for i in range(MAX_BATCH_ROWS + 5)])
    )
    out = decode([bronze([many])])
    assert [b.num_rows for b in out] == [MAX_BATCH_ROWS, 5]
    assert out[1].column("value").to_pylist() == [float(MAX_BATCH_ROWS + i) for i in range(5)]


def test_librdkafka_captures_decode_into_as_many_org_apache_kafka_points_as_they_hold() -> None:
    files = sorted(FIXTURES.glob("*.bin"))
    payloads = []
    for file in files:
        match = re.search(r"-(none|gzip|snappy|lz4|zstd)", file.name)
        assert match is not None
        payloads.append(decompress(file.read_bytes(), COMPRESSION[match.group(1)], 64 << 20))
    expected = {}
    for i, payload in enumerate(payloads):
        data = MetricsData.FromString(payload)
        expected[f"push-{i}"] = sum(
            len(getattr(metric, kind).data_points)
            for resource_metrics in data.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
            if (kind := metric.WhichOneof("data")) is not None
        )
    decoded = points(*payloads)
    assert len(files) == 22
    assert Counter(r["push_id"] for r in decoded) == expected
    assert all(r["metric_name"].startswith("org.apache.kafka.") for r in decoded)
    assert {r["metric_kind"] for r in decoded} == {"sum", "gauge"}
    assert all(
        r["temporality"] == "delta" and r["is_monotonic"] for r in decoded if r["metric_kind"] == "sum"
    )
    assert all(r["value"] is not None and r["time"] is not None for r in decoded)
    assert {r["attributes_key"] for r in decoded} >= {"{}", '{"node.id":"1"}'}


# Per-push bounds (F14): one push can never fail a decode run, and what it costs is bounded.


def wire(number: int, content: bytes) -> bytes:
    """One length-delimited protobuf field, any length."""
    return _varint(number << 3 | 2) + _varint(len(content)) + content


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


WIRE_POINT = wire(1, b"\x19" + TIME.to_bytes(8, "little"))
"""``data_points`` holding a ``NumberDataPoint`` with only ``time_unix_nano`` set: 11 bytes."""


def gauge_of(points: int) -> bytes:
    """A push of one gauge ``g`` with ``points`` points, written straight on the wire (fast to build)."""
    return wire(1, wire(2, wire(2, wire(1, b"g") + wire(5, WIRE_POINT * points))))


def with_column(batch: pa.RecordBatch, name: str, values: list[Any]) -> pa.RecordBatch:
    index = batch.schema.get_field_index(name)
    return batch.set_column(
        index, batch.schema.field(index), pa.array(values, batch.schema.field(index).type)
    )


def per_push(batches: list[pa.RecordBatch]) -> tuple[Counter[str], dict[str, str]]:
    """Point rows per push id, and the quarantine reason per push id."""
    table = pa.Table.from_batches(batches, DECODED_SCHEMA)
    decoded = table.select(["push_id", "quarantine_reason"]).to_pylist()
    points_of = Counter(r["push_id"] for r in decoded if r["quarantine_reason"] is None)
    return points_of, quarantined(decoded)


def test_default_bounds_are_above_what_the_sink_accepts() -> None:
    assert (
        PUSH_BOUNDS.max_payload_bytes,
        PUSH_BOUNDS.max_text_bytes,
        PUSH_BOUNDS.max_data_points,
        PUSH_BOUNDS.max_metric_fields,
        PUSH_BOUNDS.max_repeated_bytes,
    ) == (64 << 20, 64 << 10, 200_000, 1_000_000, 1 << 30)
    assert PUSH_BOUNDS.max_data_points > DEFAULT_LIMITS.max_data_points
    assert PUSH_BOUNDS.max_text_bytes > 4 * DEFAULT_LIMITS.max_client_id_chars
    assert (MAX_BATCH_ROWS, MAX_BATCH_BYTES) == (65_536, 64 << 20)


def test_payload_over_max_payload_bytes_is_quarantined_unparsed_and_its_batch_mates_decode() -> None:
    limit = PUSH_BOUNDS.max_payload_bytes
    good = push(gauge("g"))
    points_of, reasons = per_push(decode([bronze([good, b"\xff" * (limit + 1), b"\xff" * limit, good])]))
    assert reasons["push-1"] == f"payload of {limit + 1} bytes over the max_payload_bytes bound ({limit})"
    assert reasons["push-2"].startswith("not OTLP MetricsData: ")  # at the bound: parsed (and refused)
    assert points_of == {"push-0": 1, "push-3": 1}


@pytest.mark.parametrize(
    "column",
    [
        "push_id",
        "client_instance_id",
        "principal",
        "client_id",
        "client_software_name",
        "client_software_version",
        "quota_entity",
    ],
)
def test_push_text_over_max_text_bytes_is_quarantined_and_at_the_bound_decodes(column: str) -> None:
    limit = PUSH_BOUNDS.max_text_bytes
    batch = bronze([push(gauge("g"))] * 3)
    texts = batch.column(column).to_pylist()
    texts[1], texts[2] = "é" * (limit // 2) + "x", "é" * (limit // 2)  # UTF-8 bytes, not characters
    out = decode([with_column(batch, column, texts)])
    table = pa.Table.from_batches(out, DECODED_SCHEMA)
    reasons = [r for r in table.column("quarantine_reason").to_pylist() if r is not None]
    assert reasons == [f"{column} of {limit + 1} bytes over the max_text_bytes bound ({limit})"]
    assert table.num_rows == 3
    assert table.filter(pc.is_null(table.column("quarantine_reason"))).column(column).to_pylist() == [
        texts[0],
        texts[2],
    ]


def test_push_over_max_data_points_is_quarantined_and_a_push_at_the_bound_decodes_whole() -> None:
    limit = PUSH_BOUNDS.max_data_points
    good = push(gauge("g"))
    points_of, reasons = per_push(decode([bronze([good, gauge_of(limit + 1), gauge_of(limit), good])]))
    assert reasons == {"push-1": f"at least {limit + 1} data points over the max_data_points bound ({limit})"}
    assert points_of == {"push-0": 1, "push-2": limit, "push-3": 1}


def test_millions_of_empty_points_are_counted_on_the_wire_and_refused_without_parsing() -> None:
    """64 MiB of two-byte points would take upb gigabytes to parse; the wire count stops at the bound."""
    payload = wire(1, wire(2, wire(2, wire(5, b"\x0a\x00" * ((32 << 20) - 16)))))
    assert len(payload) <= PUSH_BOUNDS.max_payload_bytes
    points_of, reasons = per_push(decode([bronze([payload, push(gauge("g"))])]))
    assert reasons == {"push-0": "at least 200001 data points over the max_data_points bound (200000)"}
    assert points_of == {"push-1": 1}


def test_push_over_max_metric_fields_is_quarantined_and_one_at_the_bound_decodes() -> None:
    limit = PUSH_BOUNDS.max_metric_fields

    def empty_metrics(fields: int) -> bytes:  # resource_metrics and scope_metrics count as one each
        return wire(1, wire(2, b"\x12\x00" * (fields - 2)))

    good = push(gauge("g"))
    points_of, reasons = per_push(decode([bronze([empty_metrics(limit + 1), empty_metrics(limit), good])]))
    over = f"at least {limit + 1} fields around the data points"
    assert reasons == {"push-0": f"{over} over the max_metric_fields bound ({limit})"}
    assert points_of == {"push-2": 1}  # push-1 decodes to no point at all


def text_bytes(batch: pa.RecordBatch, row: int) -> int:
    names = [n for n in BRONZE_COLUMNS if n not in ("received_at", "payload")]
    return sum(len(str(batch.column(n)[row]).encode()) for n in names)


def test_many_points_with_a_large_client_id_are_quarantined_before_being_expanded() -> None:
    """F14's poison push: 100,000 points each repeating a 60 KB client id would be 6 GB of rows."""
    batch = bronze([push(gauge("g")), gauge_of(100_000), push(gauge("h"))])
    batch = with_column(batch, "client_id", ["a", "x" * 60_000, "b"])
    repeated = 100_000 * (text_bytes(batch, 1) + len("g") + len("gauge"))
    points_of, reasons = per_push(decode([batch]))
    over = f"{repeated} bytes of text repeated into its rows"
    assert reasons == {"push-1": f"{over} over the max_repeated_bytes bound (1073741824)"}
    assert points_of == {"push-0": 1, "push-2": 1}


def test_max_repeated_bytes_counts_push_resource_scope_and_metric_text_per_point() -> None:
    payload = push(
        Metric(
            name="m",
            unit="ms",
            description="d",
            gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=TIME)] * 10),
        ),
        resource=[kv("rack", string_value="r1")],
    )
    batch = bronze([payload, payload])
    per_row = (
        text_bytes(batch, 0)
        + len(kv("rack", string_value="r1").SerializeToString())
        + len("mmsdgaugeproducer-1#producer-12.16.0")
    )
    assert text_bytes(batch, 1) == text_bytes(batch, 0)
    at_bound = PushBounds(max_repeated_bytes=10 * per_row)
    points_of, reasons = per_push(list(decode_batches([batch], bounds=at_bound)))
    assert (points_of, reasons) == ({"push-0": 10, "push-1": 10}, {})
    under = PushBounds(max_repeated_bytes=10 * per_row - 1)
    points_of, reasons = per_push(list(decode_batches([batch], bounds=under)))
    assert points_of == {}
    over = f"{10 * per_row} bytes of text repeated into its rows"
    assert set(reasons.values()) == {f"{over} over the max_repeated_bytes bound ({10 * per_row - 1})"}


def test_output_batches_are_cut_by_bytes_so_repeated_text_is_copied_one_batch_at_a_time() -> None:
    """1,000 points repeating a 60 KB client id (60 MB of rows, under the push bound) come out in
    batches of about ``max_bytes``: never more than that plus one row is copied at once."""
    batch = with_column(bronze([gauge_of(1_000), push(gauge("g"))]), "client_id", ["x" * 60_000, "c"])
    max_bytes = 4 << 20
    out = list(decode_batches([batch], max_bytes=max_bytes))
    assert len(out) == 15  # 1,000 rows of about 60 KB in 4 MiB batches (push-1's row in the last)
    assert all(b.column("client_id").nbytes <= max_bytes + 60_000 for b in out)
    assert per_push(out) == ({"push-0": 1_000, "push-1": 1}, {})


def test_a_round_ends_before_a_push_that_would_take_it_over_max_bytes_of_payload() -> None:
    padded = push(gauge("g")) + wire(15, bytes(100_000))  # an unknown field: parsed, then ignored
    out = list(decode_batches([bronze([padded] * 5)], max_bytes=2 * len(padded)))
    assert [b.column("push_id").to_pylist() for b in out] == [
        ["push-0", "push-1"],
        ["push-2", "push-3"],
        ["push-4"],
    ]


def test_any_exception_decoding_a_push_quarantines_that_push_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault the tests cannot cause for real (a RecursionError, a MemoryError) in a point decoder."""

    def fail(points: list[Any]) -> dict[str, list[Any]]:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setitem(decode_module._GROUP_DECODERS, "summary", fail)
    summary = Metric(name="s", summary=Summary(data_points=[SummaryDataPoint(time_unix_nano=TIME)]))
    points_of, reasons = per_push(decode([bronze([push(gauge("g")), push(summary), push(gauge("h"))])]))
    assert reasons == {"push-1": "decode failed: RecursionError: maximum recursion depth exceeded"}
    assert points_of == {"push-0": 1, "push-2": 1}


def test_a_round_that_cannot_be_built_is_decoded_push_by_push(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure only when the round's Arrow columns are built: the pushes are retried one by one, and
    only the one that fails alone is quarantined."""
    real = decode_module.attributes_key

    def fail_on_poison(attrs: Mapping[str, str]) -> str:
        if "poison" in attrs:
            raise MemoryError
        return real(attrs)

    monkeypatch.setattr(decode_module, "attributes_key", fail_on_poison)
    poison = push(gauge("p", NumberDataPoint(time_unix_nano=TIME, attributes=[kv("poison", int_value=1)])))
    points_of, reasons = per_push(decode([bronze([push(gauge("g")), poison, push(gauge("h"))])]))
    assert reasons == {"push-1": "decode failed: MemoryError"}
    assert points_of == {"push-0": 1, "push-2": 1}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (gauge_of(40_000)[:-1], "not OTLP MetricsData: truncated"),
        (gauge_of(40_000) + b"\x0b", "not OTLP MetricsData: wire type 3"),
        (gauge_of(40_000) + b"\x80" * 11, "not OTLP MetricsData: truncated or overlong varint"),
    ],
    ids=["truncated", "group", "overlong varint"],
)
def test_a_big_payload_the_wire_count_cannot_read_is_quarantined_as_not_otlp(
    payload: bytes, reason: str
) -> None:
    assert len(payload) > 2 * PUSH_BOUNDS.max_data_points  # big enough to be counted first
    points_of, reasons = per_push(decode([bronze([payload, push(gauge("g"))])]))
    assert reasons == {"push-0": reason}
    assert points_of == {"push-1": 1}


UNKNOWN = (
    bytes([20 << 3 | 0, 1, 0x85, 0x01])
    + bytes([21 << 3 | 1, 1])
    + bytes(8)
    + bytes([22 << 3 | 5, 1])
    + bytes(4)
)
"""Unknown fields of the other wire types (varint, fixed64, fixed32): parsed, kept and ignored."""


def _valid() -> bytes:
    """A push with a gauge and a histogram, and unknown fields at every level the wire count walks."""
    point = NumberDataPoint(time_unix_nano=TIME, as_int=1, attributes=[kv("topic", string_value="t")])
    histogram_point = HistogramDataPoint(time_unix_nano=TIME, explicit_bounds=[1.0], bucket_counts=[1, 2])
    g = wire(1, b"g") + wire(5, wire(1, point.SerializeToString()) + UNKNOWN) + UNKNOWN
    h = wire(1, b"h") + wire(9, wire(1, histogram_point.SerializeToString()) + UNKNOWN)
    scope = wire(2, g) + wire(2, h) + UNKNOWN
    resource = wire(1, Resource(attributes=[kv("rack", string_value="r1")]).SerializeToString())
    return wire(1, resource + wire(2, scope) + UNKNOWN) + UNKNOWN


VALID = _valid()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid push with a few bytes overwritten, inserted or cut."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["set", "insert", "cut"]))
        if action == "set":
            data[at] = draw(st.integers(0, 255))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=150)
@given(st.lists(st.binary(max_size=64) | mutated(), min_size=1, max_size=6))
def test_decode_never_raises_and_gives_each_bad_push_exactly_one_row(payloads: list[bytes]) -> None:
    good = push(gauge("control"))
    batch = bronze([*payloads, good])
    out = decode([batch], max_rows=4)
    table = pa.Table.from_batches(out, DECODED_SCHEMA)
    points_of, reasons = per_push(out)
    assert pc.sum(pc.is_valid(table.column("quarantine_reason"))).as_py() == len(reasons)  # one row each
    assert not set(points_of) & set(reasons)  # a push is decoded whole or quarantined whole
    assert points_of[f"push-{len(payloads)}"] == 1
    for row, payload in enumerate(payloads):
        push_id = f"push-{row}"
        if push_id in points_of:  # it decoded: as many rows as it has points
            data = MetricsData.FromString(payload)
            assert points_of[push_id] == sum(
                len(getattr(m, kind).data_points)
                for r in data.resource_metrics
                for s in r.scope_metrics
                for m in s.metrics
                if (kind := m.WhichOneof("data")) is not None
            )


@settings(max_examples=150)
@given(st.lists(mutated(), min_size=1, max_size=4))
def test_the_wire_count_refuses_nothing_the_parser_accepts_unless_a_bound_or_a_group(
    payloads: list[bytes],
) -> None:
    """Bounds that make every payload over 4 bytes be counted on the wire first: each push ends the same
    as without the count, unless it is over a bound or holds a protobuf group (which OTLP never uses)."""
    counted_first = PushBounds(max_data_points=2)
    plain = per_push(decode([bronze(payloads)]))
    counted = per_push(list(decode_batches([bronze(payloads)], bounds=counted_first)))
    for row in range(len(payloads)):
        push_id = f"push-{row}"
        reason = counted[1].get(push_id, "")
        if "bound" in reason or "wire type 3" in reason or "wire type 4" in reason:
            continue
        assert (plain[0][push_id], push_id in plain[1]) == (counted[0][push_id], push_id in counted[1])
