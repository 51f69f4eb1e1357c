"""What the broker plugin's tests share: a sink that trusts the plugin as a forwarder, and a broker
loaded with the plugin as docs/broker-plugin.md says (its ``server.properties`` snippet, used as is but
for the sink's address and the secrets file's place) with a subscription to every Kafka client metric
each second, made with ``kafka-client-metrics.sh``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from broker_plugin import CLASS, build
from tests.support.kafka_broker import KafkaBroker, KafkaOracle, kafka_broker
from tests.support.process import Running, running_sink

TOKEN: Final = "forwarder-secret"
FORWARDER: Final = "User:kafka-telemetry-forwarder"
DOCS: Final = Path(__file__).resolve().parents[2] / "docs" / "broker-plugin.md"
DOCUMENTED_ENDPOINT: Final = "http://telemetry-sink:4318/v1/metrics"
DOCUMENTED_SECRETS: Final = "/etc/kafka/telemetry-sink.properties"


def trusting_sink(workdir: Path, extra: str = "") -> contextlib.AbstractContextManager[Running]:
    """A sink (in ``workdir``) that trusts the plugin's principal (its bearer token) as a forwarder,
    configured with ``extra`` YAML besides."""
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = workdir / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "{FORWARDER}"\n')
    trust = f"security: {{tokens_file: {tokens}, trusted_forwarders: ['{FORWARDER}']}}\n"
    return running_sink(workdir, workdir / "data", extra=trust + extra)


@pytest.fixture(scope="module")
def sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A sink that trusts the plugin's principal as a forwarder."""
    with trusting_sink(tmp_path_factory.mktemp("plugin-sink")) as running:
        yield running


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, kafka_oracle: KafkaOracle, sink: Running
) -> Iterator[KafkaBroker]:
    """The module's broker with the documented settings, forwarding to the module's sink."""
    with forwarding_broker(kafka_oracle, tmp_path_factory.mktemp("plugin-broker"), sink) as running:
        yield running


def documented_settings(endpoint: str, secrets: Path) -> dict[str, str]:
    """The ``server.properties`` snippet of docs/broker-plugin.md, as broker settings, forwarding to
    ``endpoint`` with the token in the file ``secrets``."""
    text = DOCS.read_text()
    block = text[text.index("```properties\n") + len("```properties\n") :]
    lines = block[: block.index("```")].splitlines()
    return {
        key: value.replace(DOCUMENTED_ENDPOINT, endpoint).replace(DOCUMENTED_SECRETS, str(secrets))
        for key, value in (line.split("=", 1) for line in lines)
    }


@contextlib.contextmanager
def forwarding_broker(
    oracle: KafkaOracle, workdir: Path, sink: Running, *, reporter: str = CLASS, jars: str = "kafka"
) -> Iterator[KafkaBroker]:
    """A broker (Kafka ``jars``) with the documented settings, ``reporter`` the plugin's class it names,
    forwarding to ``sink``."""
    workdir.mkdir(parents=True, exist_ok=True)
    secrets = workdir / "telemetry-sink.properties"
    secrets.write_text(f"token={TOKEN}\n")
    settings = documented_settings(f"{sink.http_url}/v1/metrics", secrets)
    assert settings["metric.reporters"] == CLASS
    settings["metric.reporters"] = reporter
    settings["telemetry.sink.forwarder.linger.ms"] = "20"
    with kafka_broker(workdir, oracle.helpers, settings, plugins=[build()], jars=jars) as broker:
        subscribe_everything(oracle, broker, 1000)
        yield broker


def subscribe_everything(oracle: KafkaOracle, broker: KafkaBroker, interval_ms: int) -> None:
    """A subscription of ``broker`` to every Kafka client metric, made with ``kafka-client-metrics.sh``."""
    made = oracle.tools.run(
        "kafka-client-metrics", "--bootstrap-server", broker.bootstrap,
        "--alter", "--name", "everything", "--metrics", "org.apache.kafka.", "--interval", str(interval_ms),
    )  # fmt: skip
    assert made.status == 0, made
