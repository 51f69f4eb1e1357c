"""TEL-8, PD-2, PD-3: resolving a client's effective subscription."""

from __future__ import annotations

from subscriptions import SubscriptionStore, resolve


def _store(**subscriptions: dict[str, str]) -> SubscriptionStore:
    store = SubscriptionStore()
    for name, properties in subscriptions.items():
        store.update(name, properties)
    return store


def test_TEL_8_nothing_matches_gives_no_metrics_and_default_interval() -> None:
    store = _store(s={"metrics": "a", "interval.ms": "1000", "match": "client_id=x"})
    resolution = resolve(store.by_name(), {"client_id": "y"})
    assert resolution.requested_metrics == ()
    assert resolution.push_interval_ms == 300000
    assert resolution.matched == ()


def test_TEL_8_subscription_without_metrics_still_lowers_the_interval() -> None:
    store = _store(a={"metrics": "x."}, b={"interval.ms": "1000"})
    resolution = resolve(store.by_name(), {})
    assert resolution.requested_metrics == ("x.",)
    assert resolution.push_interval_ms == 1000


def test_TEL_8_star_collapses_the_set() -> None:
    store = _store(a={"metrics": "x.,y."}, b={"metrics": "*"})
    assert resolve(store.by_name(), {}).requested_metrics == ("*",)


def test_TEL_8_empty_string_metric_is_an_ordinary_prefix() -> None:
    store = _store(a={"metrics": "a,"})
    assert set(resolve(store.by_name(), {}).requested_metrics) == {"a", ""}


def test_TEL_8_duplicates_across_subscriptions_collapse() -> None:
    store = _store(a={"metrics": "x.,y."}, b={"metrics": "y.,x."})
    assert sorted(resolve(store.by_name(), {}).requested_metrics) == ["x.", "y."]


def test_PD_2_interval_above_300000_is_delivered() -> None:
    """Deliberate difference from Kafka's code, which caps the resolved interval at 300000."""
    store = _store(hourly={"metrics": "x.", "interval.ms": "3600000"})
    assert resolve(store.by_name(), {}).push_interval_ms == 3600000


def test_PD_2_minimum_over_matching_subscriptions_only() -> None:
    store = _store(
        a={"metrics": "x.", "interval.ms": "600000"},
        b={"metrics": "y.", "interval.ms": "100", "match": "client_id=other"},
    )
    assert resolve(store.by_name(), {"client_id": "me"}).push_interval_ms == 600000


def test_PD_3_subscriptions_are_visited_in_ascending_name_order() -> None:
    """Bucket ties ("Aa"/"BB") show the insertion order: subscription "a" before "b"."""
    forward = _store(a={"metrics": "Aa"}, b={"metrics": "BB"})
    backward = _store(b={"metrics": "BB"}, a={"metrics": "Aa"})
    assert resolve(forward.by_name(), {}).requested_metrics == ("Aa", "BB")
    assert resolve(backward.by_name(), {}) == resolve(forward.by_name(), {})
    swapped = _store(a={"metrics": "BB"}, b={"metrics": "Aa"})
    assert resolve(swapped.by_name(), {}).requested_metrics == ("BB", "Aa")
