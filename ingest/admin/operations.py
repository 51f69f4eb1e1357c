"""The admin operations, whatever the transport: subscriptions, client quotas, client instances, SCRAM
credentials (``scram``), dynamic broker configs (``broker_configs``) and the config log's history.

Every operation is authorized on the CLUSTER resource as Kafka does it: changes need ALTER_CONFIGS,
reads DESCRIBE_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED, 31, with the one denial every transport
answers: ``subscriptions.errors.ClusterAuthorizationError``, from ``SinkAdmin.denial``). The authorizer
grants both to the configured super users only (``security.super_users``, Kafka's ``super.users``), so
the admin API needs an admin credential: an mTLS certificate or bearer token whose principal is a
super user.

Changes are validated with Kafka's rules and codes (TEL-2..4 for subscriptions, QUO-2 for quotas), go
through the mutation quota (KIP-599, ``controller_mutation_rate``; one permit per subscription or
quota entity changed; strict by default: a change over the quota is refused with
THROTTLING_QUOTA_EXCEEDED and the time to wait, permissive: accepted and throttled), are written to the
config log (durable before the answer) and are then applied from it, like every other replica's
changes. ``validate_only`` checks without writing or recording.

A change is prepared from this replica's image at some config-log offset and committed only if the
log is still there (``ConfigLog.append``, F16). When another change got there first, a change that
depends on nothing before it (a PUT or DELETE of a whole subscription, AlterClientQuotas: absolute
values) is prepared again from the refreshed image and retried once; an IncrementalAlterConfigs
(PATCH), which keeps the properties it read, is never retried: it is refused with NOT_CONTROLLER (41,
retriable; HTTP 409), the message naming both offsets, so it cannot revert a change its author did not
see. As in KRaft, where a controller whose metadata-log append is fenced by another answers
NOT_CONTROLLER and the admin client retries. A change the log may or may not hold (the commit failed
and the log could not be read) is answered UNKNOWN_SERVER_ERROR saying so; retrying it is safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple
from uuid import UUID

from ingest.admin.broker_configs import BrokerConfigAdmin
from ingest.admin.config_log import (
    ConfigChange,
    ConfigConflictError,
    ConfigLogError,
    ConfigLogFollower,
    ConfigRecord,
    InvalidFilterError,
    QuotaChange,
    SubscriptionChange,
)
from ingest.admin.scram import ScramAdmin
from quotas import (
    ClientQuotaEntity,
    ControllerMutationQuota,
    QuotaEntityError,
    QuotaManagers,
    ThrottlingQuotaExceededError,
)
from quotas.entities import EntityComponent, validate_quota
from subscriptions import (
    AdminResult,
    ClientContext,
    ClientMetricsAdmin,
    ClientMetricsManager,
    Errors,
    kafka_uuid_string,
)
from subscriptions.admin import ConfigOp, Operation, apply_config_ops
from subscriptions.errors import ApiError, ClusterAuthorizationError, SubscriptionError
from subscriptions.gating import NEVER
from subscriptions.instance import ClientInstance
from subscriptions.model import PropertyValue

__all__ = [
    "AlterClientQuotasResult",
    "QuotaAlteration",
    "SinkAdmin",
    "SuperUserAuthorizer",
    "instance_summary",
]

CONFLICT_RETRIES: Final = 1
"""How often a change that depends on nothing before it is prepared again after a conflict."""


RESOURCE_OPERATIONS: Final[Mapping[str, Mapping[str, int]]] = {
    "CLUSTER": {
        "CREATE": 5,
        "ALTER": 7,
        "DESCRIBE": 8,
        "CLUSTER_ACTION": 9,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
        "IDEMPOTENT_WRITE": 12,
    },
    "TOPIC": {
        "READ": 3,
        "WRITE": 4,
        "CREATE": 5,
        "DELETE": 6,
        "ALTER": 7,
        "DESCRIBE": 8,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
    },
}
"""The operations Kafka defines on a resource type, by their ``AclOperation`` codes (Kafka's
``AclEntry.supportedOperations``)."""


class SuperUserAuthorizer:
    """Kafka's ``super.users``: the listed principals may do everything, nobody else anything."""

    def __init__(self, super_users: Sequence[str]) -> None:
        self.super_users = frozenset(super_users)

    def authorize(self, principal: str, operation: Operation) -> bool:
        return principal in self.super_users

    def authorized_operations(self, principal: str, resource_type: str) -> int:
        """What ``principal`` may do on a resource of ``resource_type`` (``CLUSTER``, ``TOPIC``), as
        Kafka's 32-bit field of ``AclOperation`` codes (``Utils.to32BitField``; Metadata and
        DescribeCluster, when asked): every operation for a super user, none for anybody else (no
        ACLs, as a broker with ``allow.everyone.if.no.acl.found`` false)."""
        if principal not in self.super_users:
            return 0
        return sum(1 << code for code in RESOURCE_OPERATIONS[resource_type].values())


