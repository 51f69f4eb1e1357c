"""The decode as a Spark frame, with the JVM decoder (``spark_jobs.jvm``) in front of the Python one.

``decoded(bronze, jvm=True)`` gives the rows of ``transforms.decode.decode_batches`` (``DECODED_SCHEMA``):
each push that the JVM decoder answers for is decoded in Spark's JVM (``telemetry_otlp_points``: per
push, what its points share once (resources, metric headers, attribute sets) and its points, which are
exploded and look those up; the push's own columns are Spark's), and every other push
goes to the Python decoder in ``mapInArrow``: the pushes over a text bound, without a payload, or that
the JVM decoder leaves to it (``telemetry_otlp_decodable`` is false: a payload that does not parse, a
point that breaks the data model, a payload big enough for the wire count, attribute values whose text
it does not reproduce). So the Python decoder alone decides every quarantine and its reason, and the
JVM decoder's rows are exactly the Python decoder's for the pushes it takes (a test checks them row for
row). With ``jvm=False``, or when the jar is not on the classpath, the Python decoder does it all.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.pandas.types import from_arrow_schema

from spark_jobs.transforms.decode import (
    BRONZE_COLUMNS,
    DECODED_SCHEMA,
    PUSH_BOUNDS,
    PUSH_TEXT_COLUMNS,
    PushBounds,
    decode_batches,
)

__all__ = ["FUNCTIONS", "decoded"]

_HEADER: Final = (
    "scope_name string, scope_version string, metric_name string, metric_unit string, "
    "metric_description string, metric_kind string, temporality string, is_monotonic boolean"
)
_POINT: Final = (
    "resource int, header int, attribute_set int, start_time bigint, time bigint, date string, value double, "
    "count bigint, sum double, min double, max double, explicit_bounds array<double>, "
    "bucket_counts array<bigint>, scale int, zero_count bigint, zero_threshold double, positive_offset int, "
    "positive_bucket_counts array<bigint>, negative_offset int, negative_bucket_counts array<bigint>, "
    "quantiles array<struct<quantile:double,value:double>>, flags int"
)
_PUSH: Final = (
    f"struct<resources:array<map<string,string>>, headers:array<struct<{_HEADER}>>, "
    "attribute_sets:array<struct<attributes:map<string,string>,attributes_key:string>>, "
    f"points:array<struct<{_POINT}>>>"
)
"""What ``OtlpDecoder`` makes of a push, in its order (times in microseconds): what its points share,
once, and its points, which number their resource, metric header and attribute set."""
_HEADER_NAMES: Final = tuple(part.split()[0] for part in _HEADER.split(", "))
_SHARED: Final = {"resource": "resources", "header": "headers", "attribute_set": "attribute_sets"}
"""A point's number of a shared part -> the array of the push that holds it."""
FUNCTIONS: Final = {
    "telemetry_otlp_points": ("telemetry.sink.OtlpPoints", _PUSH),
    "telemetry_otlp_decodable": ("telemetry.sink.OtlpDecodable", "boolean"),
}
"""The JVM decoder's SQL functions: name -> (Java class, SQL return type), for ``spark_jobs.jvm.register``."""


def decoded(bronze: DataFrame, *, jvm: bool, bounds: PushBounds = PUSH_BOUNDS) -> DataFrame:
    """Bronze push rows -> decoded rows (points, and one row per quarantined push), in ``DECODED_SCHEMA``."""
    pushes = bronze.select(*BRONZE_COLUMNS)
    python_schema = from_arrow_schema(DECODED_SCHEMA, prefer_timestamp_ntz=False)
    if not jvm:
        return pushes.mapInArrow(decode_batches, python_schema)
    lengths = [F.coalesce(F.octet_length(name), F.lit(0)) for name in PUSH_TEXT_COLUMNS]
    fits = F.col("payload").isNotNull()
    for length in lengths:
        fits &= length <= bounds.max_text_bytes
    arguments = [
        F.col("payload"),
        sum(lengths[1:], lengths[0]).cast("long"),
        F.lit(bounds.max_repeated_bytes).cast("long"),
        # the Python decoder counts fields on the wire past this size (``transforms.decode._parse``)
        F.lit(2 * min(bounds.max_data_points, bounds.max_metric_fields)).cast("long"),
    ]
    taken = fits & F.call_function("telemetry_otlp_decodable", *arguments)
    push = F.when(fits, F.call_function("telemetry_otlp_points", *arguments)).alias("push")
    by_jvm = (
        pushes.select(*(name for name in BRONZE_COLUMNS if name != "payload"), push)
        .select("*", F.explode("push.points").alias("p"))
        .select(
            "*",
            *(
                F.col(f"push.{array}")[F.col(f"p.{number}")].alias(number)
                for number, array in _SHARED.items()
            ),
        )
    )
    by_python = pushes.where(~F.coalesce(taken, F.lit(False))).mapInArrow(decode_batches, python_schema)
    return _in_schema(by_jvm).unionByName(by_python)


def _in_schema(frame: DataFrame) -> DataFrame:
    """The exploded JVM rows (with their push's parts looked up) as ``DECODED_SCHEMA`` columns."""
    converted: dict[str, Column] = {
        "start_time": F.timestamp_micros("p.start_time"),
        "time": F.timestamp_micros("p.time"),
        "resource_attributes": F.col("resource"),
        "attributes": F.col("attribute_set.attributes"),
        "attributes_key": F.col("attribute_set.attributes_key"),
        **{name: F.col(f"header.{name}") for name in _HEADER_NAMES},
    }
    columns = []
    for field in DECODED_SCHEMA:
        if field.name in converted:
            column = converted[field.name]
        elif field.name in ("quarantine_reason", "payload"):
            column = F.lit(None).cast("string" if field.name == "quarantine_reason" else "binary")
        elif field.name in BRONZE_COLUMNS:
            column = F.col(field.name)
        else:
            column = F.col(f"p.{field.name}")
        columns.append(column.alias(field.name))
    return frame.select(*columns)
