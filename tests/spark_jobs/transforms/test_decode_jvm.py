"""``spark_jobs.transforms.decode_jvm`` with the JVM decoder of ``spark_jobs.jvm`` (built by ``make
setup``): for every push, the rows are exactly the Python decoder's, row for row and value for value;
the JVM decoder answers for the pushes a fleet sends and leaves every doubtful one to Python, which
decides (and words) every quarantine."""

from __future__ import annotations

import random
import re
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_CUMULATIVE,
    AGGREGATION_TEMPORALITY_DELTA,
    AGGREGATION_TEMPORALITY_UNSPECIFIED,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
    Summary,
    SummaryDataPoint,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from ingest.push.codec import decompress
from spark_jobs.jobs.decode import decode
from spark_jobs.jvm import JAR, register
from spark_jobs.transforms.decode import PUSH_BOUNDS
from spark_jobs.transforms.decode_jvm import FUNCTIONS
from tests.spark_jobs.transforms.test_decode import (
    COMPRESSION,
    FIXTURES,
    START,
    TIME,
    VALID,
    bronze,
    gauge,
    kv,
    push,
)

pytestmark = pytest.mark.spark

DAY_NANOS = 86_400 * 10**9


def frame(spark: SparkSession, payloads: list[bytes | None], **columns: list[Any]) -> DataFrame:
    batch = bronze([p or b"" for p in payloads])
    table = pa.Table.from_batches([batch])
    payload = pa.array(payloads, pa.binary())
    table = table.set_column(table.schema.get_field_index("payload"), "payload", payload)
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.string()))
    return spark.createDataFrame(table)


