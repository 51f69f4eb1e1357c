"""``kafka-configs.sh --entity-type users`` (Kafka's ``ConfigCommand``, from Kafka 4.4's jars) against the
real broker and the sink's Kafka listener: SCRAM credentials described, upserted and deleted with the
same answers (docs/kafka-oracle.md)."""

from __future__ import annotations

import pytest

from tests.support.kafka_broker import KafkaOracle, ToolRun
from tests.support.process import Running

pytestmark = pytest.mark.integration


def _user(oracle: KafkaOracle, sink: Running, user: str, *args: str) -> ToolRun:
    """``kafka-configs.sh --entity-type users --entity-name user ARGS`` answered the same by both."""
    return oracle.same(
        "kafka-configs", sink.kafka_port, "--entity-type", "users", "--entity-name", user, *args
    )


def _about(run: ToolRun, users: set[str]) -> tuple[int, list[str]]:
    """The status and the output lines that name one of ``users`` (the broker has users of its own),
    sorted: a broker lists every user in its hash map's order, the sink by name."""
    return run.status, sorted(
        line for line in run.stdout.splitlines() if any(f"'{u}'" in line for u in users)
    )


def test_KF3_U2_describing_users_without_names_shows_every_scram_user_as_kafka_does(
    kafka_oracle: KafkaOracle, sink: Running
) -> None:
    users = {"oracle-u2-carol", "oracle-u2-dave"}
    for user in sorted(users):
        _user(
            kafka_oracle,
            sink,
            user,
            "--alter",
            "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=secret]",
        )
    kafka, ours = kafka_oracle.both("kafka-configs", sink.kafka_port, "--describe", "--entity-type", "users")
    assert _about(ours, users) == _about(kafka, users)
    assert len(_about(kafka, users)[1]) == 2
    _user(kafka_oracle, sink, "oracle-u2-carol", "--describe")


@pytest.mark.parametrize(
    "changes",
    [
        [["--add-config", "SCRAM-SHA-256=[iterations=8192,password=a],SCRAM-SHA-512=[password=b]"]],
        [
            ["--add-config", "SCRAM-SHA-256=[password=a]"],
            ["--add-config", "SCRAM-SHA-512=[password=b]", "--delete-config", "SCRAM-SHA-256"],
        ],
    ],
    ids=["both mechanisms", "an upsertion and a deletion"],
)
def test_KF3_U4_two_changes_of_one_user_in_one_request_answer_as_kafka(
    kafka_oracle: KafkaOracle, sink: Running, changes: list[list[str]], request: pytest.FixtureRequest
) -> None:
    user = f"oracle-u4-{request.node.callspec.id.replace(' ', '-')}"
    for change in changes:
        _user(kafka_oracle, sink, user, "--alter", *change)
    _user(kafka_oracle, sink, user, "--describe")


@pytest.mark.parametrize(
    "args",
    [
        ["--describe"],
        ["--alter", "--add-config", "SCRAM-SHA-256=[iterations=1000,password=a]"],
        ["--alter", "--add-config", "SCRAM-SHA-256=[iterations=20000,password=a]"],
        ["--alter", "--add-config", "SCRAM-SHA-1=[password=a]"],
        ["--alter", "--delete-config", "SCRAM-SHA-512"],
    ],
    ids=["describe", "too few iterations", "too many iterations", "unknown mechanism", "delete nothing"],
)
def test_a_user_without_credentials_is_described_and_refused_as_kafka_does(
    kafka_oracle: KafkaOracle, sink: Running, args: list[str]
) -> None:
    _user(kafka_oracle, sink, "oracle-nobody", *args)
