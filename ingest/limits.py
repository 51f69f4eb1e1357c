"""What one request may cost: the structural and text limits every transport applies (``limits:``).

The connection-level limits (timeouts, connection counts, Kafka frame sizes) are the listeners' own
(``server.*`` and ``kafka_listener.*``); the bytes a payload may decompress to is
``server.max_decompressed_bytes``. This module owns the rest, checked before and during parsing so
that the CPU time and memory of a request are bounded by its size and by these numbers, whatever the
request holds:

| key | default | what it bounds |
|---|---|---|
| ``max_resource_metrics`` | 1,000 | ``ResourceMetrics`` in one payload |
| ``max_scope_metrics`` | 10,000 | ``ScopeMetrics`` in one payload (all resources) |
| ``max_metrics`` | 20,000 | ``Metric`` messages in one payload |
| ``max_data_points`` | 100,000 | data points in one payload (every kind) |
| ``max_elements`` | 1,000,000 | protobuf messages of every kind in one payload: the parser's memory |
| ``max_attributes_per_point`` | 128 | attributes of one data point, resource or scope (OTel SDK default) |
| ``max_attribute_value_bytes`` | 16,384 | one attribute's key or string/bytes value |
| ``max_json_depth`` | 64 | nesting of an OTLP JSON body |
| ``max_json_elements`` | 100,000 | values and containers of an OTLP JSON body (its commas, ``{`` and ``[``) |
| ``max_client_id_chars`` | 1,024 | a Kafka client id (header or Kafka request header) |
| ``max_software_chars`` | 128 | a client software name or version |
| ``max_entity_counters`` | 10,000 | the per-quota-entity request counters kept between quota snapshots |
| ``max_compressed_frames`` | 64 | gzip members, lz4 or zstd frames in one payload (Kafka clients send one) |
| ``max_held_clients`` | 10,000 | quota sensors held at once for a throttle (HTTP, gRPC); more are not held |
| ``max_quota_entities`` | 50,000 | quota entities with sensors per quota type (~6 KB each); LRU evicted |
| ``max_clients_per_export`` | 1,000 | clients (so client instance ids, and rows) one OTLP export carries |
| ``max_clients_per_forwarder_export`` | 10,000 | the same, in an export from a trusted forwarder |
| ``max_instance_owners`` | 65,536 | OTLP instance ids whose owning principal is remembered (F8) |

The clients of an OTLP export are counted where the export is split per client
(``ingest.security.attribution``, in the decoder), before any of them is resolved or landed, so one
request lands at most ``max_clients_per_export`` rows. A sender in ``security.trusted_forwarders`` (a
broker plugin or a Collector batches many clients by design) is held to
``max_clients_per_forwarder_export`` instead (``for_trusted_forwarder``; never to fewer).
``max_instance_owners`` bounds the whole instance ownership table, where each principal holds at most
``client.metrics.max.cache.size`` ids (``ingest.security.instance_owners``).

Over a payload limit, a KIP-714 push is answered TELEMETRY_TOO_LARGE (118, retried at the next
interval, PD-12) and an OTLP export (too many clients included) 413 / RESOURCE_EXHAUSTED without retry
information; client text over its limit, or not valid text, is refused with INVALID_REQUEST, with a
message naming the field where the answer carries one (HTTP, gRPC, DescribeClientQuotas; a Kafka
ApiVersions or telemetry answer has only the code).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from quotas import DEFAULT_MAX_QUOTA_ENTITIES

__all__ = ["DEFAULT_LIMITS", "RequestLimits"]


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """The ``limits:`` section: what one request may hold (see the module docstring)."""

    max_resource_metrics: int = 1_000
    max_scope_metrics: int = 10_000
    max_metrics: int = 20_000
    max_data_points: int = 100_000
    max_elements: int = 1_000_000
    max_attributes_per_point: int = 128
    max_attribute_value_bytes: int = 16_384
    max_json_depth: int = 64
    max_json_elements: int = 100_000
    max_client_id_chars: int = 1_024
    max_software_chars: int = 128
    max_entity_counters: int = 10_000
    max_compressed_frames: int = 64
    max_held_clients: int = 10_000
    max_quota_entities: int = DEFAULT_MAX_QUOTA_ENTITIES
    max_clients_per_export: int = 1_000
    max_clients_per_forwarder_export: int = 10_000
    max_instance_owners: int = 65_536

    def for_trusted_forwarder(self) -> RequestLimits:
        """These limits for an export from a trusted forwarder: ``max_clients_per_export`` raised to
        ``max_clients_per_forwarder_export`` (a forwarder is never allowed fewer clients than anyone)."""
        most = max(self.max_clients_per_export, self.max_clients_per_forwarder_export)
        return replace(self, max_clients_per_export=most)


DEFAULT_LIMITS: Final = RequestLimits()
