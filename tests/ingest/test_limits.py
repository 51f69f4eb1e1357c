"""``ingest.limits``: the ``limits:`` section, and the clients an export may carry by its sender (T3-7)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ingest.config import SinkConfig, SinkConfigError
from ingest.limits import DEFAULT_LIMITS, RequestLimits


@pytest.mark.parametrize(
    ("clients", "forwarder_clients", "trusted"),
    [(1_000, 10_000, 10_000), (1_000, 500, 1_000), (7, 7, 7)],
)
def test_T3_7_a_trusted_forwarder_is_held_to_its_own_limit_never_to_fewer_clients(
    clients: int, forwarder_clients: int, trusted: int
) -> None:
    limits = RequestLimits(max_clients_per_export=clients, max_clients_per_forwarder_export=forwarder_clients)
    assert limits.for_trusted_forwarder() == replace(limits, max_clients_per_export=trusted)
    assert DEFAULT_LIMITS.max_clients_per_export == DEFAULT_LIMITS.max_resource_metrics == 1_000


def test_T3_7_the_client_limits_are_limits_keys_checked_as_the_others() -> None:
    env = {"TELEMETRY_SINK_LIMITS__MAX_CLIENTS_PER_FORWARDER_EXPORT": "50000"}
    config = SinkConfig.load(env=env)
    assert config.limits == replace(DEFAULT_LIMITS, max_clients_per_forwarder_export=50_000)
    document = {"limits": {"max_clients_per_export": 0, "max_instance_owners": "many"}}
    with pytest.raises(SinkConfigError) as refused:
        SinkConfig.from_document(document)
    assert refused.value.problems == [
        "limits.max_clients_per_export must be an integer between 1 and 2147483647, got 0",
        "limits.max_instance_owners must be an integer between 1 and 2147483647, got 'many'",
    ]
