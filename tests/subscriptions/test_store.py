"""TEL-5: the store, its version counter, and its YAML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from subscriptions import (
    ClientMetricsConfig,
    InvalidConfigError,
    InvalidRequestError,
    StoreFileError,
    SubscriptionStore,
)


def test_TEL_5_kafka_version_counter_example() -> None:
    store = SubscriptionStore()
    assert store.update("unknown", {}) == 0  # empty update of an unknown name: nothing happens
    assert store.update("sub-1", {"metrics": "org.apache.kafka.", "interval.ms": "1000"}) == 1
    assert len(store) == 1
    assert store.delete("sub-1") == 2
    assert len(store) == 0


def test_TEL_5_identical_update_still_bumps_version() -> None:
    store = SubscriptionStore()
    store.update("s", {"metrics": "a"})
    assert store.update("s", {"metrics": "a"}) == 2


def test_TEL_5_failed_validation_changes_nothing() -> None:
    store = SubscriptionStore()
    store.update("s", {"metrics": "a"})
    with pytest.raises(InvalidRequestError):
        store.update("s", {"metrics": "b", "interval.ms": "5"})
    assert store.version == 1
    subscription = store.get("s")
    assert subscription is not None
    assert subscription.metrics == ("a",)


def test_TEL_5_update_replaces_the_complete_property_set() -> None:
    store = SubscriptionStore()
    store.update("s", {"metrics": "a", "interval.ms": "1000"})
    store.update("s", {"metrics": "b"})
    subscription = store.get("s")
    assert subscription is not None
    assert subscription.interval_ms == 300000  # absent key back to its default


def test_TEL_5_names_are_listed_in_ascending_order() -> None:
    store = SubscriptionStore()
    for name in ("b", "c", "a"):
        store.update(name, {"metrics": name})
    assert store.names() == ["a", "b", "c"]


def test_PD_3_name_order_is_javas_utf16_order() -> None:
    store = SubscriptionStore()
    store.update("\uffff", {"metrics": "x"})
    store.update("\U00010000", {"metrics": "y"})  # UTF-16 D800 DC00 sorts before FFFF
    assert store.names() == ["\U00010000", "\uffff"]


def test_PD_10_store_for_config_applies_the_pattern_length_cap() -> None:
    store = SubscriptionStore.for_config(ClientMetricsConfig(match_pattern_max_length=5))
    with pytest.raises(InvalidConfigError):
        store.update("s", {"match": "client_id=abcdefghij"})
    store.update("s", {"match": "client_id=abcde"})


def test_TEL_5_yaml_round_trip_keeps_subscriptions_and_version(tmp_path: Path) -> None:
    store = SubscriptionStore()
    store.update("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "30000"})
    store.update("java", {"match": "client_software_name=apache-kafka-java", "metrics": "*"})
    store.update("gone", {"metrics": "x"})
    store.delete("gone")
    path = tmp_path / "subscriptions.yaml"
    store.save_yaml(path)
    loaded = SubscriptionStore.load_yaml(path)
    assert loaded.version == store.version == 4
    assert loaded.names() == ["java", "producers"]
    assert loaded.by_name() == store.by_name()
    assert [p.name for p in tmp_path.iterdir()] == ["subscriptions.yaml"]  # no temp files left


def test_TEL_5_save_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "subscriptions.yaml"
    path.write_text("old content that is not a store\n")
    store = SubscriptionStore()
    store.update("s", {"metrics": "a"})
    store.save_yaml(path)
    assert SubscriptionStore.load_yaml(path).names() == ["s"]


def test_TEL_5_hand_written_yaml_with_lists(tmp_path: Path) -> None:
    path = tmp_path / "subscriptions.yaml"
    path.write_text(
        "subscriptions:\n"
        "  librdkafka:\n"
        "    metrics: [org.apache.kafka.producer., org.apache.kafka.consumer.]\n"
        "    interval.ms: 60000\n"
        "    match: [client_software_name=librdkafka]\n"
    )
    store = SubscriptionStore.load_yaml(path)
    subscription = store.get("librdkafka")
    assert subscription is not None
    assert subscription.interval_ms == 60000
    assert store.version == 1


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("subscriptions: [", "not valid YAML"),
        ("- a\n- b\n", "mapping at the top level"),
        ("subscriptions: [a]\n", "'subscriptions' must map"),
        ("subscriptions:\n  s: 5\n", "must be a mapping of properties"),
        ("subscriptions:\n  s:\n    interval.ms: 5\n", "subscription 's': Invalid value 5"),
        ("subscriptions:\n  s:\n    match: client_id=[\n", "Illegal client matching pattern"),
    ],
)
def test_TEL_5_bad_files_get_clear_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "subscriptions.yaml"
    path.write_text(text)
    with pytest.raises(StoreFileError, match=fragment.replace("[", r"\[")):
        SubscriptionStore.load_yaml(path)
