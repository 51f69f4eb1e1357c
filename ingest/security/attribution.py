"""Whose telemetry a forwarded OTLP export carries: the client identity of each ``ResourceMetrics``.

Kafka clients push KIP-714 telemetry to a broker; a broker plugin (or an OpenTelemetry Collector
behind it) forwards it as OTLP, naming the client in resource attributes ("labels"), often batching
many clients into one export request. This module reads those labels, per ``ResourceMetrics``, and
splits an export into one ``MetricsData`` per client (``split_by_client``). It is pure: it runs in
the decoder processes, and the pipeline combines each client's ``Labels`` with the request's
transport context (``docs/forwarders.md`` is the contract for forwarders).

Per field, the first name present wins: resource attributes in this order (KIP-714's names first,
then forwarders' aliases), then data-point attributes. A key given twice in one attribute list
resolves to its last value (forwarders append to what the client sent).

- client instance id: ``client_instance_id``, ``client.instance.id``, ``clientInstanceId``; points:
  ``client_instance_id``;
- client id: ``client_id``, ``clientId``, ``client.id``; points: ``client_id``;
- principal: ``principal``, ``kafka.client.principal``; points: ``principal``;
- software name and version: ``client_software_name``, ``clientSoftwareName``;
  ``client_software_version``, ``clientSoftwareVersion``;
- source address: ``client_source_address``, ``client.address``, ``kafka.client.address``,
  ``client_address``; points: ``client_address``; source port: ``client_source_port``;
- node id: ``node_id``, ``kafka.node.id``, ``kafka.broker.id``;
- the push was the client's last (KIP-714's terminating flag): ``kafka.push.terminating``, a boolean
  read only when true (so that the other pushes' labels stay those of their client's other
  ``ResourceMetrics``; the broker plugin puts it on a push's first one).

Data-point attributes (what Strimzi's Prometheus labels become after a Collector's prometheus
receiver) are read only for a ``ResourceMetrics`` whose resource names no client instance: its points
are then grouped by their own labels, and a ``ResourceMetrics`` whose points belong to several
clients is split into one per client (same resource, scopes and metric descriptions). String and
integer values are read (and booleans that are true); text is kept as sent (the pipeline checks it as
client text).

The clients are counted here, as the export is split (T3-7): one export may carry at most
``max_clients`` of them (distinct ``Labels`` once merged; each gives the pipeline at most one client
instance and one row). The decoder passes ``limits.max_clients_per_export``, which for a trusted
forwarder's export is ``limits.max_clients_per_forwarder_export`` (``RequestLimits.for_trusted_forwarder``).
``TooManyClientsError`` is raised at the first client over the limit, before the resource naming it is
split, so refusing an export of 100,000 point-labelled clients costs reading the labels of its points
up to that one; the decoder answers it as the structural limit it is
(``otlp_scan.StructureLimitError``: 413 / RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NamedTuple

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, MetricsData, ResourceMetrics, ScopeMetrics

from ingest.limits import DEFAULT_LIMITS

__all__ = [
    "NO_LABELS",
    "ClientGroup",
    "Labels",
    "TooManyClientsError",
    "labels_of",
    "point_count",
    "split_by_client",
]


class Labels(NamedTuple):
    """What attributes say about a client (raw text; None when they say nothing)."""

    client_instance_id: str | None = None
    client_id: str | None = None
    principal: str | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: str | None = None
    node_id: str | None = None
    service_name: str | None = None
    """``service.name`` and ``service.instance.id``: part of a derived instance id, no alias."""
    service_instance_id: str | None = None
    terminating: str | None = None
    """``"true"`` when a label says the push was the client's last, else None."""


