"""The config log on a real Delta table: offsets, replay, tailing by a second replica, and changes
applied to the running engines without resetting quota usage (QUO-8)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake

import exporters.delta.appender as appender_module
import ingest.admin.config_log as config_log_module
from ingest.admin.config_log import (
    ConfigChange,
    ConfigConflictError,
    ConfigImage,
    ConfigLog,
    ConfigLogError,
    ConfigLogFollower,
    InvalidFilterError,
    QuotaChange,
    SubscriptionChange,
)
from ingest.handler_time import metering
from quotas import (
    DEFAULT,
    ClientQuotaEntity,
    QuotaConfig,
    QuotaManagers,
    QuotaType,
    create_quota_managers,
)
from quotas.entities import EntityComponent
from subscriptions import SubscriptionStore
from tests.support.clock import FakeClock

ALICE = ClientQuotaEntity(user="alice")
RATE = "producer_byte_rate"


def replica(table: Path, name: str, clock: FakeClock) -> ConfigLogFollower:
    image = ConfigImage(SubscriptionStore(), create_quota_managers(QuotaConfig(), clock))
    return ConfigLogFollower(ConfigLog(str(table), replica_id=name), image, poll_interval_s=0.01)


def test_each_change_is_one_commit_whose_version_is_its_offset(tmp_path: Path) -> None:
    config_log = ConfigLog(str(tmp_path / "log"), replica_id="a")
    assert config_log.read_since(-1) == (-1, [])
    config_log.append([SubscriptionChange("s", {"metrics": ["org.apache.kafka."]})], "User:admin", 1000)
    config_log.append(
        [QuotaChange(ALICE, RATE, 10.0), QuotaChange(ALICE, "request_percentage", 5.0)], "User:b", 2000
    )
    latest, records = config_log.read_since(-1)
    table = DeltaTable(str(tmp_path / "log"))
    assert latest == table.version()
    assert table.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert [r.version for r in records] == [latest - 1, latest, latest]
    assert [type(r.change) for r in records] == [SubscriptionChange, QuotaChange, QuotaChange]
    assert [r.change.key for r in records[1:]] == [RATE, "request_percentage"]  # type: ignore[union-attr]
    assert records[0].principal == "User:admin"
    assert records[0].replica_id == "a"
    assert records[0].written_ms == 1000
    assert config_log.read_since(latest - 1)[1] == records[1:]
    assert config_log.read_since(latest) == (latest, [])


async def test_a_second_replica_applies_changes_it_did_not_write(tmp_path: Path) -> None:
    clock = FakeClock()
    writer, reader = replica(tmp_path / "log", "a", clock), replica(tmp_path / "log", "b", clock)
    offset = await writer.write(
        [SubscriptionChange("kafka", {"metrics": ["org.apache.kafka."], "interval.ms": 5000})], "User:x", 1
    )
    assert writer.image.store.get("kafka") is not None
    assert reader.image.store.get("kafka") is None
    version_before = reader.image.store.version
    assert await reader.catch_up() == offset
    subscription = reader.image.store.get("kafka")
    assert subscription is not None
    assert subscription.interval_ms == 5000
    assert reader.image.store.version > version_before  # instances are re-evaluated
    await writer.write([SubscriptionChange("kafka", {})], "User:x", 2)
    await reader.catch_up()
    assert reader.image.store.get("kafka") is None


async def test_a_new_replica_replays_the_whole_log_in_offset_order(tmp_path: Path) -> None:
    clock = FakeClock()
    first = replica(tmp_path / "log", "a", clock)
    await first.write([QuotaChange(ALICE, RATE, 100.0)], "User:x", 1)
    await first.write([QuotaChange(ALICE, RATE, 200.0)], "User:x", 2)
    await first.write([QuotaChange(ClientQuotaEntity(client_id=DEFAULT), RATE, 50.0)], "User:x", 3)
    await first.write([QuotaChange(ClientQuotaEntity(client_id=DEFAULT), RATE, None)], "User:x", 4)
    late = replica(tmp_path / "log", "c", clock)
    await late.catch_up()
    assert late.image.client_quotas == {ALICE: {RATE: 200.0}} == first.image.client_quotas
    tags = {"user": "alice", "client-id": ""}
    assert late.image.quotas.produce.callback.quota_limit(QuotaType.PRODUCE, tags) == 200.0


async def test_follower_run_tails_the_log_until_cancelled(tmp_path: Path) -> None:
    clock = FakeClock()
    writer, reader = replica(tmp_path / "log", "a", clock), replica(tmp_path / "log", "b", clock)
    tail = asyncio.create_task(reader.run())
    try:
        await writer.write([QuotaChange(ALICE, RATE, 7.0)], "User:x", 1)
        async with asyncio.timeout(30):
            while ALICE not in reader.image.client_quotas:
                await asyncio.sleep(0.01)
    finally:
        tail.cancel()
    assert reader.image.client_quotas[ALICE] == {RATE: 7.0}


def usage(quotas: QuotaManagers, clock: FakeClock) -> float:
    (rate,) = [v for m, v in quotas.values(clock.now_ms()).items() if m.name == "byte-rate"]
    return rate


async def test_quo_8_a_quota_change_from_the_log_keeps_recorded_usage(tmp_path: Path) -> None:
    clock = FakeClock()
    writer, reader = replica(tmp_path / "log", "a", clock), replica(tmp_path / "log", "b", clock)
    await writer.write([QuotaChange(ALICE, RATE, 1_000_000.0)], "User:x", 1)
    await reader.catch_up()
    produce = reader.image.quotas.produce
    assert produce.record_and_get_throttle_time_ms("User:alice", "c1", 5000, clock.now_ms()) == 0
    recorded = usage(reader.image.quotas, clock)
    assert recorded > 0
    await writer.write([QuotaChange(ALICE, RATE, 100.0)], "User:x", 2)
    await reader.catch_up()
    assert usage(reader.image.quotas, clock) == recorded  # same sensor, same samples
    assert produce.record_and_get_throttle_time_ms("User:alice", "c1", 1, clock.now_ms()) > 0


def test_an_unappliable_change_is_skipped_not_fatal() -> None:
    image = ConfigImage(SubscriptionStore(), create_quota_managers(QuotaConfig(), FakeClock()))
    image.apply(SubscriptionChange("bad", {"interval.ms": "soon"}))
    image.apply(QuotaChange(ClientQuotaEntity(ip="1.2.3.4"), RATE, 1.0))
    image.apply(QuotaChange(ALICE, RATE, 1.0))
    assert image.store.get("bad") is None
    assert image.client_quotas == {ALICE: {RATE: 1.0}}


@pytest.fixture
def image() -> ConfigImage:
    image = ConfigImage(SubscriptionStore(), create_quota_managers(QuotaConfig(), FakeClock()))
    for entity, value in [
        (ClientQuotaEntity(user="alice"), 1.0),
        (ClientQuotaEntity(user=DEFAULT), 2.0),
        (ClientQuotaEntity(user="alice", client_id="c1"), 3.0),
        (ClientQuotaEntity(client_id="c1"), 4.0),
        (ClientQuotaEntity(ip="10.0.0.1"), 5.0),
    ]:
        key = "connection_creation_rate" if entity.ip else RATE
        image.apply(QuotaChange(entity, key, value))
    return image


def described(image: ConfigImage, *components: EntityComponent, strict: bool = False) -> list[float]:
    return sorted(
        v for _, values in image.describe_client_quotas(components, strict) for v in values.values()
    )


def test_describe_client_quotas_filters_as_kafka(image: ConfigImage) -> None:
    assert described(image) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert described(image, strict=True) == []
    assert described(image, EntityComponent("user", 0, "alice")) == [1.0, 3.0]
    assert described(image, EntityComponent("user", 0, "alice"), strict=True) == [1.0]
    assert described(image, EntityComponent("user", 1)) == [2.0]
    assert described(image, EntityComponent("user", 2)) == [1.0, 2.0, 3.0]
    assert described(image, EntityComponent("user", 2), EntityComponent("client-id", 0, "c1")) == [3.0]
    assert described(image, EntityComponent("client-id", 2), strict=True) == [4.0]
    assert described(image, EntityComponent("ip", 2)) == [5.0]


@pytest.mark.parametrize(
    "components",
    [
        [EntityComponent("user", 0, None)],
        [EntityComponent("user", 1, "x")],
        [EntityComponent("user", 2, "x")],
        [EntityComponent("user", 7)],
        [EntityComponent("user", 2), EntityComponent("user", 1)],
        [EntityComponent("ip", 2), EntityComponent("user", 2)],
        [EntityComponent("topic", 2)],  # type: ignore[arg-type]
    ],
)
def test_describe_client_quotas_refuses_filters_kafka_refuses(
    image: ConfigImage, components: list[EntityComponent]
) -> None:
    with pytest.raises(InvalidFilterError):
        image.describe_client_quotas(components, strict=False)


# -- conditional writes (F16) and acknowledgement on proof (F6) ------------------------------------


def _subscription(name: str) -> list[ConfigChange]:
    return [SubscriptionChange(name, {"metrics": ["org.apache.kafka."]})]


def _names(table: Path) -> list[str]:
    _, records = ConfigLog(str(table), replica_id="reader").read_since(-1)
    return [r.change.name for r in records if isinstance(r.change, SubscriptionChange)]


def test_F16_a_change_prepared_at_an_offset_the_log_has_moved_past_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "log"
    a, b = ConfigLog(str(table), replica_id="a"), ConfigLog(str(table), replica_id="b")
    assert a.append(_subscription("first"), "User:x", 1, read_version=-1) == 0
    with pytest.raises(ConfigConflictError) as refused:
        b.append(_subscription("stale-create"), "User:x", 2, read_version=-1)
    assert (refused.value.read_version, refused.value.log_version) == (-1, 0)
    assert a.append(_subscription("second"), "User:x", 3, read_version=0) == 1
    with pytest.raises(ConfigConflictError, match="prepared at offset 0, but the log is at offset 1"):
        b.append(_subscription("stale"), "User:x", 4, read_version=0)
    assert b.append(_subscription("fresh"), "User:x", 5, read_version=1) == 2
    assert _names(table) == ["first", "second", "fresh"]


def test_F6_F16_two_processes_with_one_replica_id_racing_for_an_offset_lose_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A and B share the replica id and both prepare at offset 0; B commits while A is writing. A's
    commit fails (refused when conditional; at the next offset when not), never acknowledged unlanded."""
    table = tmp_path / "log"
    ConfigLog(str(table), replica_id="r").append(_subscription("base"), "User:x", 1)
    a, b = ConfigLog(str(table), replica_id="r"), ConfigLog(str(table), replica_id="r")
    b_first = [("b-conditional", 0), ("b-unconditional", None)]

    def b_commits_first(*args: Any, **kwargs: Any) -> None:
        if b_first:  # A is writing: B's commit goes first (B's own write is not intercepted)
            name, read_version = b_first.pop(0)
            monkeypatch.setattr(config_log_module, "write_deltalake", write_deltalake)
            b.append(_subscription(name), "User:x", 2, read_version=read_version)
            monkeypatch.setattr(config_log_module, "write_deltalake", b_commits_first)
        write_deltalake(*args, **kwargs)

    monkeypatch.setattr(config_log_module, "write_deltalake", b_commits_first)
    with pytest.raises(ConfigConflictError):
        a.append(_subscription("a-conditional"), "User:x", 3, read_version=0)
    assert a.append(_subscription("a-unconditional"), "User:x", 4) == 3
    assert _names(table) == ["base", "b-conditional", "b-unconditional", "a-unconditional"]


