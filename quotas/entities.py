"""Quota types, client quota entities and the per-entity quota keys (docs/rules.md QUO-2..QUO-4, PD-11).

An entity has an optional user part and an optional client-id part; either part may be the default
entity, named ``<default>`` as in Kafka's built-in code (PD-11). User names are kept sanitized
(URL-encoded, QUO-4), the form quota sensors are tagged with.

Also the entity vocabulary every front door shares (the YAML config, the admin API's JSON, the Kafka
AlterClientQuotas / DescribeClientQuotas RPCs, the admin CLI): Kafka's entity types (``user``,
``client-id``, ``ip``) and the ``ClientQuotaEntity`` field each names, and DescribeClientQuotas filter
components with their match types.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Final, Literal, NamedTuple

from quotas.errors import INVALID_REQUEST, QuotaError
from quotas.java import INT_MAX, LONG_MAX, sanitize

__all__ = [
    "CLIENT",
    "CLIENT_ID_TAG",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "CUSTOM",
    "DEFAULT",
    "ENTITY_FIELDS",
    "IP_TAG",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "USER_CLIENT",
    "USER_TAG",
    "ClientQuotaEntity",
    "ClusterMetadata",
    "EntityComponent",
    "EntityType",
    "QuotaEntityError",
    "QuotaType",
    "entity_parts",
    "principal_user",
    "validate_quota",
]

DEFAULT: Final = "<default>"
USER_TAG: Final = "user"
CLIENT_ID_TAG: Final = "client-id"
IP_TAG: Final = "ip"
EntityType = Literal["user", "client-id", "ip"]
"""Kafka's quota entity types (``ClientQuotaEntity.USER``, ``CLIENT_ID``, ``IP``)."""
ENTITY_FIELDS: Final[Mapping[str, str]] = {USER_TAG: "user", CLIENT_ID_TAG: "client_id", IP_TAG: "ip"}
"""Kafka's quota entity types and the ``ClientQuotaEntity`` field each names."""

# DescribeClientQuotas filter match types (Kafka's ``ClientQuotaFilterComponent``)
MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_SPECIFIED: Final = 2

# The "quotas enabled" bits (QUO-3)
CLIENT: Final = 1
USER: Final = 2
USER_CLIENT: Final = 4
CUSTOM: Final = 8

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"


class QuotaType(Enum):
    """The managers' quota types; the value is Kafka's sensor-name prefix."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    REQUEST = "Request"
    CONTROLLER_MUTATION = "ControllerMutation"

    @property
    def config_key(self) -> str:
        return _KEY_BY_TYPE[self]


_KEY_BY_TYPE: Final = {
    QuotaType.PRODUCE: PRODUCER_BYTE_RATE,
    QuotaType.FETCH: CONSUMER_BYTE_RATE,
    QuotaType.REQUEST: REQUEST_PERCENTAGE,
    QuotaType.CONTROLLER_MUTATION: CONTROLLER_MUTATION_RATE,
}
_TYPE_BY_KEY: Final = {key: qt for qt, key in _KEY_BY_TYPE.items()}
_INTEGRAL_KEYS: Final = {
    PRODUCER_BYTE_RATE: LONG_MAX,
    CONSUMER_BYTE_RATE: LONG_MAX,
    CONNECTION_CREATION_RATE: INT_MAX,
}


@lru_cache(maxsize=8192)  # asked on every request, of few principals
def principal_user(principal: str) -> str:
    """The sanitized user name of a principal such as ``User:alice`` (QUO-4)."""
    _, sep, name = principal.partition(":")
    return sanitize(name if sep else principal)


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """``<user>``, ``<client>``, ``<user, client>`` with ``DEFAULT`` for default parts; or an IP."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None

    @property
    def mask_bit(self) -> int:
        """The QUO-3 bit an update of this entity enables (0 for IP entities)."""
        if self.user is not None and self.client_id is not None:
            return USER_CLIENT
        if self.user is not None:
            return USER
        return CLIENT if self.client_id is not None else 0

    @classmethod
    def from_parts(cls, parts: Mapping[str, str | None]) -> ClientQuotaEntity:
        """The entity of Kafka's (entity type -> name) parts, ``None`` naming the default entity.

        Raises QuotaEntityError for an entity type Kafka does not know."""
        unknown = sorted(k for k in parts if k not in ENTITY_FIELDS)
        if unknown:
            raise QuotaEntityError(f"Unhandled client quota entity type: {', '.join(unknown)}")
        return cls(**{ENTITY_FIELDS[k]: DEFAULT if v is None else v for k, v in parts.items()})

    def __str__(self) -> str:
        parts = [
            f"user={self.user}" if self.user is not None else "",
            f"client-id={self.client_id}" if self.client_id is not None else "",
            f"ip={self.ip}" if self.ip is not None else "",
        ]
        return "<" + ", ".join(p for p in parts if p) + ">"


