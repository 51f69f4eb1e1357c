"""``ingest.security.attribution``: the client of each ResourceMetrics, from every known forwarder's
labels."""

from __future__ import annotations

import pickle
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, MetricsData

from ingest.limits import DEFAULT_LIMITS
from ingest.security.attribution import NO_LABELS, Labels, TooManyClientsError, labels_of, split_by_client
from subscriptions.subscription_id import kafka_uuid_string
from tests.support import attacks
from tests.support.forwarders import (
    FORWARDERS,
    Client,
    collector_batch,
    librdkafka_metrics,
    points_of,
    strimzi_via_collector,
)

ALICE = Client(uuid.UUID("69577f7f-3be2-4464-a012-e016358e6630"), "payments-api", "alice")
BOB = Client(uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100"), "billing", "bob", address="10.9.8.7")


def _data_points(metric: Metric) -> Any:
    kind = metric.WhichOneof("data")
    assert kind is not None
    return getattr(metric, kind).data_points


def _split(data: MetricsData) -> list[tuple[Labels, MetricsData, int]]:
    out = []
    for group in split_by_client(data, data.SerializeToString()):
        parsed = MetricsData()
        parsed.ParseFromString(group.payload)
        out.append((group.labels, parsed, group.points))
    return out


@pytest.mark.parametrize(
    ("forwarder", "expected"),
    [
        (
            "confluent_tutorial",
            Labels(
                kafka_uuid_string(ALICE.instance_id),
                "payments-api",  # the later of two client_id labels
                "alice",
                "librdkafka",
                "2.16.0",
                "10.1.2.3",
                "40000",
                "1",
            ),
        ),
        (
            "monedula",
            Labels(
                kafka_uuid_string(ALICE.instance_id),
                "payments-api",
                "User:alice",
                None,
                None,
                "10.1.2.3",
                None,
                "2",
            ),
        ),
        ("instaclustr", Labels(None, "payments-api", None, "librdkafka", "2.16.0")),
        (
            "dotted",
            Labels(kafka_uuid_string(ALICE.instance_id), "payments-api", None, None, None, "10.1.2.3"),
        ),
    ],
)
def test_each_forwarders_resource_labels_name_the_client(forwarder: str, expected: Labels) -> None:
    labelled = FORWARDERS[forwarder](ALICE, librdkafka_metrics())
    assert labels_of(labelled.resource_metrics[0].resource.attributes) == expected


def test_a_resource_without_labels_says_nothing() -> None:
    assert labels_of(librdkafka_metrics().resource_metrics[0].resource.attributes) == NO_LABELS


def test_snake_case_names_win_over_aliases_whatever_their_order() -> None:
    labelled = FORWARDERS["instaclustr"](ALICE, librdkafka_metrics())
    labelled.resource_metrics[0].resource.attributes.add(key="client_id").value.string_value = "snake"
    assert labels_of(labelled.resource_metrics[0].resource.attributes).client_id == "snake"


def test_a_collector_batch_splits_into_one_group_per_client_with_all_its_resources() -> None:
    metrics = librdkafka_metrics()
    exports = [FORWARDERS["confluent_tutorial"](c, metrics) for c in (ALICE, BOB, ALICE)]
    batch = MetricsData()
    batch.ParseFromString(collector_batch(exports))
    groups = _split(batch)
    assert [labels.client_id for labels, _, _ in groups] == ["payments-api", "billing"]
    alice, bob = groups
    assert len(alice[1].resource_metrics) == 2  # both of Alice's resources, in one group
    assert (alice[2], bob[2]) == (
        2 * points_of(metrics.resource_metrics),
        points_of(metrics.resource_metrics),
    )


def test_one_client_keeps_its_payload_as_sent() -> None:
    data = FORWARDERS["monedula"](ALICE, librdkafka_metrics())
    payload = data.SerializeToString()
    (group,) = split_by_client(data, payload)
    assert group.payload is payload


def test_strimzi_point_labels_split_one_resource_into_its_clients() -> None:
    metrics = librdkafka_metrics()
    groups = _split(strimzi_via_collector([ALICE, BOB], metrics))
    assert [(labels.client_instance_id, labels.client_id, labels.principal) for labels, _, _ in groups] == [
        (kafka_uuid_string(ALICE.instance_id), "payments-api", "User:alice"),
        (kafka_uuid_string(BOB.instance_id), "billing", "User:bob"),
    ]
    for labels, data, points in groups:
        assert points == points_of(metrics.resource_metrics) == points_of(data.resource_metrics)
        (resource_metrics,) = data.resource_metrics
        assert resource_metrics.resource.attributes[0].value.string_value == "kafka-broker-0"
        names = [m.name for s in resource_metrics.scope_metrics for m in s.metrics]
        assert names == [m.name for s in metrics.resource_metrics[0].scope_metrics for m in s.metrics]
        ids = {
            a.value.string_value
            for s in resource_metrics.scope_metrics
            for m in s.metrics
            for p in _data_points(m)
            for a in p.attributes
            if a.key == "client_instance_id"
        }
        assert ids == {labels.client_instance_id}


@given(st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=12))
def test_splitting_keeps_every_data_point_exactly_once(owners: list[int]) -> None:
    """Points of three clients, interleaved in one resource at random: each lands once, with its client."""
    clients = [ALICE, BOB, Client(uuid.UUID(int=7), "third", "carol")]
    data = strimzi_via_collector(clients[:1], librdkafka_metrics())
    metric = data.resource_metrics[0].scope_metrics[0].metrics[0]
    points = _data_points(metric)
    template = points[0]
    del points[:]
    for n, owner in enumerate(owners):
        point = points.add()
        point.CopyFrom(template)
        point.time_unix_nano = n
        for attribute in point.attributes:
            if attribute.key == "client_instance_id":
                attribute.value.string_value = kafka_uuid_string(clients[owner].instance_id)
    seen: Counter[tuple[str | None, int]] = Counter()
    for labels, part, _ in _split(data):
        for scope in part.resource_metrics[0].scope_metrics:
            for m in scope.metrics:
                if m.name == metric.name:
                    seen.update((labels.client_instance_id, p.time_unix_nano) for p in _data_points(m))
    expected = Counter((kafka_uuid_string(clients[owner].instance_id), n) for n, owner in enumerate(owners))
    assert seen == expected


