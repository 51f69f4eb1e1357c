"""Property tests: subscription ids, gating and the cache over generated inputs."""

from __future__ import annotations

from itertools import pairwise
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from subscriptions import (
    AcceptedPush,
    ClientContext,
    ClientInstanceCache,
    ClientMetricsConfig,
    ClientMetricsManager,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    SubscriptionStore,
    compute_subscription_id,
    resolve,
)
from subscriptions.instance import ClientInstance
from subscriptions.resolution import resolve_matched
from subscriptions.subscription_id import hashset_order
from tests.support.clock import T0

metric = st.text(
    alphabet=st.characters(blacklist_characters=",", blacklist_categories=("Cs", "Cc", "Zs")),
    min_size=1,
    max_size=30,
)
metric_lists = st.lists(metric, max_size=20)
intervals = st.integers(min_value=100, max_value=3_600_000)
uuids = st.uuids().filter(lambda u: u.int > 1)


@given(metric_lists, intervals, uuids)
def test_TEL_9_id_is_a_pure_function_of_its_inputs(
    metrics: list[str], interval: int, instance_id: UUID
) -> None:
    first = compute_subscription_id(metrics, interval, instance_id)
    assert first == compute_subscription_id(list(metrics), interval, UUID(str(instance_id)))
    assert -(2**31) <= first < 2**31


@given(metric_lists, metric_lists, intervals, intervals, uuids)
def test_TEL_9_id_changes_when_the_effective_subscription_changes(
    a: list[str], b: list[str], ia: int, ib: int, instance_id: UUID
) -> None:
    """Equal ids iff the client is told the same metrics (in set order) and interval.

    (Up to CRC32C collisions, which random inputs do not hit.)
    """
    same_subscription = (hashset_order(a), ia) == (hashset_order(b), ib)
    same_id = compute_subscription_id(a, ia, instance_id) == compute_subscription_id(b, ib, instance_id)
    assert same_id is same_subscription


subscription_specs = st.dictionaries(
    st.text(alphabet="abcdefgh", min_size=1, max_size=4),
    st.tuples(metric_lists, intervals),
    min_size=1,
    max_size=6,
)


@given(subscription_specs, st.randoms(use_true_random=False))
def test_PD_3_id_does_not_depend_on_the_order_subscriptions_were_created(
    specs: dict[str, tuple[list[str], int]], rnd: object
) -> None:
    names = list(specs)
    shuffled = names[:]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    results = []
    for order in (names, shuffled):
        store = SubscriptionStore()
        for name in order:
            metrics, interval = specs[name]
            store.update(name, {"metrics": metrics, "interval.ms": interval})
        results.append(resolve(store.by_name(), {}))
    assert results[0] == results[1]


requests = st.lists(
    st.tuples(
        st.sampled_from(["get", "push", "push_terminating", "push_wrong_id"]),
        st.integers(min_value=0, max_value=40_000),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(requests, st.sampled_from([100, 1000, 30_000]))
def test_TEL_17_no_two_non_terminating_pushes_accepted_within_one_interval(
    steps: list[tuple[str, int]], interval: int
) -> None:
    store = SubscriptionStore()
    store.update("s", {"metrics": "a.", "interval.ms": interval})
    manager = ClientMetricsManager(store)
    instance_id = UUID(int=12345)
    context = ClientContext()
    now = T0
    subscription_id = 0
    accepted: list[int] = []
    for kind, gap in steps:
        now += gap
        if kind == "get":
            response = manager.process_get(GetTelemetrySubscriptionsRequest(instance_id), context, now)
            if response.error_code == Errors.NONE:
                subscription_id = response.subscription_id
            continue
        wrong = kind == "push_wrong_id"
        request = PushTelemetryRequest(
            instance_id, subscription_id + 1 if wrong else subscription_id,
            kind == "push_terminating", 0, b"x",
        )  # fmt: skip
        outcome = manager.process_push(request, context, now)
        if isinstance(outcome, AcceptedPush) and not request.terminating:
            accepted.append(now)
    assert all(b - a >= interval for a, b in pairwise(accepted))


@given(st.integers(min_value=1, max_value=20), st.lists(st.integers(0, 60), max_size=200))
def test_TEL_12_cache_never_exceeds_capacity(capacity: int, ids: list[int]) -> None:
    cache = ClientInstanceCache(capacity)
    resolution = resolve_matched(())
    for n in ids:
        instance_id = UUID(int=n + 2)
        if cache.lookup(instance_id, T0) is None:
            cache.put(ClientInstance(instance_id, ClientContext(), resolution, 0, 60000), T0)
        assert len(cache) <= capacity
    assert len(cache) == min(capacity, len(set(ids)))


@given(st.integers(min_value=1, max_value=20), st.lists(st.integers(0, 60), max_size=100))
def test_TEL_12_manager_cache_never_exceeds_capacity(capacity: int, ids: list[int]) -> None:
    manager = ClientMetricsManager(SubscriptionStore(), ClientMetricsConfig(cache_max_size=capacity))
    for n in ids:
        manager.process_get(GetTelemetrySubscriptionsRequest(UUID(int=n + 2)), ClientContext(), T0)
        assert manager.instance_count <= capacity
