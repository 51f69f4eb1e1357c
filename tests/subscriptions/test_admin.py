"""TEL-23: the admin surface of client-metrics resources, with cluster authorization."""

from __future__ import annotations

import pytest

from subscriptions import ClientMetricsAdmin, Errors, SubscriptionStore
from subscriptions.admin import ConfigOp, Operation, apply_config_ops
from subscriptions.errors import InvalidConfigError


class OnlyDescribe:
    def authorize(self, principal: str, operation: Operation) -> bool:
        return principal == "User:admin" or operation == "DESCRIBE_CONFIGS"


def test_TEL_23_alter_needs_alter_configs_on_the_cluster() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore(), OnlyDescribe())
    denied = admin.alter("User:alice", "s", {"metrics": "a"})
    assert denied.error == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert len(admin.store) == 0
    assert admin.alter("User:admin", "s", {"metrics": "a"}) == (Errors.NONE, None, 1, 0)


def test_TEL_23_describe_and_list_need_describe_configs() -> None:
    class Nobody:
        def authorize(self, principal: str, operation: Operation) -> bool:
            return False

    store = SubscriptionStore()
    store.update("s", {"metrics": "a"})
    admin = ClientMetricsAdmin(store, Nobody())
    assert admin.describe("User:x", "s").error == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert admin.list("User:x").error == Errors.CLUSTER_AUTHORIZATION_FAILED
    open_admin = ClientMetricsAdmin(store)
    assert open_admin.describe("User:x", "s").value == {"metrics": "a"}
    assert open_admin.describe("User:x", "missing").value == {}
    assert open_admin.list("User:x").value == ["s"]


def test_TEL_23_alter_answers_validation_errors_with_kafka_codes() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore())
    result = admin.alter("User:x", "s", {"interval.ms": "abc"})
    assert result.error == Errors.INVALID_CONFIG
    assert result.message == "Invalid value abc for configuration interval.ms: Not a number of type INT"
    assert admin.alter("User:x", "", {"metrics": "a"}).error == Errors.INVALID_REQUEST


def test_TEL_23_validate_only_changes_nothing() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore())
    assert admin.alter("User:x", "s", {"metrics": "a"}, validate_only=True).error == Errors.NONE
    assert admin.store.version == 0
    bad = admin.alter("User:x", "s", {"interval.ms": "1"}, validate_only=True)
    assert bad.error == Errors.INVALID_REQUEST


def test_TEL_23_TEL_2_validate_only_still_checks_the_name() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore())
    result = admin.alter("User:x", "", {}, validate_only=True)
    assert result == (Errors.INVALID_REQUEST, "Subscription name can't be empty", None, 0)


def test_TEL_9_lone_surrogate_metric_is_accepted_as_kafka_does() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore())
    assert admin.alter("User:x", "s", {"metrics": "a\ud800"}).error == Errors.NONE


def test_TEL_23_empty_alter_deletes() -> None:
    admin = ClientMetricsAdmin(SubscriptionStore())
    admin.alter("User:x", "s", {"metrics": "a"})
    assert admin.alter("User:x", "s", {}).value == 2
    assert admin.list("User:x").value == []


def test_incremental_alter_configs_operations_are_kafkas_KF3_C_7() -> None:
    current = {"metrics": "a.,b.", "interval.ms": "1000"}
    ops = [
        ("metrics", ConfigOp.SET, "b.,c."),
        ("match", ConfigOp.SET, "client_id=x"),
        ("interval.ms", ConfigOp.DELETE, None),
    ]
    assert apply_config_ops(current, ops) == {"metrics": "b.,c.", "match": "client_id=x"}
    assert current == {"metrics": "a.,b.", "interval.ms": "1000"}  # not changed in place
    for key, op in [("metrics", ConfigOp.APPEND), ("match", ConfigOp.SUBTRACT), ("nope", ConfigOp.APPEND)]:
        with pytest.raises(
            InvalidConfigError, match=rf"^Can't {op.name} to key {key} because its type is not LIST\.$"
        ):
            apply_config_ops(current, [(key, op, "1")])
