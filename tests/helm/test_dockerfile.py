"""The Dockerfile agrees with the chart that runs its image: the user, the ports, the entry point, the
Delta connector's jars that docs/spark.md names, and the broker plugin's jar where docs/broker-plugin.md
says. (Building the image needs Docker Hub's Python
image, which this machine cannot reach.)"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

import artifacts
import broker_plugin
from tests.support.paths import REPO

pytestmark = pytest.mark.helm
ROOT = REPO
DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENTRYPOINT = ROOT / "scripts" / "docker-entrypoint.sh"
VALUES = yaml.safe_load((ROOT / "helm" / "telemetry-sink" / "values.yaml").read_text())


def instruction(name: str) -> list[str]:
    return re.findall(rf"^{name} (.+)$", DOCKERFILE, re.M)


def test_the_image_runs_as_the_non_root_user_the_chart_asks_for() -> None:
    [user] = instruction("USER")
    uid, gid = user.split(":")
    assert int(uid) == VALUES["podSecurityContext"]["runAsUser"] != 0
    assert int(gid) == VALUES["podSecurityContext"]["runAsGroup"]
    assert f"--uid {uid}" in DOCKERFILE


def test_the_image_exposes_the_sinks_ports_and_its_entry_point_is_the_command() -> None:
    ports = (VALUES["service"]["grpcPort"], VALUES["service"]["httpPort"], VALUES["kafkaListener"]["port"])
    assert instruction("EXPOSE") == [" ".join(str(port) for port in ports)]
    assert instruction("ENTRYPOINT") == ['["tini", "--", "telemetry-sink-entrypoint"]']
    assert "COPY scripts/docker-entrypoint.sh /usr/local/bin/telemetry-sink-entrypoint" in DOCKERFILE
    assert instruction("CMD") == ['["serve"]']


def test_the_connector_build_argument_fetches_the_jars_the_docs_name() -> None:
    artifact = re.search(r"^ARG DELTA_SPARK_ARTIFACT=(\S+)$", DOCKERFILE, re.M)
    version = re.search(r"^ARG DELTA_VERSION=(\S+)$", DOCKERFILE, re.M)
    assert artifact is not None
    assert version is not None
    docs = (ROOT / "docs" / "spark.md").read_text()
    assert f"io.delta:{artifact.group(1)}:{version.group(1)}" in docs
    assert f"io.delta:delta-storage:{version.group(1)}" in docs
    assert re.search(r"^ARG DELTA_CONNECTOR=false$", DOCKERFILE, re.M)  # off unless asked for


def test_the_image_carries_the_jvm_decoder_built_in_its_build_stage() -> None:
    build_stage = DOCKERFILE.split("\nFROM ")[1]
    for package in ("openjdk-17-jdk-headless", "protobuf-compiler", "libprotobuf-java"):
        assert package in build_stage
    built = build_stage.index("python -m spark_jobs.jvm")
    assert build_stage.index("pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .") > built
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "java/*.jar" in package_data["spark_jobs"]


def test_the_entry_point_runs_telemetry_sink_commands(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(ENTRYPOINT), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert (done.returncode, done.stdout.split()[0]) == (0, "telemetry-sink")


@pytest.mark.spark  # starts a JVM: in the Spark tests' process
def test_the_entry_point_starts_sparks_kubernetes_executor_backend_for_executor_pods(tmp_path: Path) -> None:
    """What Spark's executor pods run: the backend starts with the pod's SPARK_* variables and tries
    the driver (none here, so it fails to connect: the arguments and the classpath were right)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "ts-telemetry-sink-rollup-exec-1",
        "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_JAVA_OPT_0": "-Dspark.network.timeout=10s",
        "SPARK_JAVA_OPT_1": "-Dspark.rpc.askTimeout=5s",
    }
    done = subprocess.run(
        [str(ENTRYPOINT), "executor"], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0  # no driver to register with
    assert "KubernetesExecutorBackend" in output
    assert f"127.0.0.1:{port}" in output  # it tried the driver it was given
    assert "Unrecognized option" not in output


def _plugin_build_command() -> str:
    """The build stage's command that builds the broker plugin's jar."""
    [command] = [run for run in instruction("RUN") if "python -m broker_plugin" in run]
    return command


def test_the_image_carries_the_broker_plugin_built_in_its_build_stage_where_the_docs_say() -> None:
    build_stage, final_stage = DOCKERFILE.split("\nFROM ")[1:3]
    assert _plugin_build_command() in build_stage
    assert "COPY artifacts artifacts" in build_stage  # the lock the downloaded jars are checked against
    copied = re.search(r"^COPY --from=build /plugin/(\S+) (\S+)$", final_stage, re.M)
    assert copied is not None
    assert f"{copied.group(2)}{copied.group(1)}" in (ROOT / "docs" / "broker-plugin.md").read_text()


def test_the_build_stages_plugin_command_builds_the_jar_from_a_maven_repository(tmp_path: Path) -> None:
    """The build stage's very command, against a file:// repository: the project's Maven cache (the
    image's build downloads the same two jars from Maven Central), and against one whose
    kafka-clients jar is not the locked one."""
    repository = Path(artifacts.CACHE) / "repository"
    command = _plugin_build_command().replace('"$MAVEN_REPOSITORY"', repository.as_uri())
    command = command.replace("/plugin/", f"{tmp_path}/plugin/").replace("python", sys.executable, 1)
    done = subprocess.run(
        command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(done.stdout.strip()) as jar:
        assert "telemetry/sink/forwarder/TelemetrySinkForwarder.class" in jar.namelist()
    forged = tmp_path / "forged"
    for name, path in broker_plugin.COMPILE_JARS.items():
        (forged / path).mkdir(parents=True)
        (forged / path / name).write_bytes(b"not the locked jar")
    command = command.replace(repository.as_uri(), forged.as_uri()).replace("/plugin/", "/forged-plugin/")
    refused = subprocess.run(
        command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert refused.returncode != 0
    assert "the kafka list's lock says" in refused.stderr
