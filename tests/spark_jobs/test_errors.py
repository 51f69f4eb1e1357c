"""The Spark side's errors form one tree under ``SparkJobError``, drawn in ``spark_jobs.errors`` (read
from the source: no Spark is started)."""

from __future__ import annotations

import spark_jobs.errors
from spark_jobs.errors import SparkJobError
from tests.support.error_tree import exception_classes, outside_the_tree


def test_every_exception_class_of_the_spark_jobs_is_in_the_one_tree() -> None:
    assert len(exception_classes("spark_jobs")) >= 4  # the scan finds them: the root and three errors
    assert outside_the_tree("spark_jobs", SparkJobError, spark_jobs.errors.__doc__) == []