# -- clients per export (T3-7) ---------------------------------------------------------------------


def _fan_out(clients: int, seed: int = 0xFA2) -> MetricsData:
    return MetricsData.FromString(attacks.fan_out_points(clients, seed))


def _resources(clients: int, seed: int) -> MetricsData:
    """One resource per client, each naming its instance in a resource label."""
    data = MetricsData()
    for instance_id in attacks.fan_out_ids(clients, seed):
        attribute = data.resource_metrics.add().resource.attributes.add(key="client_instance_id")
        attribute.value.string_value = str(instance_id)
    return data


@pytest.mark.parametrize(
    ("point_clients", "resource_clients", "max_clients", "split"),
    [
        (3, 0, 3, True),  # at the limit, by point labels
        (4, 0, 3, False),
        (0, 3, 3, True),  # at the limit, by resource labels
        (0, 4, 3, False),
        (2, 1, 3, True),  # both kinds count together
        (2, 2, 3, False),
        (1, 0, 1, True),  # one client: the payload as sent
        (2, 0, 1, False),
    ],
)
def test_T3_7_an_export_naming_more_clients_than_the_limit_is_refused_as_it_is_split(
    point_clients: int, resource_clients: int, max_clients: int, split: bool
) -> None:
    data = _fan_out(point_clients) if point_clients else MetricsData()
    data.resource_metrics.extend(_resources(resource_clients, 0xB0B).resource_metrics)
    if split:
        groups = split_by_client(data, data.SerializeToString(), max_clients)
        assert len(groups) == point_clients + resource_clients
    else:
        with pytest.raises(TooManyClientsError) as refused:
            split_by_client(data, data.SerializeToString(), max_clients)
        assert refused.value.seen == max_clients + 1
        assert str(refused.value) == f"more than {max_clients} clients in one export"


def test_T3_7_counting_stops_at_the_first_client_over_the_limit() -> None:
    """100,000 point-labelled clients: refused at client 1,001, before any part is built (the
    default limit; ``max_clients_per_export``)."""
    data = _fan_out(100_000)
    with pytest.raises(TooManyClientsError) as refused:
        split_by_client(data, b"")
    assert refused.value.max_clients == DEFAULT_LIMITS.max_clients_per_export
    assert refused.value.seen == DEFAULT_LIMITS.max_clients_per_export + 1


def test_T3_7_a_client_named_again_is_counted_once() -> None:
    """The same clients in two resources, and point labels that name one client once merged with
    the resource's (the resource's client id wins): counted by the client they name."""
    data = _fan_out(3, seed=1)
    data.resource_metrics.extend(_fan_out(3, seed=1).resource_metrics)
    groups = split_by_client(data, data.SerializeToString(), 3)
    assert [len(MetricsData.FromString(g.payload).resource_metrics) for g in groups] == [2, 2, 2]
    same = strimzi_via_collector([ALICE, ALICE._replace(client_id="other")], librdkafka_metrics())
    same.resource_metrics[0].resource.attributes.add(key="client_id").value.string_value = "fixed"
    (group,) = split_by_client(same, same.SerializeToString(), 1)
    assert (group.labels.client_id, group.points) == (
        "fixed",
        2 * points_of(librdkafka_metrics().resource_metrics),
    )


def test_T3_7_the_error_pickles_as_the_decoder_processes_need() -> None:
    back = pickle.loads(pickle.dumps(TooManyClientsError(5, 6)))
    assert (back.max_clients, back.seen, str(back)) == (5, 6, "more than 5 clients in one export")
