"""The one place that builds the SparkSession of every job.

``spark_session(SparkSettings(...))``: ``local[*]`` by default (the embedded default), any master by
setting (``k8s://https://...``, ``spark://...``, ``yarn``), and any Spark setting passed through. On
top of what the caller passes, the session gets the settings the Delta tables need:

- ``spark.sql.session.timeZone=UTC``: dates and buckets are UTC, as the bronze partitions are;
- ``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS``: Delta readers reject INT96;
- ``spark.sql.sources.partitionColumnTypeInference.enabled=false``: partition values stay strings,
  as Delta keeps them;
- ``spark.sql.globalTempDatabase=telemetry``: the namespace of the tables' views (``views``);
- ``spark.sql.execution.arrow.pyspark.enabled=true`` (the Python decoder runs in ``mapInArrow``); on a
  ``local`` master the Python workers run the driver's interpreter (``PYSPARK_PYTHON``, unless set);
- the project's jar (``spark_jobs.jvm``: the JVM decoder) added to ``spark.jars`` when it was built;
- with the Delta Spark connector (``delta_connector``: ``auto`` uses it when a ``delta-spark`` jar is
  among ``spark.jars`` or in Spark's own jars folder), its SQL extension (before any the caller
  names) and catalog, and on a ``local`` master one task a core for each replay of a table's log
  (``DELTA_SNAPSHOT_PARTITIONS``).

Spark's own log noise is kept out of the way: the JVM logs through ``log4j2.properties`` next to this
module (warnings and errors of Spark only, on stderr), unless the caller passes its own
``spark.driver.extraJavaOptions``; the UI and the console progress bar are off unless set. A
``local`` session gets a 4 GiB heap unless ``spark.driver.memory`` is set, and 4 shuffle partitions a
core (``shuffle_partitions``); on a cluster Spark's default 200, which adaptive execution coalesces.
The generated-code cache keeps 1,000 classes instead of 100, so that a warm session (``rollup
--every``) reuses them. Up to 1,024 files of a read are listed by the driver itself, not by a Spark
job.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import pyspark
from pyspark.sql import SparkSession

from spark_jobs.jvm import JAR

__all__ = [
    "DEFAULT_MASTER",
    "DELTA_CATALOG",
    "DELTA_EXTENSION",
    "DELTA_SNAPSHOT_PARTITIONS",
    "SparkSettings",
    "local_cores",
    "shuffle_partitions",
    "spark_session",
]

DEFAULT_MASTER: Final = "local[*]"
DELTA_EXTENSION: Final = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG: Final = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
_LOG4J: Final = Path(__file__).with_name("log4j2.properties")
_REQUIRED: Final = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.globalTempDatabase": "telemetry",
}
_DEFAULTS: Final = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    # the merges collect arrays (histogram buckets): Spark's object hash aggregate falls back to sorting
    # after 128 groups anyway, and sorting from the start is faster (benchmarks/README.md, rollup)
    "spark.sql.execution.useObjectHashAggregateExec": "false",
    # a rollup run generates a few hundred classes; Spark keeps 100, so every `--every` run compiled
    # them again, and the JIT compiled them again too (benchmarks/README.md, rollup, incremental)
    "spark.sql.codegen.cache.maxEntries": "1000",
    # the bridge reads tables as lists of files: past 32 of them Spark lists them in a Spark job of its
    # own, about 0.3 s of an incremental run that reads a few dozen small files (driver: milliseconds)
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J}",
}

SHUFFLE_PARTITIONS_PER_CORE: Final = 4
"""A ``local`` session's shuffle partitions per core it runs (8 on ``local[2]``, the figure the
benchmarks were tuned with): a few tasks a core, so that a skewed one does not leave a core idle."""

DELTA_SNAPSHOT_PARTITIONS: Final = "spark.databricks.delta.snapshotPartitions"
"""The connector's tasks per replay of a table's log (its default: 50). A ``local`` session gets one a
core unless set: 50 tiny tasks on two cores made each snapshot of a small table a job of seconds, and
a rollup on the connector two to four times slower (benchmarks/README.md, "The connector in the tests'
session"); on a cluster the default stays."""

LOCAL_DRIVER_MEMORY: Final = "4g"
"""The heap of a ``local`` session unless ``spark.driver.memory`` says otherwise: Spark's 1 GiB made
the 1-minute rollup spill 7.7 GiB and spend a fifth of its CPU in GC (benchmarks/README.md, rollup)."""

ConnectorMode = Literal["auto", "on", "off"]


@dataclass(frozen=True)
class SparkSettings:
    """How to start Spark: ``master``, ``app_name``, Spark ``settings`` passed through as they are,
    and whether to use the Delta Spark connector (``auto``: when its jar is there)."""

    master: str = DEFAULT_MASTER
    app_name: str = "telemetry-sink"
    settings: Mapping[str, str] = field(default_factory=dict)
    delta_connector: ConnectorMode = "auto"

    def validate(self) -> list[str]:
        """Every problem at once (empty when fine)."""
        problems = []
        if not self.master:
            problems.append("spark.master must not be empty")
        if self.delta_connector not in ("auto", "on", "off"):
            problems.append(f"spark.delta_connector must be auto, on or off, not {self.delta_connector!r}")
        problems.extend(
            f"{key} is set by telemetry-sink to {value} and cannot be changed"
            for key, value in _REQUIRED.items()
            if key in self.settings and self.settings[key] != value
        )
        return problems


def delta_connector_jars(settings: Mapping[str, str]) -> list[str]:
    """The ``delta-spark`` jars Spark will load: among ``spark.jars`` or in Spark's jars folder."""
    listed = [jar for jar in settings.get("spark.jars", "").split(",") if "delta-spark" in jar]
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)  # where pip put its jars
    return listed + sorted(glob.glob(os.path.join(home, "jars", "delta-spark*.jar")))


