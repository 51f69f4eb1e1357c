"""TEL-9 / TEL-10: subscription ids byte for byte as a Kafka broker computes them."""

from __future__ import annotations

import importlib.util
import sys
from uuid import UUID

import pytest

from subscriptions import SubscriptionStore, compute_subscription_id, crc32c, kafka_uuid_string
from subscriptions.resolution import resolve
from subscriptions.subscription_id import (
    _bucket,
    hashset_order,
    java_string_hash,
    render_subscription,
    to_int32,
    uuid_hash,
)

EXAMPLE_UUID = UUID("3f2504e0-4f89-41d3-9a0c-0305e82c3301")
PARTITION_LATENCY = "org.apache.kafka.client.producer.partition.latency"
PARTITION_QUEUE = "org.apache.kafka.client.producer.partition.queue."


def test_crc32c_uses_crcmod_c_extension() -> None:
    """The C extension, not crcmod's pure-Python fallback (which is ~50x slower)."""
    assert importlib.util.find_spec("crcmod._crcfunext") is not None
    assert sys.modules["crcmod.crcmod"]._usingExtension is True
    assert "crcmod._crcfunext" in sys.modules


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_TEL_10_uuid_hash_xors_the_four_words() -> None:
    assert uuid_hash(EXAMPLE_UUID) == 0x028C7537
    assert uuid_hash(EXAMPLE_UUID) == 42759479
    assert uuid_hash(UUID("00000000-0000-0000-0000-000000000002")) == 2
    assert uuid_hash(UUID("ffffffff-ffff-ffff-ffff-ffffffffffff")) == 0
    assert uuid_hash(UUID("12345678-9abc-def0-1234-56789abcdef0")) == 0  # equal halves


def test_TEL_6_kafka_uuid_string_is_url_safe_base64_without_padding() -> None:
    assert kafka_uuid_string(EXAMPLE_UUID) == "PyUE4E-JQdOaDAMF6CwzAQ"


def test_C_2_int32_view() -> None:
    assert to_int32(0xD4C75BDE) == -725132322
    assert to_int32(0x7FFFFFFF) == 2**31 - 1
    assert to_int32(2**32 + 5) == 5


@pytest.mark.parametrize(
    ("metrics", "interval", "rendered", "crc", "subscription_id"),
    [
        ([], 300000, "[]300000", 0xD4C75BDE, -699715863),
        (
            [PARTITION_QUEUE, PARTITION_LATENCY],
            30000,
            f"[{PARTITION_LATENCY}, {PARTITION_QUEUE}]30000",
            0x8C32602F,
            -1900145384,
        ),
        (["*"], 60000, "[*]60000", 0x007D3613, 49365796),
        (
            ["org.apache.kafka.producer.", "org.apache.kafka.consumer."],
            5000,
            "[org.apache.kafka.producer., org.apache.kafka.consumer.]5000",
            0x5E7C374E,
            1559249529,
        ),
        (
            ["org.apache.kafka.producer."],
            30000,
            "[org.apache.kafka.producer.]30000",
            0x1BBF64FC,
            422777291,
        ),
        (["*"], 20000, "[*]20000", 0xE03888A3, -491455084),
    ],
)
def test_TEL_9_worked_examples(
    metrics: list[str], interval: int, rendered: str, crc: int, subscription_id: int
) -> None:
    assert render_subscription(hashset_order(metrics), interval) == rendered
    assert crc32c(rendered.encode()) == crc
    assert compute_subscription_id(metrics, interval, EXAMPLE_UUID) == subscription_id


def test_TEL_9_bucket_indexes_explain_the_order() -> None:
    assert _bucket(PARTITION_LATENCY, 16) == 0
    assert _bucket(PARTITION_QUEUE, 16) == 14
    assert _bucket("org.apache.kafka.producer.", 16) == 0
    assert _bucket("org.apache.kafka.consumer.", 16) == 2


def test_TEL_9_bucket_ties_keep_insertion_order() -> None:
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    tie_uuid = UUID("00000000-0000-0000-0000-000000000002")
    assert compute_subscription_id(["Aa", "BB"], 1000, tie_uuid) == -561900968
    assert compute_subscription_id(["BB", "Aa"], 1000, tie_uuid) == 757134386


def test_TEL_9_java_string_hash_counts_utf16_code_units() -> None:
    assert java_string_hash("a") == 97
    assert java_string_hash("\ud800") == 0xD800  # a lone surrogate is one code unit
    assert render_subscription(["a\ud800"], 5).encode("utf-8", "replace") == b"[a?]5"
    # U+1F600 is a surrogate pair in UTF-16: (31 * 0xD83D + 0xDE00)
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00


def test_TEL_9_resolved_through_the_store_star_beats_everything() -> None:
    store = SubscriptionStore()
    store.update("s", {"metrics": "org.apache.kafka.client.consumer.,*", "interval.ms": "100"})
    resolution = resolve(store.by_name(), {})
    assert resolution.requested_metrics == ("*",)
    assert render_subscription(resolution.requested_metrics, resolution.push_interval_ms) == "[*]100"
    assert resolution.crc == to_int32(0x359EFCA1)
    everyone = UUID("ffffffff-ffff-ffff-ffff-ffffffffffff")
    assert resolution.crc ^ uuid_hash(everyone) == 899611809


def test_TEL_9_per_subscription_set_order_then_union_order() -> None:
    """Row 2 of the table: one subscription configured queue-then-latency renders latency first."""
    store = SubscriptionStore()
    store.update("s", {"metrics": f"{PARTITION_QUEUE},{PARTITION_LATENCY}", "interval.ms": 30000})
    resolution = resolve(store.by_name(), {})
    assert resolution.requested_metrics == (PARTITION_LATENCY, PARTITION_QUEUE)
    assert resolution.crc ^ uuid_hash(EXAMPLE_UUID) == -1900145384


def test_TEL_9_union_of_two_subscriptions() -> None:
    """Row 4: union of [producer.] and [consumer., producer.]; duplicates collapse."""
    store = SubscriptionStore()
    store.update("a", {"metrics": "org.apache.kafka.producer.", "interval.ms": 5000})
    store.update("b", {"metrics": "org.apache.kafka.consumer.,org.apache.kafka.producer."})
    resolution = resolve(store.by_name(), {})
    assert resolution.requested_metrics == (
        "org.apache.kafka.producer.",
        "org.apache.kafka.consumer.",
    )
    assert resolution.push_interval_ms == 5000
    assert resolution.crc ^ uuid_hash(EXAMPLE_UUID) == 1559249529
