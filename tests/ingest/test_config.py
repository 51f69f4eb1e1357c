"""The sink's configuration: YAML + environment, Kafka's keys and defaults, every problem at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ingest.config as config_module
from ingest.config import SinkConfig, SinkConfigError


def test_defaults_are_the_embedded_default() -> None:
    config = SinkConfig.load(env={})
    assert (config.data_root, config.server.grpc_port, config.server.http_port) == ("data", 4317, 4318)
    assert config.client_metrics.telemetry_max_bytes == 1048576
    assert config.quotas.num_quota_samples == 11
    assert config.exporter.name == "delta"
    assert config.subscription_store().names() == ["kafka-client-metrics"]
    assert config.replica_id


def test_the_documented_example_is_a_valid_file(tmp_path: Path) -> None:
    example = re.search(r"```yaml\n(.*?)```", config_module.__doc__ or "", re.DOTALL)
    assert example is not None
    path = tmp_path / "telemetry-sink.yaml"
    path.write_text(example.group(1))
    config = SinkConfig.load(path, env={})
    assert config.replica_id == "sink-0"
    assert config.subscription_store().get("kafka-client-metrics") is not None


def test_a_file_with_everything_set(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "data_root: s3://lake/telemetry\n"
        "storage_options: {AWS_REGION: eu-west-1}\n"
        "server: {grpc_port: 5317, http_port: 5318, shutdown_grace_s: 5}\n"
        "client_metrics: {telemetry.max.bytes: 4096, client.metrics.cache.max.size: 100000}\n"
        "quotas: {quota.window.num: 5, max.connections.per.ip.overrides: '127.0.0.1:3'}\n"
        "exporter: {name: log, options: {level: DEBUG}}\n"
        "subscriptions:\n"
        "  librdkafka: {metrics: [org.apache.kafka.producer.], interval.ms: 60000,"
        " match: client_software_name=librdkafka}\n"
    )
    config = SinkConfig.load(path, env={})
    assert config.storage_options == {"AWS_REGION": "eu-west-1"}
    assert config.server.grpc_port == 5317
    assert config.client_metrics.cache_max_size == 100000
    assert config.quotas.max_connections_per_ip_overrides == {"127.0.0.1": 3}
    assert config.exporter.options == {"level": "DEBUG"}
    assert config.subscription_store().names() == ["librdkafka"]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "colour: blue\n"
        "server: {grpc_port: 70000, http_port: 4318, tls_cert_file: /nope.pem, bogus: 1}\n"
        "client_metrics: {telemetry.max.bytes: 0}\n"
        "quotas: {quota.window.num: 0}\n"
        "exporter: {name: delta, extra: 1}\n"
        "subscriptions: {s: {interval.ms: 5}}\n"
    )
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.load(path, env={})
    problems = "\n".join(info.value.problems)
    for fragment in [
        "unknown key 'colour'",
        "unknown key 'server.bogus'",
        "unknown key 'exporter.extra'",
        "server.grpc_port must be a port number",
        "server.tls_cert_file and server.tls_key_file go together",
        "no such file '/nope.pem'",
        "client_metrics: telemetry.max.bytes must be between 1",
        "quotas: quota.window.num must be an integer between 1",
        "subscriptions.s: Invalid value 5 for interval.ms",
    ]:
        assert fragment in problems, fragment


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("server: {grpc_port: 5317}\n")
    env = {
        "TELEMETRY_SINK_SERVER__GRPC_PORT": "6317",
        "TELEMETRY_SINK_DATA_ROOT": "/var/lib/telemetry",
        "TELEMETRY_SINK_QUOTAS__QUOTA_WINDOW_NUM": "5",
        "TELEMETRY_SINK_CLIENT_METRICS__TELEMETRY_MAX_BYTES": "2048",
        "TELEMETRY_SINK_EXPORTER__NAME": "memory",
        "UNRELATED": "x",
    }
    config = SinkConfig.load(path, env=env)
    assert config.server.grpc_port == 6317
    assert config.data_root == "/var/lib/telemetry"
    assert config.quotas.num_quota_samples == 5
    assert config.client_metrics.telemetry_max_bytes == 2048
    assert config.exporter.name == "memory"


def test_unknown_environment_settings_are_reported() -> None:
    with pytest.raises(SinkConfigError, match="TELEMETRY_SINK_NOPE: unknown setting"):
        SinkConfig.load(env={"TELEMETRY_SINK_NOPE": "1"})
    with pytest.raises(SinkConfigError, match="unknown section 'servr'"):
        SinkConfig.load(env={"TELEMETRY_SINK_SERVR__GRPC_PORT": "1"})


def test_unreadable_or_malformed_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SinkConfigError, match="No such file"):
        SinkConfig.load(tmp_path / "missing.yaml", env={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(SinkConfigError, match="expected a mapping"):
        SinkConfig.load(bad, env={})


def test_mtls_needs_a_server_certificate(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    with pytest.raises(SinkConfigError, match=r"needs server\.tls_cert_file"):
        SinkConfig.from_document({"server": {"tls_client_ca_file": str(ca)}})