def uses_connector(settings: SparkSettings) -> bool:
    """Whether a session built with these settings loads the Delta Spark connector."""
    if settings.delta_connector == "auto":
        return bool(delta_connector_jars(settings.settings) or settings.settings.get("spark.jars.packages"))
    return settings.delta_connector == "on"


def _with_project_jar(settings: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars`` with the project's jar (``spark_jobs.jvm``) added, when it was built."""
    if not JAR.is_file():
        return {}
    listed = [jar for jar in settings.get("spark.jars", "").split(",") if jar]
    return {"spark.jars": ",".join([*listed, str(JAR)]) if str(JAR) not in listed else ",".join(listed)}


def local_cores(master: str) -> int | None:
    """How many cores a ``local`` master runs tasks on (``local``: 1, ``local[N]`` and ``local[N,F]``:
    N, ``local[*]``: this machine's), or None for a cluster's master (``local-cluster[...]`` too)."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    threads = match.group(1)
    if threads is None:
        return 1
    return (os.cpu_count() or 1) if threads == "*" else max(1, int(threads))


def shuffle_partitions(master: str) -> str | None:
    """The shuffle partitions for ``master`` unless set: ``SHUFFLE_PARTITIONS_PER_CORE`` a core on a
    ``local`` master; None on a cluster, where Spark's own default (200) applies and adaptive query
    execution coalesces the partitions a small run does not need, so a bigger cluster gets more
    tasks without a setting."""
    cores = local_cores(master)
    return None if cores is None else str(SHUFFLE_PARTITIONS_PER_CORE * cores)


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """A session built from ``settings`` (or gets the running one, which keeps its settings)."""
    settings = settings or SparkSettings()
    problems = settings.validate()
    if problems:
        raise ValueError("; ".join(problems))
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in {
        **_DEFAULTS,
        **settings.settings,
        **_REQUIRED,
        **_with_project_jar(settings.settings),
    }.items():
        builder = builder.config(key, value)
    partitions = shuffle_partitions(settings.master)
    if partitions is not None and "spark.sql.shuffle.partitions" not in settings.settings:
        builder = builder.config("spark.sql.shuffle.partitions", partitions)
    if settings.master.startswith("local"):
        # Python workers run this interpreter (its packages), not whatever `python3` is on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if "spark.driver.memory" not in settings.settings:  # the executors live in the driver
            builder = builder.config("spark.driver.memory", LOCAL_DRIVER_MEMORY)
    if uses_connector(settings):
        extensions = [e for e in settings.settings.get("spark.sql.extensions", "").split(",") if e]
        builder = builder.config("spark.sql.extensions", ",".join([DELTA_EXTENSION, *extensions])).config(
            "spark.sql.catalog.spark_catalog", DELTA_CATALOG
        )
        cores = local_cores(settings.master)
        if cores is not None and DELTA_SNAPSHOT_PARTITIONS not in settings.settings:
            builder = builder.config(DELTA_SNAPSHOT_PARTITIONS, str(cores))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