class _Faults:
    """Storage faults at the boundary config_log calls: ``write_deltalake`` raises before or after it
    committed, the given number of times."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, before: int = 0, after: int = 0) -> None:
        self.before, self.after = before, after
        self.real = write_deltalake
        monkeypatch.setattr(config_log_module, "write_deltalake", self.write)

    def write(self, *args: Any, **kwargs: Any) -> None:
        if self.before:
            self.before -= 1
            raise OSError(5, "Input/output error (before the commit)")
        self.real(*args, **kwargs)
        if self.after:
            self.after -= 1
            raise OSError(5, "Input/output error (after the commit)")


def test_F6_a_commit_that_reports_an_error_after_landing_is_acknowledged_and_in_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "log"
    config_log = ConfigLog(str(table), replica_id="a", backoff_ms=0)
    config_log.append(_subscription("base"), "User:x", 1)
    _Faults(monkeypatch, after=1)
    assert config_log.append(_subscription("landed"), "User:x", 2, read_version=0) == 1
    assert _names(table) == ["base", "landed"]


def test_F6_a_commit_that_failed_before_landing_is_retried_and_in_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "log"
    config_log = ConfigLog(str(table), replica_id="a", backoff_ms=0)
    faults = _Faults(monkeypatch, before=2)
    assert config_log.append(_subscription("created"), "User:x", 1, read_version=-1) == 0
    assert faults.before == 0
    assert _names(table) == ["created"]


def test_F6_a_change_reported_failed_is_not_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "log"
    config_log = ConfigLog(str(table), replica_id="a", attempts=3, backoff_ms=0)
    config_log.append(_subscription("base"), "User:x", 1)
    _Faults(monkeypatch, before=3)
    with pytest.raises(ConfigLogError, match="could not be written") as failed:
        config_log.append(_subscription("lost"), "User:x", 2, read_version=0)
    assert not failed.value.in_doubt
    assert _names(table) == ["base"]


def test_F6_when_the_log_cannot_be_read_after_a_failed_commit_the_error_says_the_outcome_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "log"
    config_log = ConfigLog(str(table), replica_id="a", backoff_ms=0)
    config_log.append(_subscription("base"), "User:x", 1)

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError(5, "Input/output error (reading)")

    def commit_then_fail_with_the_storage(*args: Any, **kwargs: Any) -> None:
        write_deltalake(*args, **kwargs)
        monkeypatch.setattr(appender_module, "DeltaTable", unreadable)  # the storage goes away
        raise OSError(5, "Input/output error (after the commit)")

    monkeypatch.setattr(config_log_module, "write_deltalake", commit_then_fail_with_the_storage)
    with pytest.raises(ConfigLogError, match="unknown") as unknown:
        config_log.append(_subscription("maybe"), "User:x", 2, read_version=0)
    assert unknown.value.in_doubt
    monkeypatch.setattr(appender_module, "DeltaTable", DeltaTable)
    assert _names(table) == ["base", "maybe"]  # it had landed: the answer did not say it had not


async def test_F16_a_conflict_brings_the_image_up_to_the_log_before_it_is_raised(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = replica(tmp_path / "log", "a", clock), replica(tmp_path / "log", "b", clock)
    await a.write(_subscription("from-a"), "User:x", 1, read_version=a.image.version)
    with pytest.raises(ConfigConflictError):
        await b.write(_subscription("from-b"), "User:x", 2, read_version=b.image.version)
    assert b.image.store.get("from-a") is not None
    assert await b.write(_subscription("from-b"), "User:x", 3, read_version=b.image.version) == 1


def test_config_log_errors_are_api_errors_carrying_the_code_the_admin_answers() -> None:
    from subscriptions.errors import ApiError, Errors  # noqa: PLC0415 - only this test needs them

    unacknowledged = config_log_module.ConfigLogError("not acknowledged", in_doubt=True)
    conflict = config_log_module.ConfigConflictError(3, 4)
    assert isinstance(unacknowledged, ApiError)
    assert isinstance(conflict, config_log_module.ConfigLogError)
    assert (unacknowledged.error, conflict.error) == (Errors.UNKNOWN_SERVER_ERROR, Errors.NOT_CONTROLLER)


async def test_KF3_D8_an_admin_write_is_not_charged_the_config_logs_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker forwards an admin write to its controller and charges the request quota only its own
    handling; here the config log's commit is the controller's part, so the writer's meter pauses."""
    clock_ns = [0]
    follower = replica(tmp_path / "log", "a", FakeClock())
    append = follower.log.append

    def slow_commit(*args: Any, **kwargs: Any) -> int:
        clock_ns[0] += 500_000_000  # a slow commit: half a second
        return append(*args, **kwargs)

    monkeypatch.setattr(follower.log, "append", slow_commit)
    with metering(lambda: clock_ns[0]) as meter:
        clock_ns[0] += 1_000  # the request's own handling, before and after
        await follower.write([SubscriptionChange("s", {"metrics": ["org.apache.kafka."]})], "User:admin", 0)
        clock_ns[0] += 1_000
    assert meter.total_ns() == 2_000
    assert follower.image.version == 0  # and the change was written and applied
