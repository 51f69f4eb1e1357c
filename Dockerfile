# syntax=docker/dockerfile:1
# The telemetry-sink image: Python slim, a Java 17 runtime for the Spark jobs, and the project's wheel.
#
#   docker build -t telemetry-sink:0.1.0 .
#   docker build -t telemetry-sink:0.1.0 --build-arg DELTA_CONNECTOR=true .    # production: bake the
#       Delta Spark connector's jars into Spark's jars/ folder (downloaded from Maven Central at build time)
#
# It runs as the non-root user 10001 with a read-only root filesystem (the chart mounts /tmp and the
# data volume); the entry point is the `telemetry-sink` command (serve, rollup, maintain, dashboard, ...),
# or Spark's executor backend for the executor pods of a rollup on Kubernetes (scripts/docker-entrypoint.sh).

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ARG MAVEN_REPOSITORY=https://repo1.maven.org/maven2
# a C compiler: crcmod's extension and the mypyc-compiled quota hot path; a JDK, protoc and
# protobuf-java: the JVM decoder's jar (spark_jobs.jvm), which the wheel carries
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
        openjdk-17-jdk-headless protobuf-compiler libprotobuf-java \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY subscriptions subscriptions
COPY ingest ingest
COPY quotas quotas
COPY exporters exporters
COPY spark_jobs spark_jobs
COPY loadgen loadgen
COPY telemetry_sink telemetry_sink
COPY artifacts artifacts
COPY broker_plugin/__init__.py broker_plugin/__main__.py broker_plugin/
COPY broker_plugin/java/telemetry broker_plugin/java/telemetry
# the broker plugin's jar (docs/broker-plugin.md), compiled against kafka-clients and SLF4J's API
# downloaded from Maven Central and checked against artifacts/kafka/jars.sha256
RUN python -m broker_plugin --maven-repository "$MAVEN_REPOSITORY" --jar /plugin/telemetry-sink-broker-plugin.jar
# the project's wheel and every dependency's, for an offline install below; the jar is built with
# PySpark's jars and the OTLP schema from those wheels, then the project's wheel again to carry it
RUN pip wheel --no-cache-dir --wheel-dir /wheels . \
    && pip install --no-cache-dir --no-index --find-links /wheels pyspark opentelemetry-proto \
    && python -m spark_jobs.jvm \
    && rm /wheels/telemetry_sink-*.whl \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim-bookworm
ARG DELTA_CONNECTOR=false
ARG DELTA_SPARK_ARTIFACT=delta-spark_4.2_2.13
ARG DELTA_VERSION=4.4.0
ARG MAVEN_REPOSITORY=https://repo1.maven.org/maven2
# more jars for Spark's jars/ folder, as space-separated URLs: e.g. hadoop-aws and the AWS SDK bundle
# matching PySpark's Hadoop, for rollups on S3 (s3a://)
ARG EXTRA_JARS=""
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp sink
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels telemetry-sink \
    && rm -rf /wheels
# the Delta Spark connector for production (spark_jobs.lake uses it when its classes are on the
# classpath), and EXTRA_JARS: downloaded into Spark's jars/ folder
RUN urls="$EXTRA_JARS" \
    && if [ "$DELTA_CONNECTOR" = "true" ]; then \
        urls="$urls $MAVEN_REPOSITORY/io/delta/$DELTA_SPARK_ARTIFACT/$DELTA_VERSION/$DELTA_SPARK_ARTIFACT-$DELTA_VERSION.jar" \
        && urls="$urls $MAVEN_REPOSITORY/io/delta/delta-storage/$DELTA_VERSION/delta-storage-$DELTA_VERSION.jar"; \
    fi \
    && python - $urls <<'PY'
import os
import sys
import urllib.request

import pyspark

jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
for url in sys.argv[1:]:
    urllib.request.urlretrieve(url, os.path.join(jars, url.rsplit("/", 1)[1]))
PY
COPY scripts/docker-entrypoint.sh /usr/local/bin/telemetry-sink-entrypoint
# for brokers, not for the sink: copy it out of the image into a broker's plugin path
COPY --from=build /plugin/telemetry-sink-broker-plugin.jar /opt/telemetry-sink/broker-plugin/
ENV HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 4317 4318 9094
# `telemetry-sink <command>`; Spark's executor pods (`executor`) run Spark's executor backend
ENTRYPOINT ["tini", "--", "telemetry-sink-entrypoint"]
CMD ["serve"]
