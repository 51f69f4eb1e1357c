"""docs/broker-plugin.md's Strimzi example, checked without Kubernetes: it parses as YAML, and its keys
are the ones Strimzi documents and accepts (no config key Strimzi forbids in ``spec.kafka.config``, a
config provider of its own rather than one of the names Strimzi reserves, the secret mounted under
``/mnt`` where that provider may read it), naming a class the plugin's jar holds and only settings the
plugin defines."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Final

import yaml

from broker_plugin import build

DOCS: Final = Path(__file__).resolve().parents[2] / "docs" / "broker-plugin.md"
CONFIG_SOURCE: Final = (
    Path(__file__).resolve().parents[2] / "broker_plugin/java/telemetry/sink/forwarder/ForwarderConfig.java"
)
STRIMZI_FORBIDDEN: Final = (
    "listeners", "advertised.", "broker.", "listener.", "host.name", "port", "inter.broker.listener.name",
    "sasl.", "ssl.", "security.", "password.", "log.dir", "zookeeper.connect", "zookeeper.set.acl",
    "zookeeper.ssl", "zookeeper.clientCnxnSocket", "authorizer.", "super.user",
    "cruise.control.metrics.topic", "cruise.control.metrics.reporter.bootstrap.servers", "node.id",
    "process.roles", "controller.",
    "metadata.log.dir", "zookeeper.metadata.migration.enable", "client.quota.callback.static.",
    "prometheus.metrics.reporter.",
)  # fmt: skip
"""``KafkaClusterSpec.FORBIDDEN_PREFIXES`` of Strimzi 0.48.0 (its exceptions do not matter here)."""
STRIMZI_PROVIDERS: Final = {"strimzienv", "strimzifile", "strimzidir", "strimzisecrets"}
"""The config provider names Strimzi configures itself and reserves."""


def _strimzi_example() -> dict[str, dict[str, Any]]:
    """The example's resources by kind."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.DOTALL)
    [example] = [block for block in blocks if "kind: Kafka\n" in block]
    return {document["kind"]: document for document in yaml.safe_load_all(example)}


def test_the_strimzi_example_uses_only_keys_strimzi_accepts() -> None:
    resources = _strimzi_example()
    assert set(resources) == {"Secret", "KafkaNodePool", "Kafka"}
    kafka = resources["Kafka"]["spec"]["kafka"]
    config: dict[str, Any] = kafka["config"]
    assert not [key for key in config if key.startswith(STRIMZI_FORBIDDEN)]
    assert kafka["version"] in kafka["image"]  # Strimzi: a custom image's version, set to match
    assert (
        resources["KafkaNodePool"]["metadata"]["labels"]["strimzi.io/cluster"]
        == resources["Kafka"]["metadata"]["name"]
    )
    providers = config["config.providers"].split(",")
    assert not STRIMZI_PROVIDERS & set(providers)
    token = re.fullmatch(r"\$\{(\w+):([^:]+):(\w+)\}", config["telemetry.sink.forwarder.bearer.token"])
    assert token is not None
    alias, directory, key = token.groups()
    assert alias in providers
    assert config[f"config.providers.{alias}.param.allowed.paths"] == directory
    [mount] = kafka["template"]["kafkaContainer"]["volumeMounts"]
    [volume] = kafka["template"]["pod"]["volumes"]
    assert mount["mountPath"] == directory
    assert directory.startswith("/mnt/")  # Strimzi refuses additional volumes elsewhere
    assert mount["name"] == volume["name"]
    secret = resources["Secret"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert key in secret["stringData"]


def test_the_strimzi_example_names_the_plugins_class_and_settings() -> None:
    config = _strimzi_example()["Kafka"]["spec"]["kafka"]["config"]
    reporter = config["metric.reporters"]
    with zipfile.ZipFile(build()) as jar:
        assert reporter.replace(".", "/") + ".class" in jar.namelist()
    defined = set(re.findall(r'PREFIX \+ "([^"]+)"', CONFIG_SOURCE.read_text()))
    plugin_keys = {k.removeprefix("telemetry.sink.forwarder.") for k in config if k.startswith("telemetry.")}
    assert plugin_keys <= defined
