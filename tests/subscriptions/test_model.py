"""TEL-1..TEL-3 (and PD-5): subscription keys, defaults, validation order and list parsing."""

from __future__ import annotations

import pytest

from subscriptions import Errors, InvalidConfigError, InvalidRequestError, Subscription, parse_list
from subscriptions.model import PropertyValue


def test_TEL_1_defaults_when_keys_are_absent() -> None:
    s = Subscription.from_properties("s", {"metrics": "a"})
    assert s.interval_ms == 300000
    assert s.match == ()
    empty = Subscription.from_properties("s", {"interval.ms": "1000"})
    assert empty.metrics == ()


@pytest.mark.parametrize(
    "interval", ["100", "3600000", 100, 3600000, " 5000 ", "+5000", "\uff11\uff10\uff10\uff10"]
)
def test_TEL_1_interval_bounds_are_inclusive(interval: PropertyValue) -> None:
    s = Subscription.from_properties("s", {"interval.ms": interval})
    assert 100 <= s.interval_ms <= 3600000


@pytest.mark.parametrize(
    ("name", "properties", "error", "message"),
    [
        ("", {"metrics": "a"}, Errors.INVALID_REQUEST, "Subscription name can't be empty"),
        (None, {"metrics": "a"}, Errors.INVALID_REQUEST, "Subscription name can't be empty"),
        (
            "s",
            {"metrics": "a", "foo": "bar", "interval.ms": "abc"},
            Errors.INVALID_REQUEST,
            "Unknown client metrics configuration: foo",
        ),
        (
            "s",
            {"interval.ms": "abc", "match": "client_id=["},
            Errors.INVALID_CONFIG,
            "Invalid value abc for configuration interval.ms: Not a number of type INT",
        ),
        (
            "s",
            {"interval.ms": "99", "match": "client_id=["},
            Errors.INVALID_REQUEST,
            "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (
            "s",
            {"interval.ms": "3600001"},
            Errors.INVALID_REQUEST,
            "Invalid value 3600001 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
        ),
        (
            "s",
            {"match": "client_id=["},
            Errors.INVALID_CONFIG,
            "Illegal client matching pattern: client_id=[",
        ),
    ],
)
def test_TEL_2_validation_order_codes_and_messages(
    name: str | None, properties: dict[str, PropertyValue], error: Errors, message: str
) -> None:
    with pytest.raises((InvalidRequestError, InvalidConfigError)) as info:
        Subscription.from_properties(name, properties)
    assert info.value.error == error
    assert info.value.message == message


@pytest.mark.parametrize("bad", ["5_000", "1e3", "0x10", "", "99999999999", True, 1.5])
def test_TEL_2_interval_that_does_not_parse_as_int32_is_invalid_config(bad: object) -> None:
    with pytest.raises(InvalidConfigError) as info:
        Subscription.from_properties("s", {"interval.ms": bad})  # type: ignore[dict-item]
    assert info.value.error == Errors.INVALID_CONFIG


def test_TEL_2_metric_strings_are_free_text() -> None:
    s = Subscription.from_properties("s", {"metrics": "anything goes here!, ünïcode"})
    assert s.metrics == ("anything goes here!", "ünïcode")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("a, b ,c", ["a", "b", "c"]),
        ("a,", ["a", ""]),
        ("", []),
        (" ", []),
        (",a", ["", "a"]),
        ("  a  ", ["a"]),
        ("a\t,\nb", ["a", "b"]),
    ],
)
def test_TEL_3_list_parsing(value: str, parsed: list[str]) -> None:
    assert parse_list(value) == parsed


def test_TEL_3_PD_5_empty_metrics_value_means_no_metrics() -> None:
    s = Subscription.from_properties("s", {"metrics": ""})
    assert s.metrics == ()
    assert not s.subscribes_all


def test_TEL_3_yaml_lists_and_ints_are_accepted_as_values() -> None:
    s = Subscription.from_properties(
        "s", {"metrics": ["a.", "b."], "interval.ms": 1000, "match": ["client_id=x"]}
    )
    assert s.metrics == ("a.", "b.")
    assert s.interval_ms == 1000
    assert [p.attribute for p in s.match] == ["client_id"]


def test_TEL_1_star_means_all_metrics() -> None:
    assert Subscription.from_properties("s", {"metrics": "a,*"}).subscribes_all