def canonical(rows: DataFrame) -> list[str]:
    """Every row, every value (maps with their entries in order, floats by repr), sorted."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return [(k, plain(v)) for k, v in value.items()]
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, float):
            return repr(value)
        if hasattr(value, "asDict"):
            return plain(value.asDict())
        return value

    return sorted(repr([(k, plain(v)) for k, v in row.asDict().items()]) for row in rows.collect())


def taken_by_jvm(spark: SparkSession, bronze_rows: DataFrame) -> list[bool]:
    """Per push (in push id order), whether the JVM decoder answers for it."""
    assert register(spark, FUNCTIONS)
    answered = bronze_rows.select(
        "push_id",
        F.call_function(
            "telemetry_otlp_decodable",
            F.col("payload"),
            F.lit(0).cast("long"),
            F.lit(PUSH_BOUNDS.max_repeated_bytes).cast("long"),
            F.lit(400_000).cast("long"),
        ).alias("taken"),
    )
    by_id = {row.push_id: bool(row.taken) for row in answered.collect()}
    return [by_id[f"push-{i}"] for i in range(len(by_id))]


def assert_same_rows(spark: SparkSession, bronze_rows: DataFrame) -> list[str]:
    jvm, python = canonical(decode(bronze_rows)), canonical(decode(bronze_rows, jvm=False))
    assert jvm == python
    return jvm


def test_the_jar_is_built_and_on_the_session_classpath(spark: SparkSession) -> None:
    assert JAR.is_file(), "make setup builds it (python -m spark_jobs.jvm)"
    assert str(JAR) in (spark.conf.get("spark.jars", "") or "").split(",")
    assert register(spark, FUNCTIONS)


def test_librdkafka_captures_decode_in_the_jvm_into_the_python_decoders_rows(spark: SparkSession) -> None:
    payloads: list[bytes | None] = []
    for file in sorted(FIXTURES.glob("*.bin")):
        match = re.search(r"-(none|gzip|snappy|lz4|zstd)", file.name)
        assert match is not None
        payloads.append(decompress(file.read_bytes(), COMPRESSION[match.group(1)], 64 << 20))
    bronze_rows = frame(spark, payloads)
    assert all(taken_by_jvm(spark, bronze_rows))
    assert len(assert_same_rows(spark, bronze_rows)) == 260  # the points the 22 captures hold


def every_kind() -> bytes:
    attributes = [kv("topic", string_value="orders"), kv("partition", int_value=-3)]
    return push(
        Metric(
            name="m.sum.cumulative",
            unit="By",
            description="bytes",
            sum=Sum(
                aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
                is_monotonic=True,
                data_points=[
                    NumberDataPoint(time_unix_nano=TIME, start_time_unix_nano=START, as_int=2**62 + 1),
                    NumberDataPoint(time_unix_nano=TIME + 1, as_int=-(2**63), attributes=attributes),
                ],
            ),
        ),
        Metric(
            name="m.sum.delta",
            sum=Sum(
                aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
                data_points=[NumberDataPoint(time_unix_nano=TIME, as_double=-0.0, flags=1)],
            ),
        ),
        Metric(
            name="m.sum.unspecified",
            sum=Sum(
                aggregation_temporality=AGGREGATION_TEMPORALITY_UNSPECIFIED,
                data_points=[NumberDataPoint(time_unix_nano=TIME, as_double=float("nan"))],
            ),
        ),
        gauge(
            "m.gauge",
            NumberDataPoint(time_unix_nano=TIME, as_double=0.1),
            NumberDataPoint(time_unix_nano=TIME, as_int=0),
            NumberDataPoint(time_unix_nano=TIME),  # neither set: no value
            NumberDataPoint(time_unix_nano=TIME, as_double=float("inf"), attributes=attributes),
        ),
        Metric(
            name="m.histogram",
            histogram=Histogram(
                aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA,
                data_points=[
                    HistogramDataPoint(
                        time_unix_nano=TIME,
                        start_time_unix_nano=START,
                        count=5,
                        sum=12.5,
                        min=0.5,
                        max=9.0,
                        explicit_bounds=[1.0, 5.0],
                        bucket_counts=[1, 3, 1],
                    ),
                    HistogramDataPoint(time_unix_nano=TIME, count=0),  # no sum, min, max, buckets
                ],
            ),
        ),
        Metric(
            name="m.exponential",
            exponential_histogram=ExponentialHistogram(
                aggregation_temporality=AGGREGATION_TEMPORALITY_CUMULATIVE,
                data_points=[
                    ExponentialHistogramDataPoint(
                        time_unix_nano=TIME,
                        count=9,
                        sum=3.0,
                        scale=-2,
                        zero_count=1,
                        zero_threshold=1e-9,
                        positive=ExponentialHistogramDataPoint.Buckets(offset=-4, bucket_counts=[1, 2, 3]),
                        negative=ExponentialHistogramDataPoint.Buckets(offset=7, bucket_counts=[2]),
                    ),
                    ExponentialHistogramDataPoint(time_unix_nano=TIME, scale=20),
                ],
            ),
        ),
        Metric(
            name="m.summary",
            summary=Summary(
                data_points=[
                    SummaryDataPoint(
                        time_unix_nano=TIME,
                        count=4,
                        sum=10.0,
                        quantile_values=[
                            SummaryDataPoint.ValueAtQuantile(quantile=0.5, value=2.0),
                            SummaryDataPoint.ValueAtQuantile(quantile=0.99, value=4.0),
                        ],
                    ),
                    SummaryDataPoint(time_unix_nano=TIME),
                ]
            ),
        ),
        Metric(name="m.nodata"),
        Metric(name="m.empty", gauge=Gauge()),
        resource=[kv("service.name", string_value="svc"), kv("host", string_value="h1")],
    )


def texts() -> bytes:
    """Attribute values of every type the JVM reproduces, and keys that JSON must escape and order."""
    attributes = [
        kv("b", bool_value=True),
        kv("f", bool_value=False),
        kv("i", int_value=-(2**63)),
        kv("bytes", bytes_value=b"\x00\xff\xfe binary"),
        kv("unset"),
        kv("empty", string_value=""),
        kv('quote"back\\slash', string_value="tab\tnew\nline\r\x08\x0c\x01\x7f"),
        kv("é", string_value="ü"),
        kv("\U0001f600", string_value="astral \U0001f600"),
        kv(
            "\uffff", string_value="last of the BMP"
        ),  # before the astral key by code point, after it by UTF-16 unit
        kv("\u2028", string_value="line separator"),
        kv("Upper", string_value="u"),
        kv("b", bool_value=False),  # a repeated key: the last value, in the first one's place
    ]
    return push(
        gauge("m.attributes", NumberDataPoint(time_unix_nano=TIME, as_int=1, attributes=attributes)),
        resource=[kv("é", string_value="\U0001f600"), kv("z", int_value=1)],
    )


def times() -> bytes:
    points = [
        NumberDataPoint(time_unix_nano=1, as_int=1),  # the first nanosecond after the epoch
        NumberDataPoint(time_unix_nano=DAY_NANOS - 1, start_time_unix_nano=1, as_int=1),
        NumberDataPoint(time_unix_nano=DAY_NANOS, start_time_unix_nano=999, as_int=1),
        NumberDataPoint(time_unix_nano=2**63 - 1, start_time_unix_nano=2**63 - 1000, as_int=1),  # 2262
        NumberDataPoint(time_unix_nano=TIME, as_int=1, flags=2**31 - 1),
    ]
    return push(gauge("m.times", *points))


def test_every_kind_attribute_type_and_time_decodes_in_the_jvm_into_the_python_decoders_rows(
    spark: SparkSession,
) -> None:
    bronze_rows = frame(spark, [every_kind(), texts(), times(), push()])
    assert taken_by_jvm(spark, bronze_rows) == [True, True, True, True]
    rows = assert_same_rows(spark, bronze_rows)
    assert len(rows) == 4 + 4 + 2 + 2 + 2 + 1 + 5


def double_attribute() -> bytes:
    return push(
        gauge("m", NumberDataPoint(time_unix_nano=TIME, as_int=1, attributes=[kv("d", double_value=0.1)]))
    )


def list_attributes() -> bytes:
    array = AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="x")]))
    kvlist = AnyValue(kvlist_value=KeyValueList(values=[kv("k", double_value=1e100)]))
    return push(
        gauge(
            "m",
            NumberDataPoint(
                time_unix_nano=TIME,
                as_int=1,
                attributes=[KeyValue(key="a", value=array), KeyValue(key="l", value=kvlist)],
            ),
        )
    )


def histogram(**point: Any) -> bytes:
    return push(
        Metric(name="h", histogram=Histogram(data_points=[HistogramDataPoint(time_unix_nano=TIME, **point)]))
    )


def bad_utf8_name() -> bytes:
    good = push(gauge("NAME", NumberDataPoint(time_unix_nano=TIME, as_int=1)))
    return good.replace(b"NAME", b"N\xffME")


def big() -> bytes:
    """Over the size past which the Python decoder counts on the wire (400 KB): Python's to decode."""
    points = [
        NumberDataPoint(time_unix_nano=TIME, as_int=i, attributes=[kv("i", int_value=i)])
        for i in range(30_000)
    ]
    return push(gauge("m.big", *points))


