"""The Dockerfile agrees with the chart that runs its image: the user, the ports, the entry point, and
the Delta connector's jars that docs/spark.md names. (Building the image needs Docker Hub's Python
image, which this machine cannot reach.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.helm
ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
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
    assert instruction("EXPOSE") == [f"{VALUES['service']['grpcPort']} {VALUES['service']['httpPort']}"]
    assert instruction("ENTRYPOINT") == ['["tini", "--", "telemetry-sink"]']
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