class QuotaAlteration(NamedTuple):
    """One AlterClientQuotas entry: the entity and its (key, value) operations (None removes)."""

    entity: ClientQuotaEntity
    ops: Sequence[tuple[str, float | None]]


class AlterClientQuotasResult(NamedTuple):
    """Per entry: the entity and its error code and message; the throttle of the whole request."""

    entries: list[tuple[ClientQuotaEntity, Errors, str | None]]
    throttle_time_ms: int = 0


def instance_summary(instance: ClientInstance) -> dict[str, Any]:
    """What an operator wants to know about one client instance, JSON-ready."""
    context = instance.context
    resolution = instance.resolution
    return {
        "client_instance_id": kafka_uuid_string(instance.client_instance_id),
        "subscription_id": instance.subscription_id,
        "subscriptions": list(resolution.matched),
        "requested_metrics": list(resolution.requested_metrics),
        "push_interval_ms": resolution.push_interval_ms,
        "principal": context.principal,
        "client_id": context.client_id,
        "client_software_name": context.client_software_name,
        "client_software_version": context.client_software_version,
        "client_source_address": context.client_source_address,
        "client_source_port": context.client_source_port,
        "last_get_ms": None if instance.last_get_ms == NEVER else instance.last_get_ms,
        "last_push_ms": None if instance.last_push_ms == NEVER else instance.last_push_ms,
        "last_error": Errors(instance.last_error).name,
        "terminating": instance.terminating,
    }


