"""ApiVersions as a client sees it, from the real broker and from the sink's Kafka listener: the sink
advertises a subset of Kafka's APIs (the telemetry, cluster, config, quota and SCRAM ones: docs/ingest.md),
and for each of them a version range that a Kafka 4.4 broker advertises too, so that a client's choice
of version against the sink is one Kafka defines (docs/kafka-oracle.md)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.support.kafka import KafkaClient
from tests.support.kafka_broker import KafkaOracle
from tests.support.process import Running

pytestmark = pytest.mark.integration


async def _versions(port: int) -> dict[int, tuple[int, int]]:
    client = await KafkaClient.connect(port)
    try:
        answer: Any = await client.request(
            ApiVersionsRequest(client_software_name="kio", client_software_version="1")
        )
    finally:
        client.close()
    assert int(answer.error_code) == 0
    return {int(v.api_key): (int(v.min_version), int(v.max_version)) for v in answer.api_keys}


async def test_every_api_version_the_sink_advertises_is_one_the_broker_advertises(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    kafka = await _versions(kafka_oracle.broker.plaintext_port)
    ours = await _versions(sink.kafka_port)
    assert {71, 72} <= kafka.keys() & ours.keys()  # the telemetry APIs, advertised with a reporter
    outside = {
        key: (low, high)
        for key, (low, high) in ours.items()
        if key not in kafka or not (kafka[key][0] <= low and high <= kafka[key][1])
    }
    assert outside == {}, {key: (ours[key], kafka.get(key)) for key in outside}
