#!/usr/bin/env bash
# Creates the project's virtual environment and installs the project with its test and dev extras, and
# fetches the pinned Kafka jars the tests run (artifacts/, into .venv/maven; nothing downloads later).
# Also makes sure Java is present for the Spark parts (PySpark starts a JVM), and builds the JVM decoder's
# jar (spark_jobs/java, `python -m spark_jobs.jvm`), installing a JDK, protoc and protobuf-java from
# Debian's packages when they are missing and we are root on Debian.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"telemetry-sink needs Python >= 3.11, found {sys.version.split()[0]}")
PY

# Java for the Spark parts (PySpark starts a JVM), and what builds the JVM decoder (spark_jobs.jvm): a JDK,
# protoc and protobuf-java of the same version. Installed from Debian's packages when missing and we are
# root on Debian; otherwise the decode job decodes in Python alone (the same rows, about ten times slower).
need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v mvn >/dev/null 2>&1 || need+=(maven)  # fetches Kafka's jars (artifacts/)
[ -f "${PROTOBUF_JAVA_JAR:-/usr/share/java/protobuf.jar}" ] || need+=(libprotobuf-java)
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing ${need[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    elif ! command -v java >/dev/null 2>&1; then
        echo "setup: warning: no java on PATH; the Spark jobs need a Java 17 runtime" >&2
    else
        echo "setup: warning: missing ${need[*]}: the JVM decoder or Kafka's jars cannot be had" >&2
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
"$VENV/bin/python" -m spark_jobs.jvm \
    || echo "setup: warning: the JVM decoder was not built; the decode job decodes in Python" >&2
# Apache Kafka 4.4.0's jars (the broker, its tools, its Java client), the tests' oracle of Kafka's behaviour:
# fetched once with Maven into .venv/maven and checked against artifacts/kafka/jars.sha256
"$VENV/bin/python" -m artifacts kafka
# the project's broker plugin (broker_plugin/java), compiled against those jars (docs/broker-plugin.md)
"$VENV/bin/python" -m broker_plugin >/dev/null
# older Java clients (3.7.2, 4.0.2), which the tests also run against the sink (docs/kafka-oracle.md)
"$VENV/bin/python" -m artifacts kafka-clients-3.7
"$VENV/bin/python" -m artifacts kafka-clients-4.0
# a Kafka 4.0.2 broker, for the broker plugin's older interface (docs/broker-plugin.md)
"$VENV/bin/python" -m artifacts kafka-4.0
# the Delta Spark connector that delta-spark names for this PySpark: the lake's connector path (docs/spark.md)
"$VENV/bin/python" -m artifacts delta-spark
# an older librdkafka (confluent-kafka 2.5.3), hash-checked, beside the project's own (docs/kafka-oracle.md)
OLD_LIBRDKAFKA="$VENV/clients/confluent-kafka-2.5"
if [ ! -f "$OLD_LIBRDKAFKA/.installed" ] || [ artifacts/confluent-kafka-2.5/requirements.txt -nt "$OLD_LIBRDKAFKA/.installed" ]; then
    rm -rf "$OLD_LIBRDKAFKA"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: --target "$OLD_LIBRDKAFKA" -r artifacts/confluent-kafka-2.5/requirements.txt
    touch "$OLD_LIBRDKAFKA/.installed"
fi
