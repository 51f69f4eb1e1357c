"""Subscription ids exactly as a Kafka broker computes them (docs/rules.md TEL-9, TEL-10, PD-3).

``subscription_id = int32(CRC32C(render(metrics) + str(interval))) XOR uuid_hash(instance_id)``,
where ``render`` is Java's ``AbstractCollection.toString()`` of a ``java.util.HashSet``. The element
order of that set is an implementation accident of Java's ``HashMap`` that Kafka clients see (it is
also the order of ``RequestedMetrics``), so it is reproduced here in one small, named place:
``hashset_order``. CRC32C (Castagnoli) comes from ``crcmod``'s C extension.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from typing import Final
from uuid import UUID

import crcmod.predefined

__all__ = [
    "compute_subscription_id",
    "crc32c",
    "hashset_order",
    "java_hashset_capacity",
    "java_string_hash",
    "jdk17_copy_capacity",
    "kafka_uuid_string",
    "render_subscription",
    "subscription_crc",
    "to_int32",
    "uuid_hash",
]

crc32c: Final[Callable[[bytes], int]] = crcmod.predefined.mkCrcFun("crc-32c")
"""CRC-32C (Castagnoli, reflected, init and xorout 0xFFFFFFFF) as an unsigned 32-bit int."""


def to_int32(value: int) -> int:
    """Two's-complement view of the low 32 bits of ``value`` (C-2 in docs/rules.md)."""
    value &= 0xFFFFFFFF
    return value - 0x1_0000_0000 if value >= 0x8000_0000 else value


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` over UTF-16 code units, as an unsigned 32-bit int."""
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")  # a lone surrogate is one code unit in Java
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h


def _bucket(s: str, capacity: int) -> int:
    h = java_string_hash(s)
    return (h ^ (h >> 16)) & (capacity - 1)


def _table_size_for(n: int) -> int:
    """``HashMap.tableSizeFor``: the smallest power of two >= n (at least 1)."""
    cap = 1
    while cap < n:
        cap <<= 1
    return cap


def java_hashset_capacity(size: int) -> int:
    """Table capacity of a default ``new HashSet<>()`` after ``size`` distinct adds (16, doubling)."""
    cap = 16
    while size > cap * 3 // 4:
        cap *= 2
    return cap


def jdk17_copy_capacity(length: int) -> int:
    """Table capacity of ``new HashSet<>(collection)`` on JDK 17; ``length`` counts duplicates."""
    return _table_size_for(max(int(length / 0.75) + 1, 16))


def hashset_order(elements: Iterable[str], capacity: int | None = None) -> list[str]:
    """Iteration order of a Java ``HashSet`` filled with ``elements`` in the given order.

    Elements are ordered by hash bucket; elements sharing a bucket keep insertion order (resizes
    preserve it). ``capacity`` defaults to the default set's growth rule; pass
    ``jdk17_copy_capacity(len(list))`` for a set copied from a list.
    """
    distinct = list(dict.fromkeys(elements))
    cap = java_hashset_capacity(len(distinct)) if capacity is None else capacity
    return sorted(distinct, key=lambda s: _bucket(s, cap))


def render_subscription(metrics_in_set_order: Sequence[str], push_interval_ms: int) -> str:
    """The CRC input: Java's ``toString()`` of the set followed directly by the interval."""
    return "[" + ", ".join(metrics_in_set_order) + "]" + str(push_interval_ms)


def subscription_crc(metrics_in_set_order: Sequence[str], push_interval_ms: int) -> int:
    """The int32 CRC32C of a resolved subscription: the part shared by every client instance."""
    rendered = render_subscription(metrics_in_set_order, push_interval_ms)
    # String.getBytes(UTF_8) writes "?" for a lone surrogate; so does Python's "replace"
    return to_int32(crc32c(rendered.encode("utf-8", "replace")))


def uuid_hash(instance_id: UUID) -> int:
    """``Uuid.hashCode()``: XOR of the UUID's four 32-bit words, as an int32 (TEL-10)."""
    x = instance_id.int
    return to_int32((x >> 96) ^ (x >> 64) ^ (x >> 32) ^ x)


def compute_subscription_id(metrics: Sequence[str], push_interval_ms: int, client_instance_id: UUID) -> int:
    """The subscription id a Kafka broker sends for this resolved subscription (TEL-9).

    ``metrics`` are the resolved metric strings in insertion order (the order a broker adds them to
    its ``HashSet``: matching subscriptions in ascending name order, each in its own set order); the
    result is a signed int32.
    """
    crc = subscription_crc(hashset_order(metrics), push_interval_ms)
    return crc ^ uuid_hash(client_instance_id)


def kafka_uuid_string(instance_id: UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes without padding (22 chars)."""
    return base64.urlsafe_b64encode(instance_id.bytes).rstrip(b"=").decode("ascii")
