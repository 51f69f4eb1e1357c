"""The project's JVM code for Spark: the OTLP decoder that runs inside Spark's JVM (``java/``), built
into one jar at ``make setup`` and put on every session's classpath (``spark_jobs.session``).

The jar holds the Java classes that ``protoc`` generates from the OTLP schema carried by the
``opentelemetry-proto`` package (its serialized ``FileDescriptorProto``s, written as a descriptor set:
nothing is copied by hand), the decoder's own classes (``java/telemetry/sink``), compiled with
``javac`` against PySpark's jars, and protobuf-java's classes, so it needs nothing else at run time.
Building needs a JDK, ``protoc`` and protobuf-java of the same version (Debian: ``apt-get install
openjdk-17-jdk-headless protobuf-compiler libprotobuf-java``; ``scripts/setup.sh`` installs them when
it can). Without the jar, the decode job uses its Python decoder alone (``transforms.decode``), which
gives the same rows, about ten times slower (``benchmarks/README.md``, rollup).

Run ``python -m spark_jobs.jvm`` to build it (``--check``: say what is missing, build nothing).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pyspark
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from opentelemetry.proto.metrics.v1 import metrics_pb2
from pyspark.sql import SparkSession

__all__ = ["JAR", "build", "missing", "register"]

log = logging.getLogger(__name__)

SOURCES: Final = Path(__file__).with_name("java")
JAR: Final = SOURCES / "telemetry-sink-spark.jar"
"""Where ``build`` writes the jar (next to its sources, inside the package)."""
PROTOBUF_JAVA: Final = Path(os.environ.get("PROTOBUF_JAVA_JAR", "/usr/share/java/protobuf.jar"))
"""protobuf-java, of ``protoc``'s version (Debian's ``libprotobuf-java``)."""
_PROTOS: Final = (
    "opentelemetry/proto/common/v1/common.proto",
    "opentelemetry/proto/resource/v1/resource.proto",
    "opentelemetry/proto/metrics/v1/metrics.proto",
)
_REGISTERED: Final = "spark.telemetry.jvm.{}"
"""A session's SQL conf per function: ``true`` once ``register`` registered it, ``false`` if it could not."""


def _descriptor_set() -> bytes:
    """The OTLP metrics schema and its imports, as ``protoc --descriptor_set_in`` reads it."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file: FileDescriptor) -> None:
        if file.name not in files:
            for dependency in file.dependencies:
                add(dependency)
            files[file.name] = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb)

    add(metrics_pb2.DESCRIPTOR)
    return descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString()


def missing() -> list[str]:
    """What building needs and this machine lacks (empty when it can build)."""
    absent = [tool for tool in ("javac", "jar", "protoc") if shutil.which(tool) is None]
    if not PROTOBUF_JAVA.is_file():
        absent.append(f"{PROTOBUF_JAVA} (protobuf-java)")
    return absent


def build(jar: Path = JAR) -> Path:
    """Generate, compile and package the jar at ``jar``; RuntimeError naming what is missing or failed."""
    absent = missing()
    if absent:
        raise RuntimeError(
            f"cannot build the JVM decoder: missing {', '.join(absent)} (Debian: apt-get install "
            "openjdk-17-jdk-headless protobuf-compiler libprotobuf-java)"
        )
    spark_jars = Path(pyspark.__file__).parent / "jars"
    classpath = [
        PROTOBUF_JAVA,
        *sorted(spark_jars.glob("spark-*.jar")),
        *sorted(spark_jars.glob("scala-*.jar")),
        *sorted(spark_jars.glob("slf4j-api-*.jar")),
        # the sql-server's Thrift service (Hive's service and Thrift classes, HiveConf's Hadoop base)
        *sorted(spark_jars.glob("hive-*.jar")),
        *sorted(spark_jars.glob("libthrift-*.jar")),
        *sorted(spark_jars.glob("hadoop-client-api-*.jar")),
    ]
    with tempfile.TemporaryDirectory(prefix="telemetry-sink-jvm-") as work:
        root = Path(work)
        generated, classes = root / "generated", root / "classes"
        generated.mkdir()
        classes.mkdir()
        (root / "otlp.pb").write_bytes(_descriptor_set())
        _run(["protoc", f"--descriptor_set_in={root / 'otlp.pb'}", f"--java_out={generated}", *_PROTOS])
        sources = sorted(str(p) for p in (*generated.rglob("*.java"), *SOURCES.rglob("*.java")))
        _run(
            [
                "javac",
                "--release",
                "17",
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                os.pathsep.join(map(str, classpath)),
                *sources,
            ]
        )
        with zipfile.ZipFile(PROTOBUF_JAVA) as protobuf:  # its classes, so the jar stands alone
            for name in protobuf.namelist():
                if name.startswith("com/google/protobuf/") and name.endswith(".class"):
                    protobuf.extract(name, classes)
        staged = root / jar.name
        _run(["jar", "cf", str(staged), "-C", str(classes), "."])
        jar.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), jar)  # whole or not at all
    return jar


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def register(spark: SparkSession, functions: Mapping[str, tuple[str, str]]) -> bool:
    """Register ``functions`` (SQL name -> (Java class, SQL return type)) in ``spark``'s session, once;
    False, logging why once per session, when the jar is not on its classpath."""
    key = _REGISTERED.format(",".join(sorted(functions)))
    state = spark.conf.get(key, None)
    if state is not None:
        return state == "true"
    try:
        for name, (java_class, return_type) in functions.items():
            spark.udf.registerJavaFunction(name, java_class, return_type)
    except Exception as exc:  # whatever it is, the caller's Python path does the work
        log.warning(
            "the JVM functions are not available (%s): using Python", str(exc).strip().splitlines()[0]
        )
        spark.conf.set(key, "false")
        return False
    spark.conf.set(key, "true")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_jobs.jvm", description="Build the JVM decoder's jar."
    )
    parser.add_argument("--check", action="store_true", help="only say what building needs and is missing")
    parser.add_argument("--jar", type=Path, default=JAR, help=f"where to write it (default {JAR})")
    args = parser.parse_args(argv)
    absent = missing()
    if args.check:
        print("missing: " + ", ".join(absent) if absent else "ready to build")
        return 1 if absent else 0
    try:
        print(f"built {build(args.jar)}")
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