def entity_parts(entity: ClientQuotaEntity) -> dict[str, str]:
    """The entity as Kafka lists it: entity type -> name (``<default>`` for a default part)."""
    return {t: getattr(entity, f) for t, f in ENTITY_FIELDS.items() if getattr(entity, f) is not None}


class EntityComponent(NamedTuple):
    """One component of a DescribeClientQuotas filter: ``match_type`` ``MATCH_EXACT`` (``match``: the
    name), ``MATCH_DEFAULT`` the default entity, ``MATCH_SPECIFIED`` any entity of the type."""

    entity_type: EntityType
    match_type: int
    match: str | None = None


class ClusterMetadata(NamedTuple):
    """What a quota callback learns about the cluster: here, the sink replicas serving it."""

    cluster_id: str
    nodes: tuple[str, ...]


class QuotaEntityError(QuotaError, ValueError):
    """An AlterClientQuotas entry Kafka would reject with INVALID_REQUEST (42)."""

    error_code = INVALID_REQUEST


def validate_quota(entity: ClientQuotaEntity, key: str, value: float | None) -> None:
    """Check one quota alteration as Kafka's controller does (QUO-2); raise QuotaEntityError.

    A ``None`` value removes the key; a removal of a key the entity cannot have removes nothing.
    """
    if entity.user is None and entity.client_id is None and entity.ip is None:
        raise QuotaEntityError("Invalid empty client quota entity")
    if entity.ip is not None:
        if entity.user is not None or entity.client_id is not None:
            raise QuotaEntityError(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
            )
        if entity.ip != DEFAULT:
            try:
                ipaddress.ip_address(entity.ip)
            except ValueError as exc:
                raise QuotaEntityError(f"{entity.ip} is not a valid IP or resolvable host.") from exc
    for part in (entity.user, entity.client_id, entity.ip):
        if part == "":
            raise QuotaEntityError("Invalid empty client quota entity name; use the default entity instead")
    if value is None:  # a removal: Kafka checks neither its key nor its value (KF3-Q4)
        return
    if key not in ((CONNECTION_CREATION_RATE,) if entity.ip is not None else _TYPE_BY_KEY):
        raise QuotaEntityError(f"Invalid configuration key {key}")
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise QuotaEntityError(f"Invalid value {value!r} for configuration key {key}")
    if value <= 0:
        raise QuotaEntityError(f"Quota {key} must be greater than 0")  # the broker's words
    limit = _INTEGRAL_KEYS.get(key)
    if limit is not None:  # the broker's words (ClientQuotaControlManager), in its order
        if value > limit:
            raise QuotaEntityError(
                f"Proposed value for {key} is too large for {'a LONG' if limit == LONG_MAX else 'an INT'}."
            )
        if abs(value % 1.0) > 1e-6:
            raise QuotaEntityError(f"{key} cannot be a fractional value.")
