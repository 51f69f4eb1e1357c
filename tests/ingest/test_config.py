"""The sink's configuration: YAML + environment, Kafka's keys and defaults, every problem at once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

import pytest

import ingest.config as config_module
from ingest.config import SinkConfig, SinkConfigError
from ingest.transports.connections import GateLimits, HttpTimeouts
from quotas import DEFAULT, ClientQuotaEntity
from telemetry_sink.commands.admin import TOKEN_ENV


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


def test_security_and_admission_defaults() -> None:
    config = SinkConfig.load(env={})
    assert (config.security.tokens_file, config.security.trusted_proxies, config.security.super_users) == (
        None,
        (),
        (),
    )
    server = config.server
    assert (server.max_concurrent_requests, server.overload_retry_after_ms, server.max_hold_delay_ms) == (
        500,
        1000,
        10000,
    )


def test_the_security_section_from_a_file_and_the_environment(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"t0k3n": "User:alice"\n')
    path = tmp_path / "c.yaml"
    path.write_text(
        f"security: {{tokens_file: {tokens}, trusted_proxies: [127.0.0.1/32], super_users: [User:admin]}}\n"
    )
    config = SinkConfig.load(path, env={})
    assert config.security.trusted_proxies == ("127.0.0.1/32",)
    assert config.security.super_users == ("User:admin",)
    assert config.security.authenticator().authenticate({"authorization": "Bearer t0k3n"}, None, None, "")[
        0
    ] == ("User:alice")
    env = {  # Kafka's list forms: super.users split at ';', addresses at ','
        "TELEMETRY_SINK_SECURITY__SUPER_USERS": "User:admin;User:ops",
        "TELEMETRY_SINK_SECURITY__TRUSTED_PROXIES": "10.1.2.3, fd00::7",
        "TELEMETRY_SINK_SERVER__MAX_CONCURRENT_REQUESTS": "64",
        "TELEMETRY_SINK_SECURITY__TRUSTED_FORWARDERS": "User:kafka-broker;User:otel-collector",
    }
    config = SinkConfig.load(path, env=env)
    assert config.security.super_users == ("User:admin", "User:ops")
    assert config.security.authenticator().trusted_forwarders == {"User:kafka-broker", "User:otel-collector"}
    assert config.security.trusted_proxies == ("10.1.2.3", "fd00::7")
    assert config.server.max_concurrent_requests == 64


def test_security_admission_and_limit_problems_are_reported_at_once(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"secret-token": alice\n')
    document = {
        "server": {
            "max_concurrent_requests": 0,
            "overload_retry_after_ms": True,
            "max_hold_delay_ms": -1,
            "decode_processes": 0,
        },
        "limits": {"max_data_points": 0, "max_json_depth": "deep"},
        "security": {
            "tokens_file": str(tokens),
            "trusted_proxies": ["10.0.0.0/33", "10.0.0.0/8"],
            "trusted_proxy_principals": ["edge-proxy"],
            "require_authentication": "yes",
            "super_users": ["admin"],
            "trusted_forwarders": ["kafka-broker"],
            "colour": "blue",
        },
    }
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document(document)
    problems = "\n".join(info.value.problems)
    for fragment in [
        "server.max_concurrent_requests must be a positive integer",
        "server.overload_retry_after_ms must be a positive integer",
        "server.max_hold_delay_ms must be an integer >= 0",
        "server.decode_processes must be a positive integer",
        "limits.max_data_points must be an integer between 1 and 2147483647, got 0",
        "limits.max_json_depth must be an integer between 1 and 2147483647, got 'deep'",
        "unknown key 'security.colour'",
        "security.trusted_forwarders: 'kafka-broker' is not a principal like User:alice",
        "security.tokens_file: ",
        "'alice' is not a principal",
        "security.trusted_proxies: '10.0.0.0/33' is not an address",
        "security.trusted_proxies: 10.0.0.0/8 is a network of 16777216 addresses",  # F7: every pod
        "security.trusted_proxy_principals: 'edge-proxy' is not a principal",
        "security.trusted_proxy_principals needs mTLS (server.tls_client_ca_file)",
        "security.require_authentication must be true or false",
        "security.super_users: 'admin' is not a principal",
    ]:
        assert fragment in problems, fragment
    assert "secret-token" not in problems


def test_admin_client_quotas_and_grpc_limits_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "admin: {strict_mutation_quota: false, config_log_poll_s: 0.5}\n"
        "exporter: {quota_sample_period_s: 0}\n"
        "server: {grpc_max_connections: 100, grpc_max_connection_age_ms: 60000}\n"
        "client_quotas:\n"
        "  - entity: {user: null}\n"
        "    quotas: {producer_byte_rate: 1048576, request_percentage: 50}\n"
        "  - entity: {user: alice, client-id: ingest}\n"
        "    quotas: {producer_byte_rate: 4096}\n"
    )
    config = SinkConfig.load(path, env={"TELEMETRY_SINK_ADMIN__CONFIG_LOG_POLL_S": "0.25"})
    assert (config.admin.strict_mutation_quota, config.admin.config_log_poll_s) == (False, 0.25)
    assert config.exporter.quota_sample_period_s == 0
    assert config.server.grpc_options() == [
        ("grpc.max_allowed_incoming_connections", 100),
        ("grpc.max_concurrent_streams", 100),  # the defaults stay for the keys the file leaves out
        ("grpc.max_connection_idle_ms", 600000),
        ("grpc.max_connection_age_ms", 60000),
    ]
    assert config.client_quotas == (
        (ClientQuotaEntity(user=DEFAULT), "producer_byte_rate", 1048576.0),
        (ClientQuotaEntity(user=DEFAULT), "request_percentage", 50.0),
        (ClientQuotaEntity(user="alice", client_id="ingest"), "producer_byte_rate", 4096.0),
    )


def test_quo_2_bootstrap_quotas_are_checked_like_alter_client_quotas(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "admin: {config_log_poll_s: 0, strict_mutation_quota: maybe, colour: blue}\n"
        "exporter: {quota_sample_period_s: -1}\n"
        "server: {grpc_max_connections: 0}\n"
        "client_quotas:\n"
        "  - entity: {user: alice}\n"
        "    quotas: {producer_byte_rate: -5, connection_creation_rate: 3, tokens: 1}\n"
        "  - entity: {topic: t}\n"
        "    quotas: {producer_byte_rate: 1}\n"
        "  - just a string\n"
    )
    with pytest.raises(SinkConfigError) as raised:
        SinkConfig.load(path, env={})
    text = "\n".join(raised.value.problems)
    for expected in [
        "admin.config_log_poll_s",
        "admin.strict_mutation_quota",
        "unknown key 'admin.colour'",
        "exporter.quota_sample_period_s",
        "server: ",
        "client_quotas[0]: ",
        "Invalid configuration key connection_creation_rate",
        "Invalid configuration key tokens",
        "client_quotas[1].entity",
        "client_quotas[2] must be",
    ]:
        assert expected in text, expected
    assert len([p for p in raised.value.problems if p.startswith("client_quotas[0]")]) == 3


def test_kafka_listener_defaults_to_port_9094_with_kafkas_limits() -> None:
    kafka = SinkConfig.load(env={}).kafka_listener
    assert kafka.port == 9094
    assert (kafka.advertised_host, kafka.advertised_port, kafka.node_id) == (None, None, 0)
    assert kafka.socket_request_max_bytes == 8388608  # Kafka's socket.request.max.bytes, 8 MiB here
    assert kafka.connections_max_idle_ms == 600000  # Kafka's connections.max.idle.ms
    assert kafka.max_connections == 10000  # Kafka: none; bounds an attacker, never a fleet
    assert kafka.max_connection_creation_rate == 2147483647
    assert kafka.non_push_request_max_bytes == 1048576  # every API but PushTelemetry


def test_connection_limits_are_on_by_default_and_listed_in_the_documented_example() -> None:
    """F9: every connection count and HTTP timeout is finite by default, and the example shows it."""
    config = SinkConfig.load(env={})
    server = config.server
    assert config.quotas.max_connections_per_ip == 1000
    assert server.http_max_connections == 10000
    assert server.http_timeouts() == HttpTimeouts(header_ms=10000, body_ms=30000, idle_ms=120000)
    assert server.gate_limits() == GateLimits(max_waiting=1000, max_wait_ms=10000)
    assert server.grpc_options() == [
        ("grpc.max_allowed_incoming_connections", 10000),
        ("grpc.max_concurrent_streams", 100),
        ("grpc.max_connection_idle_ms", 600000),
    ]
    documented = config_module.__doc__ or ""
    for line in (
        "http_max_connections: 10000",
        "http_header_timeout_ms: 10000",
        "http_body_timeout_ms: 30000",
        "http_idle_timeout_ms: 120000",
        "max_waiting_connections: 1000",
        "connection_wait_timeout_ms: 10000",
        "grpc_max_connections: 10000",
        "grpc_max_concurrent_streams: 100",
        "grpc_max_connection_idle_ms: 600000",
        "non_push_request_max_bytes: 1048576",
        "max_connections: 10000",
        "max.connections.per.ip: 1000",
    ):
        assert line in documented, line


def test_connection_limits_are_set_from_the_environment_and_checked() -> None:
    env = {
        "TELEMETRY_SINK_SERVER__HTTP_HEADER_TIMEOUT_MS": "200",
        "TELEMETRY_SINK_SERVER__GRPC_MAX_CONCURRENT_STREAMS": "null",  # grpcio's default: none
        "TELEMETRY_SINK_QUOTAS__MAX_CONNECTIONS_PER_IP": "2147483647",  # Kafka's: none
    }
    config = SinkConfig.load(env=env)
    assert config.server.http_timeouts().header_ms == 200
    assert ("grpc.max_concurrent_streams", 100) not in config.server.grpc_options()
    assert config.quotas.max_connections_per_ip == 2147483647
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document(
            {
                "server": {"http_body_timeout_ms": 0, "max_waiting_connections": True},
                "kafka_listener": {"non_push_request_max_bytes": -1},
            }
        )
    problems = "\n".join(info.value.problems)
    assert "server.http_body_timeout_ms must be an integer between 1 and 2147483647, got 0" in problems
    assert "server.max_waiting_connections must be an integer between 1" in problems
    assert "kafka_listener.non_push_request_max_bytes must be an integer between 1" in problems


def test_kafka_listener_is_set_from_the_file_and_turned_off_from_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kafka_listener: {port: 19094, advertised_host: sink.example.com, node_id: 3}\n")
    config = SinkConfig.load(path, env={})
    assert (config.kafka_listener.port, config.kafka_listener.advertised_host) == (19094, "sink.example.com")
    assert config.kafka_listener.node_id == 3
    off = SinkConfig.load(path, env={"TELEMETRY_SINK_KAFKA_LISTENER__PORT": "null"})
    assert off.kafka_listener.port is None


def test_kafka_listener_problems_are_reported_with_the_others() -> None:
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document(
            {
                "server": {"grpc_port": 4317},
                "kafka_listener": {
                    "port": 4317,
                    "advertised_port": 70000,
                    "socket_request_max_bytes": 0,
                    "cluster_id": "",
                    "colour": "blue",
                },
            }
        )
    problems = "\n".join(info.value.problems)
    assert "kafka_listener.port must differ from server.grpc_port" in problems
    assert "kafka_listener.advertised_port must be a port number" in problems
    assert "kafka_listener.socket_request_max_bytes must be an integer between 1" in problems
    assert "kafka_listener.cluster_id must be a non-empty string" in problems
    assert "unknown key 'kafka_listener.colour'" in problems


def test_kafka_listener_request_limit_must_leave_room_for_the_largest_push() -> None:
    with pytest.raises(SinkConfigError, match=r"at least telemetry.max.bytes \+ 64 KiB \(2162688\)"):
        SinkConfig.from_document(
            {
                "client_metrics": {"telemetry.max.bytes": 2097152},
                "kafka_listener": {"socket_request_max_bytes": 2097152},
            }
        )


def test_grpc_message_limit_must_leave_room_for_the_largest_push() -> None:
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document({"client_metrics": {"telemetry.max.bytes": 8 * 1024 * 1024}})
    problems = "\n".join(info.value.problems)
    assert "server.grpc_max_receive_message_bytes must be at least telemetry.max.bytes + 64 KiB" in problems
    raised = SinkConfig.from_document(
        {
            "client_metrics": {"telemetry.max.bytes": 8 * 1024 * 1024},
            "server": {"grpc_max_receive_message_bytes": 9 * 1024 * 1024},
            "kafka_listener": {"socket_request_max_bytes": 9 * 1024 * 1024},
        }
    )
    assert raised.server.grpc_max_receive_message_bytes == 9 * 1024 * 1024


def test_otlp_tolerant_intake_is_off_by_default_documented_and_set_from_the_environment() -> None:
    assert SinkConfig.load(env={}).server.otlp_tolerant_intake is False
    assert "otlp_tolerant_intake: false" in (config_module.__doc__ or "")
    env = {"TELEMETRY_SINK_SERVER__OTLP_TOLERANT_INTAKE": "true"}
    assert SinkConfig.load(env=env).server.otlp_tolerant_intake is True


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_otlp_tolerant_intake_must_be_a_boolean(value: object) -> None:
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document({"server": {"otlp_tolerant_intake": value}})
    assert info.value.problems == [f"server.otlp_tolerant_intake must be true or false, got {value!r}"]


def _typed_sections() -> dict[str, type]:
    return {"": SinkConfig, **config_module._TYPED_SECTIONS}


def test_issue20_every_default_is_a_value_its_fields_parser_gives() -> None:
    """Each field declares its parser; the default is one of the values it parses to."""
    for section, section_type in _typed_sections().items():
        defaults = section_type()
        for item in fields(section_type):
            parse = item.metadata.get("parse")
            if section == "" and parse is None:
                continue  # the sections themselves and the mappings other modules read
            assert parse is not None, f"{section}.{item.name}"
            value = getattr(defaults, item.name)
            assert parse(value) == value, f"{section}.{item.name}"


def test_issue20_values_are_parsed_into_their_declared_types_before_the_objects_are_built() -> None:
    config = SinkConfig.from_document(
        {
            "server": {"shutdown_grace_s": 5, "host": "127.0.0.1"},
            "admin": {"config_log_poll_s": 1},
            "security": {"super_users": "User:a; User:b"},
            "spark": {"conf": {"spark.sql.shuffle.partitions": 4, "spark.sql.adaptive.enabled": False}},
        }
    )
    assert type(config.server.shutdown_grace_s) is float
    assert config.server.shutdown_grace_s == 5.0
    assert type(config.admin.config_log_poll_s) is float
    assert config.security.super_users == ("User:a", "User:b")
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.sql.adaptive.enabled": "false"}


def test_issue20_a_value_of_the_wrong_type_is_one_problem_never_a_crash_nor_kept() -> None:
    """Before, these were built into the frozen objects as written (host 5, exporter name 'None') or
    crashed the loader (options as a list)."""
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document(
            {
                "server": {"host": 5},
                "exporter": {"name": None, "options": [1, 2]},
                "kafka_listener": {"advertised_host": 7},
                "security": {"tokens_file": 3},
            }
        )
    assert sorted(info.value.problems) == [
        "exporter.name must be an exporter entry point or dotted path, got None",
        "exporter.options must be a mapping, got [1, 2]",
        "kafka_listener.advertised_host must be a host name or null, got 7",
        "security.tokens_file must be a path, got 3",
        "server.host must be a host name or address, got 5",
    ]


def test_issue20_the_spark_section_has_a_default_and_refuses_what_spark_would_not_take(
    tmp_path: Path,
) -> None:
    assert SinkConfig.load(env={}).spark == config_module.SparkConfig(None, {}, "auto")
    path = tmp_path / "c.yaml"
    path.write_text(
        "spark: {master: 'spark://m:7077', conf: {spark.executor.memory: 4g}, delta_connector: off}\n"
    )
    spark = SinkConfig.load(path, env={"TELEMETRY_SINK_SPARK__MASTER": "local[2]"}).spark
    assert (spark.master, spark.conf, spark.delta_connector) == (
        "local[2]",
        {"spark.executor.memory": "4g"},
        "off",
    )
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.from_document(
            {"spark": {"master": "", "conf": {"executor.memory": "4g"}, "delta_connector": "maybe", "x": 1}}
        )
    assert sorted(info.value.problems) == [
        "spark.conf must map spark.* keys to values, got ['executor.memory']",
        "spark.delta_connector must be auto, on or off, got 'maybe'",
        "spark.master must be a Spark master URL or null, got ''",
        "unknown key 'spark.x'",
    ]


def test_issue20_the_admin_commands_token_variable_is_not_a_setting() -> None:
    """TELEMETRY_SINK_ADMIN_TOKEN (the admin command's credential) in the environment of ``serve`` or
    a lake command is not read as a setting; a mistyped setting is still refused."""
    config = SinkConfig.load(env={TOKEN_ENV: "s3cret", "TELEMETRY_SINK_PURE_PYTHON": "1"})
    assert config == SinkConfig.load(env={})
    assert TOKEN_ENV in config_module.NOT_SETTINGS
    with pytest.raises(SinkConfigError) as info:
        SinkConfig.load(env={TOKEN_ENV: "s3cret", "TELEMETRY_SINK_ADMIN_TOKENS": "x"})
    assert info.value.problems == ["TELEMETRY_SINK_ADMIN_TOKENS: unknown setting"]


def _sasl_problems(
    tmp_path: Path, kafka: Mapping[str, object], security: Mapping[str, object], tls: bool
) -> str:
    server: dict[str, object] = {}
    if tls:
        server = {"tls_cert_file": str(tmp_path / "c.pem"), "tls_key_file": str(tmp_path / "k.pem")}
    try:
        SinkConfig.from_document({"kafka_listener": kafka, "security": security, "server": server})
    except SinkConfigError as exc:
        return str(exc)
    return ""


def test_kafka_listener_security_protocol_follows_kafkas_names_and_needs_what_each_uses(
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("alice: secret\n")
    with_users = {"sasl_users_file": str(users)}
    assert "needs security.sasl_users_file" in _sasl_problems(
        tmp_path, {"security_protocol": "SASL_PLAINTEXT"}, {}, tls=False
    )
    assert "SASL_SSL needs server.tls_cert_file" in _sasl_problems(
        tmp_path, {"security_protocol": "SASL_SSL"}, with_users, tls=False
    )
    assert "GSSAPI not supported" in _sasl_problems(
        tmp_path,
        {"security_protocol": "SASL_PLAINTEXT", "sasl_enabled_mechanisms": "GSSAPI,PLAIN"},
        with_users,
        tls=False,
    )
    assert "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in _sasl_problems(
        tmp_path, {"security_protocol": "sasl_plaintext"}, with_users, tls=False
    )
    secured = {"security_protocol": "SASL_PLAINTEXT"}
    assert _sasl_problems(tmp_path, secured, {**with_users, "require_authentication": True}, tls=False) == ""
    config = SinkConfig.from_document({"kafka_listener": {"sasl_enabled_mechanisms": "SCRAM-SHA-512"}})
    assert config.kafka_listener.sasl_enabled_mechanisms == ("SCRAM-SHA-512",)
    assert config.kafka_listener.protocol(config.server) == "PLAINTEXT"


def test_a_bad_sasl_users_file_is_a_config_problem(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("alice: ''\n")
    problems = _sasl_problems(tmp_path, {}, {"sasl_users_file": str(users)}, tls=False)
    assert "security.sasl_users_file: user 'alice': the password is empty" in problems


def test_AUD_C14_a_replica_session_timeout_not_longer_than_the_heartbeat_is_refused() -> None:
    with pytest.raises(SinkConfigError, match="replica_session_timeout_ms must be longer"):
        SinkConfig.from_document(
            {"admin": {"replica_heartbeat_ms": 5000, "replica_session_timeout_ms": 5000}}
        )
    config = SinkConfig.from_document(
        {"admin": {"replica_heartbeat_ms": 1000, "replica_session_timeout_ms": 5000}}
    )
    assert (config.admin.replica_heartbeat_ms, config.admin.replica_session_timeout_ms) == (1000, 5000)


def test_the_failed_authentication_delay_must_be_less_than_the_idle_timeout() -> None:
    kafka = {"connection_failed_authentication_delay_ms": 600_000, "connections_max_idle_ms": 600_000}
    with pytest.raises(SinkConfigError, match="connection_failed_authentication_delay_ms must be less than"):
        SinkConfig.from_document({"kafka_listener": kafka})
    assert SinkConfig.from_document({}).kafka_listener.connection_failed_authentication_delay_ms == 100
