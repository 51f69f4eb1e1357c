#!/usr/bin/env bash
# Creates the project's virtual environment and installs the project with its test and dev extras.
# Also makes sure a Java runtime is present for the Spark parts (PySpark starts a JVM): when `java`
# is missing and we are root on Debian, openjdk-17-jre-headless is installed from Debian's packages.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"telemetry-sink needs Python >= 3.11, found {sys.version.split()[0]}")
PY

if ! command -v java >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: no java on PATH; installing openjdk-17-jre-headless" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
        echo "setup: warning: no java on PATH; the Spark jobs need a Java 17 runtime" >&2
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
