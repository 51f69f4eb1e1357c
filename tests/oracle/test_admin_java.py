"""Kafka's Java Admin (kafka-clients 4.4), called directly, one call after another, against the broker
and against the sink (``tests/support/java/telemetry/sink/oracle/AdminCalls.java``): a subscription
validated, made, described, listed, appended to and given a wrong value; a SCRAM user upserted,
described and deleted, and an unknown one deleted; a user's quota set, described and removed. Every
answer, errors included, is compared line by line (docs/kafka-oracle.md). A broker's reads follow its
controller's changes a moment later, so a read after a change is repeated until it shows the change."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.kafka_broker import KafkaOracle, java_command
from tests.support.process import Running

pytestmark = pytest.mark.integration

SUBSCRIPTION = "admin-calls-sub"
USER = "admin-calls-user"
CALLS = [
    f"set-subscription:{SUBSCRIPTION}:metrics=org.apache.kafka.producer.,interval.ms=60000:validate",
    "list-subscriptions:admin-calls-",
    f"set-subscription:{SUBSCRIPTION}:metrics=org.apache.kafka.producer.,interval.ms=60000",
    f"describe-subscription:{SUBSCRIPTION}",
    "list-subscriptions:admin-calls-",
    f"append-subscription:{SUBSCRIPTION}:metrics=org.apache.kafka.consumer.",
    f"set-subscription:{SUBSCRIPTION}:interval.ms=10",
    f"upsert-scram:{USER}:SCRAM-SHA-256:8192:a-secret",
    "scram-users:admin-calls-:1",  # each read after a change waits for the lines it should have
    f"delete-scram:{USER}:SCRAM-SHA-256",
    "scram-users:admin-calls-:0",
    "delete-scram:admin-calls-nobody:SCRAM-SHA-512",
    f"set-quota:{USER}:producer_byte_rate=1024",
    "quotas:admin-calls-:1",
    f"set-quota:{USER}:producer_byte_rate=-",
    "quotas:admin-calls-:0",
]


def test_the_java_admin_gets_from_the_sink_what_it_gets_from_the_broker(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    said = []
    for bootstrap in (kafka_oracle.broker.bootstrap, f"127.0.0.1:{sink.kafka_port}"):
        done = subprocess.run(
            [*java_command(kafka_oracle.helpers, "256m"), "telemetry.sink.oracle.AdminCalls", bootstrap,
             *CALLS],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        said.append(done.stdout.splitlines())
    kafka, ours = said
    assert kafka.count("ok") >= 5  # the calls did something on the broker
    assert ours == kafka
