#!/usr/bin/env bash
# The image's entry point (see the Dockerfile): `telemetry-sink <command> ...`, except for the pods
# Spark starts as executors of a rollup on Kubernetes (rollup.mode: kubernetes in the Helm chart). Spark
# starts those with the single argument `executor` and describes the executor in SPARK_* variables;
# they run Spark's Kubernetes executor backend on the JVM, with PySpark's own jars.
set -euo pipefail

if [ "${1:-}" != "executor" ]; then
    exec telemetry-sink "$@"
fi

spark_home="$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
# the executor's Java options, SPARK_JAVA_OPT_0, _1, ... in order
java_opts=()
while IFS= read -r name; do
    java_opts+=("${!name}")
done < <(compgen -e | grep '^SPARK_JAVA_OPT_[0-9]*$' | sort -t_ -k4 -n || true)

exec java "${java_opts[@]}" \
    -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${SPARK_CONF_DIR:-$spark_home/conf}:$spark_home/jars/*" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" \
    --executor-id "${SPARK_EXECUTOR_ID}" \
    --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" \
    --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
    --podName "${SPARK_EXECUTOR_POD_NAME}"