NO_LABELS: Final = Labels()
RESOURCE_NAMES: Final[tuple[tuple[str, ...], ...]] = (
    ("client_instance_id", "client.instance.id", "clientInstanceId"),
    ("client_id", "clientId", "client.id"),
    ("principal", "kafka.client.principal"),
    ("client_software_name", "clientSoftwareName"),
    ("client_software_version", "clientSoftwareVersion"),
    ("client_source_address", "client.address", "kafka.client.address", "client_address"),
    ("client_source_port",),
    ("node_id", "kafka.node.id", "kafka.broker.id"),
    ("service.name",),
    ("service.instance.id",),
    ("kafka.push.terminating",),
)
"""Per ``Labels`` field, the resource attribute names read, in order."""
POINT_NAMES: Final[tuple[tuple[str, ...], ...]] = (
    ("client_instance_id",),
    ("client_id",),
    ("principal",),
    (),
    (),
    ("client_address",),
    (),
    (),
    (),
    (),
    (),
)
"""Per ``Labels`` field, the data-point attribute names read."""
_POINT_KEYS: Final = frozenset(name for names in POINT_NAMES for name in names)
_KINDS: Final = ("gauge", "sum", "histogram", "exponential_histogram", "summary")


class TooManyClientsError(Exception):
    """An export carries more than ``max_clients`` clients; ``seen`` were counted when it stopped."""

    def __init__(self, max_clients: int, seen: int) -> None:
        super().__init__(max_clients, seen)  # the arguments, so that it pickles (decoder processes)
        self.max_clients = max_clients
        self.seen = seen

    def __str__(self) -> str:
        return f"more than {self.max_clients} clients in one export"


class ClientGroup(NamedTuple):
    """One client's share of an export: its labels, its ``MetricsData`` bytes and its data points."""

    labels: Labels
    payload: bytes
    points: int


def labels_of(attributes: Iterable[KeyValue], names: Sequence[tuple[str, ...]] = RESOURCE_NAMES) -> Labels:
    """The labels that ``attributes`` give (the last value of a repeated key)."""
    values: dict[str, str] = {}
    for attribute in attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            values[attribute.key] = value.string_value
        elif kind == "int_value":
            values[attribute.key] = str(value.int_value)
        elif kind == "bool_value":
            if value.bool_value:
                values[attribute.key] = "true"
            else:
                values.pop(attribute.key, None)  # false reads as nothing said (the last value counts)
    if not values:
        return NO_LABELS
    return Labels(*(next((values[n] for n in field if n in values), None) for field in names))


def _merged(resource: Labels, points: Labels) -> Labels:
    """Each field from the resource, else from the points."""
    return Labels(*(r if r is not None else p for r, p in zip(resource, points, strict=True)))


def _point_labels(point: Any) -> Labels:
    attributes = point.attributes
    if not any(a.key in _POINT_KEYS for a in attributes):
        return NO_LABELS
    return labels_of(attributes, POINT_NAMES)


def _empty_like(metric: Metric, kind: str) -> Metric:
    """``metric`` without its points (its name, description, unit, metadata and aggregation)."""
    copy = Metric(name=metric.name, description=metric.description, unit=metric.unit)
    copy.metadata.extend(metric.metadata)
    data = getattr(copy, kind)
    data.SetInParent()
    source = getattr(metric, kind)
    for field in ("aggregation_temporality", "is_monotonic"):
        if hasattr(source, field):
            setattr(data, field, getattr(source, field))
    return copy


def _points(resource_metrics: ResourceMetrics) -> Iterator[Any]:
    for scope in resource_metrics.scope_metrics:
        for metric in scope.metrics:
            kind = metric.WhichOneof("data")
            if kind is not None:
                yield from getattr(metric, kind).data_points


