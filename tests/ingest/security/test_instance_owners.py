"""``ingest.security.instance_owners``: an OTLP instance id belongs to one principal (F8), and no
principal's traffic can evict another principal's binding (T3-6)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.security.instance_owners import BINDING_IDLE_MS, InstanceOwners, binding_is_idle
from subscriptions import (
    ClientContext,
    ClientMetricsManager,
    GetTelemetrySubscriptionsRequest,
    SubscriptionStore,
)

VICTIM, MALLORY, CAROL = "User:victim", "User:mallory", "User:carol"
X = uuid.UUID("69577f7f-3be2-4464-a012-e016358e6630")


def _owners(per_principal: int = 4, in_all: int = 10, idle_ms: int = BINDING_IDLE_MS) -> InstanceOwners:
    return InstanceOwners(ClientMetricsManager(SubscriptionStore()), per_principal, in_all, idle_ms)


def _ids(count: int, seed: int) -> list[uuid.UUID]:
    return [uuid.UUID(int=seed << 64 | n + 1) for n in range(count)]


@pytest.mark.parametrize(
    ("last_used_ms", "now_ms", "idle"),
    [(0, BINDING_IDLE_MS - 1, False), (0, BINDING_IDLE_MS, True), (5, 5, False), (5, 4, False)],
)
def test_a_binding_is_idle_once_the_idle_time_has_passed_since_its_last_use(
    last_used_ms: int, now_ms: int, idle: bool
) -> None:
    assert binding_is_idle(last_used_ms, now_ms) is idle


def test_F8_an_id_belongs_to_the_principal_that_first_used_it() -> None:
    owners = _owners()
    assert owners.claim(X, VICTIM, 0)
    assert not owners.claim(X, MALLORY, 1)
    assert owners.claim(X, VICTIM, 2)
    assert (len(owners), owners.held_by(VICTIM), owners.held_by(MALLORY)) == (1, 1, 0)


def test_F8_an_instance_made_by_a_kip714_get_belongs_to_its_principal() -> None:
    manager = ClientMetricsManager(SubscriptionStore())
    context = ClientContext(principal=VICTIM, client_id="app")
    made = manager.process_get(GetTelemetrySubscriptionsRequest(uuid.UUID(int=0)), context, 0)
    owners = InstanceOwners(manager, 4, 10)
    assert not owners.claim(made.client_instance_id, MALLORY, 1)
    assert owners.claim(made.client_instance_id, VICTIM, 1)


def test_T3_6_a_principal_naming_ever_more_ids_forgets_only_its_own() -> None:
    """Mallory names 3 x her share of new ids: she keeps her last 4, the victim keeps X."""
    owners = _owners(per_principal=4, in_all=10)
    assert owners.claim(X, VICTIM, 0)
    mallorys = _ids(12, seed=7)
    assert all(owners.claim(i, MALLORY, n) for n, i in enumerate(mallorys, start=1))
    assert not owners.claim(X, MALLORY, 20)
    assert (owners.held_by(MALLORY), owners.held_by(VICTIM), owners.unbound) == (4, 1, 0)
    assert owners.claim(mallorys[0], CAROL, 21)  # forgotten by mallory: free again


def test_T3_6_a_full_table_of_ids_in_use_lets_a_new_id_through_unbound() -> None:
    """Three principals fill the table; a fourth's new id lands, but is not bound (nobody's is
    given up for it), until a binding has been idle long enough."""
    owners = _owners(per_principal=4, in_all=8, idle_ms=1000)
    for seed, who in ((1, VICTIM), (2, MALLORY)):
        assert all(owners.claim(i, who, 0) for i in _ids(4, seed))
    assert len(owners) == 8
    assert owners.claim(X, CAROL, 999)
    assert (owners.held_by(CAROL), owners.unbound, owners.held_by(VICTIM)) == (0, 1, 4)
    assert owners.claim(X, MALLORY, 999)  # unbound: anyone may, and so the table is to be sized
    assert owners.held_by(MALLORY) == 4  # her own least recently used gave way
    assert owners.claim(_ids(4, 1)[1], VICTIM, 999)  # in use again
    assert owners.claim(uuid.UUID(int=42), CAROL, 1000)  # the victim's first is idle: it gives way
    assert (owners.held_by(CAROL), owners.held_by(VICTIM)) == (1, 3)
    assert owners.claim(uuid.UUID(int=43), CAROL, 1000)  # the next idle one: the victim's third
    assert (owners.held_by(CAROL), owners.held_by(VICTIM), owners.held_by(MALLORY)) == (2, 2, 4)
    assert owners.owner_of(_ids(4, 1)[1]) == VICTIM  # the one in use stays


def test_a_use_keeps_a_binding_from_being_the_one_that_gives_way() -> None:
    owners = _owners(per_principal=2, in_all=2, idle_ms=10)
    first, second = _ids(2, seed=1)
    assert owners.claim(first, VICTIM, 0)
    assert owners.claim(second, MALLORY, 5)
    assert owners.claim(first, VICTIM, 12)  # first used again: second is now the idle one
    assert owners.claim(X, CAROL, 15)
    assert (owners.held_by(VICTIM), owners.held_by(MALLORY), owners.held_by(CAROL)) == (1, 0, 1)


def test_room_for_at_least_one_id_is_needed() -> None:
    with pytest.raises(ValueError, match="at least one id"):
        _owners(per_principal=0)


_PRINCIPALS = (VICTIM, MALLORY, CAROL, "User:ANONYMOUS")


@given(
    st.lists(
        st.tuples(st.sampled_from(_PRINCIPALS), st.integers(0, 11), st.integers(0, 400)),
        max_size=120,
    )
)
def test_T3_6_no_claim_takes_a_binding_in_use_from_another_principal(
    claims: list[tuple[str, int, int]],
) -> None:
    """Claims by four principals over twelve ids, time moving on at each: a claim is refused exactly
    when another principal owns the id; a binding is lost to another principal's claim only once idle,
    and never passes to another owner; the bounds always hold."""
    idle_ms, now = 1000, 0
    owners = _owners(per_principal=3, in_all=6, idle_ms=idle_ms)
    ids = [uuid.UUID(int=n + 1) for n in range(12)]
    last_used: dict[int, int] = {}
    for principal, n, step in claims:
        now += step
        before = [owners.owner_of(i) for i in ids]
        allowed = owners.claim(ids[n], principal, now)
        assert allowed is (before[n] in (None, principal))
        after = [owners.owner_of(i) for i in ids]
        for k, (was, is_now) in enumerate(zip(before, after, strict=True)):
            if was is not None and is_now != was:
                assert is_now is None, (k, was, is_now)
                assert was == principal or binding_is_idle(last_used[k], now, idle_ms), (k, was, principal)
        if after[n] == principal:
            last_used[n] = now
        assert len(owners) == sum(o is not None for o in after) <= 6
        assert all(owners.held_by(p) <= 3 for p in _PRINCIPALS)
