"""The subscription core's config: Kafka's names and defaults, every problem reported at once."""

from __future__ import annotations

from dataclasses import fields

import pytest

from subscriptions import ClientMetricsConfig, ConfigError


def test_defaults_match_kafka() -> None:
    config = ClientMetricsConfig.default()
    assert config.telemetry_max_bytes == 1048576
    assert config.cache_max_size == 16384
    assert config.instance_expiry_base_ms == 60000
    assert config.match_pattern_max_length == 1024
    assert config.validate() == []


def test_every_field_has_a_kafka_style_key() -> None:
    assert {f.name for f in fields(ClientMetricsConfig)} == set(ClientMetricsConfig.KEYS.values())


def test_from_mapping_reads_kafka_keys() -> None:
    config = ClientMetricsConfig.from_mapping(
        {"telemetry.max.bytes": "2048", "client.metrics.cache.max.size": 1_000_000}
    )
    assert config.telemetry_max_bytes == 2048
    assert config.cache_max_size == 1_000_000


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        ClientMetricsConfig.from_mapping(
            {"telemetry.max.bytes": 0, "client.metrics.cache.max.size": "lots", "bogus": 1}
        )
    assert len(info.value.problems) == 3
    assert any("bogus" in p for p in info.value.problems)
    assert any("telemetry.max.bytes must be between 1" in p for p in info.value.problems)
    assert any("client.metrics.cache.max.size must be an integer" in p for p in info.value.problems)


def test_accepted_compression_types_are_kafkas_list_in_its_order_unless_configured() -> None:
    assert [c.name for c in ClientMetricsConfig().accepted_compression_types] == [
        "ZSTD",
        "LZ4",
        "GZIP",
        "SNAPPY",
    ]
    listed = ClientMetricsConfig.from_mapping({"client.metrics.accepted.compression.types": "gzip, lz4"})
    assert [int(c) for c in listed.accepted_compression_types] == [1, 3]
    from_yaml = ClientMetricsConfig.from_mapping({"client.metrics.accepted.compression.types": ["snappy"]})
    assert [int(c) for c in from_yaml.accepted_compression_types] == [2]
    with pytest.raises(ConfigError, match="unknown compression type 'brotli'"):
        ClientMetricsConfig.from_mapping({"client.metrics.accepted.compression.types": "zstd,brotli"})
    with pytest.raises(ConfigError, match="distinct"):
        ClientMetricsConfig.from_mapping({"client.metrics.accepted.compression.types": "zstd,zstd"})