def _by_point_labels(
    resource_metrics: ResourceMetrics, resource: Labels, known: Container[Labels], room: int, max_clients: int
) -> list[tuple[Labels, ResourceMetrics]]:
    """``resource_metrics`` (whose resource says ``resource``) split by the clients its points name
    (itself when they all name the same); ``TooManyClientsError`` as soon as it names more than
    ``room`` clients not ``known`` already."""
    clients: dict[Labels, Labels] = {}  # point labels -> the client they name, with the resource's
    new: set[Labels] = set()
    for point in _points(resource_metrics):
        labels = _point_labels(point)
        if labels not in clients:
            client = clients[labels] = _merged(resource, labels)
            if client not in known and client not in new:
                new.add(client)
                if len(new) > room:
                    raise TooManyClientsError(max_clients, max_clients - room + len(new))
    named = set(clients.values())
    if len(named) <= 1:
        return [(next(iter(named), resource), resource_metrics)]
    return _split(resource_metrics, clients)


def _split(
    resource_metrics: ResourceMetrics, clients: Mapping[Labels, Labels]
) -> list[tuple[Labels, ResourceMetrics]]:
    """One ``ResourceMetrics`` per client its points name (``clients``: by their point labels), each
    point moved once (a metric with no points carries no telemetry and is left out)."""
    parts: dict[Labels, ResourceMetrics] = {}
    scopes: dict[tuple[Labels, int], ScopeMetrics] = {}

    def scope_for(labels: Labels, index: int, scope: ScopeMetrics) -> ScopeMetrics:
        key = (labels, index)
        target = scopes.get(key)
        if target is None:
            part = parts.get(labels)
            if part is None:
                part = parts[labels] = ResourceMetrics(schema_url=resource_metrics.schema_url)
                part.resource.CopyFrom(resource_metrics.resource)
            target = scopes[key] = part.scope_metrics.add(schema_url=scope.schema_url)
            target.scope.CopyFrom(scope.scope)
        return target

    for index, scope in enumerate(resource_metrics.scope_metrics):
        for metric in scope.metrics:
            kind = metric.WhichOneof("data")
            if kind is None:
                continue
            by_labels: dict[Labels, list[Any]] = {}
            for point in getattr(metric, kind).data_points:
                by_labels.setdefault(clients[_point_labels(point)], []).append(point)
            for labels, points in by_labels.items():
                copy = scope_for(labels, index, scope).metrics.add()
                copy.CopyFrom(_empty_like(metric, kind))
                getattr(copy, kind).data_points.extend(points)
    return list(parts.items())


def point_count(resource_metrics: ResourceMetrics) -> int:
    """The data points ``resource_metrics`` holds."""
    return sum(
        len(getattr(metric, kind).data_points)
        for scope in resource_metrics.scope_metrics
        for metric in scope.metrics
        if (kind := metric.WhichOneof("data")) is not None
    )


def split_by_client(
    data: MetricsData, payload: bytes, max_clients: int = DEFAULT_LIMITS.max_clients_per_export
) -> list[ClientGroup]:
    """``data`` (whose serialized form is ``payload``) as one ``ClientGroup`` per client, in the
    order clients first appear; a single client keeps ``payload`` as it is. ``TooManyClientsError``
    once it names more than ``max_clients`` clients."""
    groups: dict[Labels, list[ResourceMetrics]] = {}
    for resource_metrics in data.resource_metrics:
        resource = labels_of(resource_metrics.resource.attributes)
        if resource.client_instance_id is not None:
            parts = [(resource, resource_metrics)]
        else:
            room = max_clients - len(groups)
            parts = _by_point_labels(resource_metrics, resource, groups, room, max_clients)
        for labels, part in parts:
            groups.setdefault(labels, []).append(part)
        if len(groups) > max_clients:
            raise TooManyClientsError(max_clients, len(groups))
    if len(groups) <= 1:
        labels = next(iter(groups), NO_LABELS)
        return [ClientGroup(labels, payload, sum(point_count(r) for r in data.resource_metrics))]
    return [
        ClientGroup(
            labels,
            MetricsData(resource_metrics=parts).SerializeToString(),
            sum(point_count(r) for r in parts),
        )
        for labels, parts in groups.items()
    ]