def test_pushes_the_jvm_is_not_sure_of_go_to_python_which_decodes_or_quarantines_them(
    spark: SparkSession,
) -> None:
    payloads: list[bytes | None] = [
        double_attribute(),  # decodes, in Python
        list_attributes(),  # decodes, in Python
        big(),  # decodes, in Python
        histogram(explicit_bounds=[1.0], bucket_counts=[1, 2, 3]),  # quarantined
        histogram(count=2**63),  # quarantined: over int64
        histogram(bucket_counts=[2**64 - 1]),  # quarantined
        push(gauge("m", NumberDataPoint(time_unix_nano=0, as_int=1))),  # quarantined: time 0
        push(gauge("m", NumberDataPoint(time_unix_nano=TIME, as_int=1, flags=2**31))),  # quarantined
        push(gauge("m", NumberDataPoint(time_unix_nano=2**63, as_int=1))),  # past 2262: decodes, in Python
        # quarantined: a start time past what Arrow's int64 takes
        push(gauge("m", NumberDataPoint(time_unix_nano=TIME, start_time_unix_nano=2**64 - 1, as_int=1))),
        bad_utf8_name(),  # quarantined: not OTLP
        b"\xff\xff\xff garbage",  # quarantined: not OTLP
        None,  # quarantined: no payload
        push(gauge("m.control")),  # the JVM's: its batch mates change nothing
        push(gauge("m.long-client-id")),  # quarantined: client_id over max_text_bytes
    ]
    client_ids = [f"producer-{i}" for i in range(len(payloads))]
    client_ids[-1] = "x" * (PUSH_BOUNDS.max_text_bytes + 1)
    bronze_rows = frame(spark, payloads, client_id=client_ids)
    taken = taken_by_jvm(spark, bronze_rows)
    # the last one's payload is the JVM's; its client id is held to max_text_bytes before (in Spark)
    assert taken == [False] * 13 + [True, True]
    rows = assert_same_rows(spark, bronze_rows)
    reasons = [r for r in rows if "'quarantine_reason', None" not in r]
    assert len(reasons) == 10  # the Python decoder's quarantine rows, as it words them


def mutations(seed: int, count: int) -> list[bytes | None]:
    """``count`` valid pushes with a few bytes overwritten, inserted or cut (seeded)."""
    rng = random.Random(seed)
    sources = [VALID, every_kind(), texts()]
    out: list[bytes | None] = []
    for _ in range(count):
        data = bytearray(rng.choice(sources))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            action = rng.choice(["set", "insert", "cut"])
            if action == "set":
                data[at] = rng.randrange(256)
            elif action == "insert":
                data[at:at] = rng.randbytes(rng.randint(1, 4))
            else:
                del data[at : at + rng.randint(1, 8)]
        out.append(bytes(data))
    return out


def test_mutated_pushes_decode_alike_in_the_jvm_and_in_python(spark: SparkSession) -> None:
    payloads = mutations(seed=714, count=600)
    bronze_rows = frame(spark, payloads)
    taken = taken_by_jvm(spark, bronze_rows)
    assert 0 < sum(taken) < len(taken)  # both decoders had pushes to answer for
    assert_same_rows(spark, bronze_rows)