class SinkAdmin:
    """The admin operations over one replica's engines and the shared config log."""

    def __init__(
        self,
        follower: ConfigLogFollower,
        manager: ClientMetricsManager,
        quotas: QuotaManagers,
        authorizer: SuperUserAuthorizer,
        now_ms: Callable[[], int],
        *,
        strict_mutation_quota: bool = True,
    ) -> None:
        self.follower = follower
        self.manager = manager
        self.quotas = quotas
        self.authorizer = authorizer
        self.now_ms = now_ms
        self.strict_mutation_quota = strict_mutation_quota
        self.subscriptions = ClientMetricsAdmin(follower.image.store, authorizer)
        self.scram = ScramAdmin(follower, self.authorized, now_ms)
        """SCRAM credentials (KIP-554), in the config log like the rest."""
        self.broker_configs = BrokerConfigAdmin(follower, self.authorized, now_ms)
        """The dynamic broker configs (connection quotas), in the config log like the rest."""

    def authorized(self, client: ClientContext, operation: Operation) -> bool:
        return self.denial(client, operation) is None

    def denial(self, client: ClientContext, operation: Operation) -> ClusterAuthorizationError | None:
        """Why ``client`` may not perform ``operation`` on the cluster; None when it may."""
        if self.authorizer.authorize(client.principal, operation):
            return None
        return ClusterAuthorizationError(operation)

    # -- subscriptions --------------------------------------------------------------------------

    async def alter_subscription(
        self,
        client: ClientContext,
        name: str,
        properties: Mapping[str, PropertyValue],
        *,
        validate_only: bool = False,
    ) -> AdminResult[int]:
        """Give ``name`` exactly ``properties`` (creating it; empty deletes it); value: the log offset.
        Depends on nothing before it: retried once on a conflict."""
        return await self._change_subscription(
            client, name, lambda _: dict(properties), validate_only, retries=CONFLICT_RETRIES
        )

    async def update_subscription(
        self,
        client: ClientContext,
        name: str,
        ops: Sequence[tuple[str, ConfigOp, PropertyValue | None]],
        *,
        validate_only: bool = False,
    ) -> AdminResult[int]:
        """IncrementalAlterConfigs: apply Kafka's operations (set, delete, append, subtract) to the
        properties as this replica's image has them, keep the rest (NOT_CONTROLLER if the log moved on
        meanwhile: never retried, it depends on what it read)."""
        return await self._change_subscription(
            client, name, lambda current: apply_config_ops(current, ops), validate_only, retries=0
        )

    async def _change_subscription(
        self,
        client: ClientContext,
        name: str,
        new_properties: Callable[[Mapping[str, PropertyValue]], dict[str, PropertyValue]],
        validate_only: bool,
        *,
        retries: int,
    ) -> AdminResult[int]:
        """Prepare ``name``'s new properties from the image (``new_properties`` of the current ones),
        check them, and log them conditionally on the image's offset."""
        now = self.now_ms()
        quota: ControllerMutationQuota | None = None
        while True:
            image = self.follower.image
            read_version = image.version  # with the read below: no await in between
            current = image.store.get(name)
            try:
                properties = new_properties(current.properties if current else {})
            except SubscriptionError as exc:  # an operation that cannot apply, answered once authorized
                denied = self.denial(client, "ALTER_CONFIGS")
                failure = exc if denied is None else denied
                return AdminResult(failure.error, str(failure))
            checked = self.subscriptions.alter(client.principal, name, properties, validate_only=True)
            unchanged = not properties and current is None  # deleting nothing
            if checked.error is not Errors.NONE or validate_only or unchanged:
                return checked._replace(value=read_version)
            if quota is None:  # one permit per request, whatever its attempts
                quota = self._mutation_quota(client)
                try:
                    quota.record(1, now)
                except ThrottlingQuotaExceededError as exc:
                    return AdminResult(Errors(exc.error_code), str(exc), None, exc.throttle_time_ms)
            try:
                version = await self.follower.write(
                    [SubscriptionChange(name, properties)], client.principal, now, read_version=read_version
                )
            except ConfigConflictError as exc:
                if retries == 0:
                    return AdminResult(exc.error, str(exc), exc.log_version)
                retries -= 1  # the image has caught up: prepare it again
                continue
            except ConfigLogError as exc:
                return AdminResult(exc.error, str(exc))
            return AdminResult(Errors.NONE, None, version, quota.throttle_time_ms(self.now_ms()))

    def describe_subscription(
        self, client: ClientContext, name: str
    ) -> AdminResult[dict[str, PropertyValue]]:
        return self.subscriptions.describe(client.principal, name)

    def list_subscriptions(self, client: ClientContext) -> AdminResult[dict[str, dict[str, PropertyValue]]]:
        """Every subscription with its properties (ListClientMetricsResources + describe)."""
        names = self.subscriptions.list(client.principal)
        if names.error is not Errors.NONE or names.value is None:
            return AdminResult(names.error, names.message)
        store = self.follower.image.store
        found = {name: dict(s.properties) for name in names.value if (s := store.get(name)) is not None}
        return AdminResult(Errors.NONE, None, found)

    # -- client quotas --------------------------------------------------------------------------

    async def alter_client_quotas(
        self, client: ClientContext, alterations: Sequence[QuotaAlteration], *, validate_only: bool = False
    ) -> AlterClientQuotasResult:
        """AlterClientQuotas: every entry is validated and answered on its own; the valid ones are
        logged together as one change."""
        if (denied := self.denial(client, "ALTER_CONFIGS")) is not None:
            return AlterClientQuotasResult([(a.entity, denied.error, str(denied)) for a in alterations])
        quota = self._mutation_quota(client)
        now = self.now_ms()
        entries: list[tuple[ClientQuotaEntity, Errors, str | None]] = []
        changes: list[ConfigChange] = []
        for alteration in alterations:
            try:
                entity_changes = _validated(alteration)
                if not validate_only:
                    quota.record(1, now)
            except (QuotaEntityError, ThrottlingQuotaExceededError) as exc:
                entries.append((alteration.entity, Errors(exc.error_code), str(exc)))
                continue
            entries.append((alteration.entity, Errors.NONE, None))
            changes += entity_changes
        if changes and not validate_only:
            failure = await self._write_quotas(changes, client.principal, now)
            if failure is not None:
                logged = {c.entity for c in changes if isinstance(c, QuotaChange)}
                entries = [
                    (e, *failure) if e in logged else (e, error, message) for e, error, message in entries
                ]
        return AlterClientQuotasResult(entries, quota.throttle_time_ms(self.now_ms()))

    async def _write_quotas(
        self, changes: Sequence[ConfigChange], principal: str, now: int
    ) -> tuple[Errors, str] | None:
        """Log quota changes (absolute values: retried after a conflict); the error, if any."""
        try:
            await self.follower.write_absolute(changes, principal, now, retries=CONFLICT_RETRIES)
        except ConfigLogError as exc:
            return exc.error, str(exc)
        return None

    def describe_client_quotas(
        self, client: ClientContext, components: Sequence[EntityComponent], *, strict: bool = False
    ) -> AdminResult[list[tuple[dict[str, str], dict[str, float]]]]:
        """DescribeClientQuotas: the configured quotas of the entities matching the filter."""
        if (denied := self.denial(client, "DESCRIBE_CONFIGS")) is not None:
            return _refused(denied)
        try:
            found = self.follower.image.describe_client_quotas(components, strict)
        except InvalidFilterError as exc:
            return AdminResult(Errors.INVALID_REQUEST, str(exc))
        return AdminResult(Errors.NONE, None, found)

    # -- client instances and history ----------------------------------------------------------

    def list_instances(self, client: ClientContext, limit: int) -> AdminResult[list[dict[str, Any]]]:
        if (denied := self.denial(client, "DESCRIBE_CONFIGS")) is not None:
            return _refused(denied)
        found: list[dict[str, Any]] = []
        for instance in self.manager.instances():
            if len(found) >= limit:
                break
            found.append(instance_summary(instance))
        return AdminResult(Errors.NONE, None, found)

    def describe_instance(self, client: ClientContext, instance_id: UUID) -> AdminResult[dict[str, Any]]:
        if (denied := self.denial(client, "DESCRIBE_CONFIGS")) is not None:
            return _refused(denied)
        instance = self.manager.instance(instance_id)
        return AdminResult(Errors.NONE, None, None if instance is None else instance_summary(instance))

    async def history(self, client: ClientContext, since: int) -> AdminResult[list[ConfigRecord]]:
        """The config log's changes after offset ``since``."""
        if (denied := self.denial(client, "DESCRIBE_CONFIGS")) is not None:
            return _refused(denied)
        return AdminResult(Errors.NONE, None, await self.follower.history(since))

    def _mutation_quota(self, client: ClientContext) -> ControllerMutationQuota:
        manager = self.quotas.controller_mutation
        client_id, now = client.client_id or "", self.now_ms()
        if self.strict_mutation_quota:
            return manager.new_strict_quota(client.principal, client_id, now)
        return manager.new_permissive_quota(client.principal, client_id, now)


def _refused(error: ApiError) -> AdminResult[Any]:
    """The answer to an operation refused with ``error``: its code and message."""
    return AdminResult(error.error, str(error))


def _validated(alteration: QuotaAlteration) -> list[ConfigChange]:
    """The changes of one entry, each checked as Kafka's controller checks it (QUO-2)."""
    keys = [key for key, _ in alteration.ops]
    if len(set(keys)) != len(keys):
        raise QuotaEntityError("Duplicate quota keys in the same entity")
    changes: list[ConfigChange] = []
    for key, value in alteration.ops:
        validate_quota(alteration.entity, key, value)
        changes.append(QuotaChange(alteration.entity, key, value))
    return changes
