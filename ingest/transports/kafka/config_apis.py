"""The Kafka admin APIs for configs, for ``CLIENT_METRICS`` resources (type 16: the subscriptions),
over the same admin operations as the HTTP API (``SinkAdmin``: authorization, validation, the config
log, every replica applying it), so that ``kafka-client-metrics.sh``, ``kafka-configs.sh`` and admin
clients manage subscriptions on the sink as on a broker:

- DescribeConfigs (32), v1-4: a resource's three keys (``metrics``, ``interval.ms``, ``match``), each
  with its value, source DYNAMIC_CLIENT_METRICS_CONFIG (7) when set, else DEFAULT_CONFIG (5) and the
  default, and (v3+) its type (LIST 7, INT 3); ``configuration_keys`` narrows them. Super users only
  (else CLUSTER_AUTHORIZATION_FAILED for the resource).
- IncrementalAlterConfigs (44), v0-1: Kafka's SET and DELETE (``subscriptions.admin.apply_config_ops``)
  on the properties as this replica has them; APPEND and SUBTRACT refused, INVALID_CONFIG, as a broker
  refuses them on a CLIENT_METRICS key (KF3-C-7).
- AlterConfigs (33), v0-2: the resource's whole configuration replaced (none left: deleted).
- ListConfigResources (74): v0 is ListClientMetricsResources (every subscription's name); v1 lists, as
  a broker, the types asked for (none: TOPIC, BROKER, BROKER_LOGGER, GROUP and CLIENT_METRICS): every
  subscription, and this node by its id as a BROKER and a BROKER_LOGGER (the sink has no topics or
  groups); any other type is UNSUPPORTED_VERSION (KF3-C-17).

BROKER resources (type 4; the name ``""`` for the cluster default or this node's id, one scope here)
describe and change the dynamic broker configs, the connection quotas (``ingest.admin.broker_configs``):
DescribeConfigs by id gives each key's value in force, DYNAMIC_BROKER_CONFIG (2) where the config log
set it, else STATIC_BROKER_CONFIG (4); the cluster default (``""``) only the keys the config log set,
DYNAMIC_DEFAULT_BROKER_CONFIG (3), as a broker describes it (KF3-C-15). A described resource without
an error carries the error message ``""``, as a broker's. IncrementalAlterConfigs SETs and DELETEs
keys, AlterConfigs replaces the dynamic set.

Another resource type is answered INVALID_REQUEST for its resource (the sink has no topics or groups).
A subscription change over the mutation quota is answered THROTTLING_QUOTA_EXCEEDED with its
throttle, as over HTTP. A request whose header ``ClientId`` is not valid text is answered
INVALID_REQUEST for every resource.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from kio.schema.errors import ErrorCode

from ingest.admin.operations import SinkAdmin
from ingest.security.identity import ClientTextError
from ingest.transports.kafka.protocol import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_CONFIG_RESOURCES,
    RequestHeader,
    build,
    nested,
    response_schema,
)
from subscriptions import AdminResult, ClientContext, Errors
from subscriptions.admin import ConfigOp
from subscriptions.model import (
    CONFIG_KEYS,
    DEFAULT_INTERVAL_MS,
    INTERVAL_MS_CONFIG,
    MATCH_CONFIG,
    METRICS_CONFIG,
    PropertyValue,
)

__all__ = ["BROKER", "CLIENT_METRICS", "ConfigApis"]

CLIENT_METRICS: Final = 16
"""Kafka's ``ConfigResource.Type.CLIENT_METRICS``."""
BROKER: Final = 4
_TOPIC, _BROKER_LOGGER, _GROUP = 2, 8, 32
_LISTABLE: Final = frozenset({_TOPIC, BROKER, _BROKER_LOGGER, CLIENT_METRICS, _GROUP})
"""The types ListConfigResources v1 lists, as a broker (none asked: all of them; KF3-C-17)."""
_DYNAMIC_BROKER_CONFIG, _DYNAMIC_DEFAULT_BROKER_CONFIG, _STATIC_BROKER_CONFIG = 2, 3, 4  # ConfigSource
_DYNAMIC_CLIENT_METRICS_CONFIG: Final = 7
_DEFAULT_CONFIG: Final = 5
_LIST, _INT, _STRING, _UNKNOWN = 7, 3, 2, 0  # ConfigEntry.ConfigType
_DEFAULTS: Final = {INTERVAL_MS_CONFIG: str(DEFAULT_INTERVAL_MS)}
_DOCUMENTATION: Final = {
    METRICS_CONFIG: "Telemetry metric name prefix list",
    INTERVAL_MS_CONFIG: "Metrics push interval in milliseconds",
    MATCH_CONFIG: "Client match criteria",
}
"""A client-metrics key's documentation, as a broker describes it when asked (``include_documentation``,
KF3-C-2)."""
_ZERO_MS: Final = datetime.timedelta(0)
_UNSUPPORTED: Final = "The sink has CLIENT_METRICS (16) and BROKER (4) resources only"


class _Asked(NamedTuple):
    """What a DescribeConfigs request asks to be told beside each value."""

    synonyms: bool
    documentation: bool


def _text(value: PropertyValue) -> str:
    """A property as Kafka writes its value: a list comma-separated."""
    return ",".join(value) if isinstance(value, list | tuple) else str(value)


class ConfigApis:
    """The four handlers; ``client_of(header, connection)`` is who sent a request (``ClientTextError``
    for a header client id that is not valid text)."""

    def __init__(
        self, admin: SinkAdmin, client_of: Callable[[RequestHeader, Any], ClientContext], node_id: int
    ) -> None:
        self.admin = admin
        self._client_of = client_of
        self._broker_names = ("", str(node_id))
        """The cluster default and this node: one scope here (``ingest.admin.broker_configs``)."""

    def _client(self, header: RequestHeader, connection: Any) -> ClientContext | str:
        try:
            return self._client_of(header, connection)
        except ClientTextError as exc:
            return str(exc)

    async def describe_configs(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        schema = response_schema(DESCRIBE_CONFIGS, header.api_version)
        client = self._client(header, connection)
        asked = _Asked(
            bool(getattr(body, "include_synonyms", False)),
            bool(getattr(body, "include_documentation", False)),
        )
        results = tuple(self._described(schema, client, resource, asked) for resource in body.resources)
        return build(schema, throttle_time=_ZERO_MS, results=results)

    def _described(self, schema: type[Any], client: ClientContext | str, resource: Any, asked: _Asked) -> Any:
        result = nested(schema, "DescribeConfigsResult")
        code, message, configs = ErrorCode.none, None, ()
        if isinstance(client, str):
            code, message = ErrorCode.invalid_request, client
        elif resource.resource_type == BROKER:
            code, message, configs = self._broker_described(schema, client, resource, asked)
        elif resource.resource_type != CLIENT_METRICS:
            code, message = ErrorCode.invalid_request, _UNSUPPORTED
        elif not resource.resource_name:  # the broker's ConfigHelper (KF3-C-4)
            code, message = ErrorCode.invalid_request, "Client metrics subscription name must not be empty"
        else:
            described = self.admin.describe_subscription(client, resource.resource_name)
            code, message = ErrorCode(described.error), described.message
            if described.value is not None and described.error is Errors.NONE:
                configs = self._entries(schema, described.value, resource.configuration_keys, asked)
        return build(
            result,
            error_code=code,
            # a broker's generated DescribeConfigsResult carries "" when nothing went wrong (KF3-C-15)
            error_message="" if code == ErrorCode.none else message,
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=configs,
        )

    def _broker_described(
        self, schema: type[Any], client: ClientContext, resource: Any, asked: _Asked
    ) -> tuple[ErrorCode, str | None, tuple[Any, ...]]:
        if resource.resource_name not in self._broker_names:
            return ErrorCode.invalid_request, f"This node is broker {self._broker_names[1]}", ()
        error, configs = self.admin.broker_configs.describe(client)
        if error is not Errors.NONE:
            return ErrorCode(error), None, ()
        dynamic_configs = self.admin.broker_configs.configs
        dynamic_source = (
            _DYNAMIC_DEFAULT_BROKER_CONFIG if resource.resource_name == "" else _DYNAMIC_BROKER_CONFIG
        )
        keys = resource.configuration_keys
        entry = nested(schema, "DescribeConfigsResourceResult")
        return (
            ErrorCode.none,
            None,
            tuple(
                build(
                    entry,
                    name=key,
                    value=value,
                    read_only=False,
                    config_source=dynamic_source if dynamic else _STATIC_BROKER_CONFIG,
                    is_sensitive=False,
                    synonyms=(),
                    config_type=_UNKNOWN
                    if key in dynamic_configs.callback_keys  # not in Kafka's ConfigDef
                    else _STRING
                    if key.endswith("overrides")
                    else _INT,
                    documentation=dynamic_configs.documentation(key) if asked.documentation else None,
                )
                for key, (value, dynamic) in configs.items()
                if (not keys or key in keys) and (dynamic or resource.resource_name != "")
            ),  # the cluster default ("") is only what the config log set, as a broker (KF3-C-15)
        )

    def _entries(
        self, schema: type[Any], properties: dict[str, PropertyValue], keys: Any, asked: _Asked
    ) -> tuple[Any, ...]:
        """A subscription's keys; as a broker (KF3-C-2), with a set key's one synonym if ``asked`` for
        synonyms, and each key's documentation if asked for it."""
        entry = nested(schema, "DescribeConfigsResourceResult")
        synonym = nested(schema, "DescribeConfigsSynonym") if asked.synonyms else None
        wanted = [k for k in CONFIG_KEYS if not keys or k in keys]  # null or empty: every key (KF3-C-3)
        return tuple(
            build(
                entry,
                name=key,
                value=_text(properties[key]) if key in properties else _DEFAULTS.get(key, ""),
                read_only=False,
                config_source=_DYNAMIC_CLIENT_METRICS_CONFIG if key in properties else _DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=()
                if synonym is None or key not in properties
                else (
                    build(
                        synonym, name=key, value=_text(properties[key]), source=_DYNAMIC_CLIENT_METRICS_CONFIG
                    ),
                ),
                config_type=_INT if key == INTERVAL_MS_CONFIG else _LIST,
                documentation=_DOCUMENTATION[key] if asked.documentation else None,
            )
            for key in wanted
        )

    async def incremental_alter_configs(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        async def alter(client: ClientContext, resource: Any) -> AdminResult[int]:
            try:
                ops = [(c.name, ConfigOp(c.config_operation), c.value) for c in resource.configs]
            except ValueError:
                return AdminResult(Errors.INVALID_REQUEST, "Unknown config operation")
            return await self.admin.update_subscription(
                client, resource.resource_name, ops, validate_only=body.validate_only
            )

        return await self._altered(INCREMENTAL_ALTER_CONFIGS, header, body, connection, alter)

    async def alter_configs(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        async def alter(client: ClientContext, resource: Any) -> AdminResult[int]:
            properties = {c.name: c.value or "" for c in resource.configs}  # nulls refused: malformed
            return await self.admin.alter_subscription(
                client, resource.resource_name, properties, validate_only=body.validate_only
            )

        return await self._altered(ALTER_CONFIGS, header, body, connection, alter)

    async def _altered(
        self,
        api_key: int,
        header: RequestHeader,
        body: Any,
        connection: Any,
        alter: Callable[[ClientContext, Any], Any],
    ) -> Any:
        schema = response_schema(api_key, header.api_version)
        response = nested(schema, "AlterConfigsResourceResponse")
        client = self._client(header, connection)
        answers, throttle_ms = [], 0
        refused = malformed(body.resources, incremental=api_key == INCREMENTAL_ALTER_CONFIGS)
        for k, resource in enumerate(body.resources):
            message: str | None
            if k in refused:
                code, message, throttled_ms = ErrorCode.invalid_request, refused[k], 0
            else:
                code, message, throttled_ms = await self._alter_one(api_key, client, resource, body, alter)
            throttle_ms = max(throttle_ms, throttled_ms)
            answers.append(
                build(
                    response,
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        if throttle_ms > 0 and not isinstance(client, str):  # the mutation throttle mutes too (KF3-D25)
            self.admin.quotas.controller_mutation.throttle(
                client.principal, client.client_id or "", throttle_ms, connection, self.admin.now_ms()
            )
        return build(
            schema, throttle_time=datetime.timedelta(milliseconds=throttle_ms), responses=tuple(answers)
        )

    async def _alter_one(
        self,
        api_key: int,
        client: ClientContext | str,
        resource: Any,
        body: Any,
        alter: Callable[[ClientContext, Any], Any],
    ) -> tuple[ErrorCode, str | None, int]:
        """One resource's error code and message, and the throttle it earned."""
        if isinstance(client, str):
            return ErrorCode.invalid_request, client, 0
        if resource.resource_type == BROKER:
            if resource.resource_name not in self._broker_names:
                return ErrorCode.invalid_request, f"This node is broker {self._broker_names[1]}", 0
            error, message = await self._broker_altered(api_key, client, resource, body.validate_only)
            return ErrorCode(error), message, 0
        if resource.resource_type != CLIENT_METRICS:
            return ErrorCode.invalid_request, _UNSUPPORTED, 0
        result = await alter(client, resource)
        return ErrorCode(result.error), result.message, result.throttle_time_ms

    async def _broker_altered(
        self, api_key: int, client: ClientContext, resource: Any, validate_only: bool
    ) -> tuple[Errors, str | None]:
        incremental = api_key == INCREMENTAL_ALTER_CONFIGS
        try:
            ops = [
                (c.name, ConfigOp(c.config_operation) if incremental else ConfigOp.SET, c.value)
                for c in resource.configs
            ]
        except ValueError:
            return Errors.INVALID_REQUEST, "Unknown config operation"
        return await self.admin.broker_configs.alter(
            client, ops, replace=not incremental, validate_only=validate_only
        )

    async def list_config_resources(self, header: RequestHeader, body: Any, connection: Any) -> Any:
        schema = response_schema(LIST_CONFIG_RESOURCES, header.api_version)
        client = self._client(header, connection)
        if isinstance(client, str):
            return build(
                schema, throttle_time=_ZERO_MS, error_code=ErrorCode.invalid_request, config_resources=()
            )
        types = set(getattr(body, "resource_types", ())) or set(_LISTABLE)
        if not types <= _LISTABLE:  # as a broker answers a type it does not list (KF3-C-17)
            return build(
                schema, throttle_time=_ZERO_MS, error_code=ErrorCode.unsupported_version, config_resources=()
            )
        listed = self.admin.list_subscriptions(client)
        if listed.error is not Errors.NONE or listed.value is None:
            return build(
                schema, throttle_time=_ZERO_MS, error_code=ErrorCode(listed.error), config_resources=()
            )
        node = self._broker_names[1]
        found = [(kind, node) for kind in (BROKER, _BROKER_LOGGER) if kind in types]  # this node, by id
        if CLIENT_METRICS in types:
            found += [(CLIENT_METRICS, name) for name in sorted(listed.value)]
        resource = nested(schema, "ConfigResource")
        return build(
            schema,
            throttle_time=_ZERO_MS,
            error_code=ErrorCode.none,
            config_resources=tuple(
                build(resource, resource_name=name, resource_type=kind) for kind, name in found
            ),
        )


def malformed(resources: Sequence[Any], *, incremental: bool) -> dict[int, str]:
    """The resources of an (Incremental)AlterConfigs request that a broker refuses with INVALID_REQUEST
    before looking at what they change, by index, with its message (``ConfigAdminManager.preprocess``,
    KF3-C-6, KF3-C-8): every copy of a resource named twice, a resource naming a key twice, and one
    with a null value for anything but a DELETE (AlterConfigs has no DELETE: any null)."""
    refused: dict[int, str] = {}
    first: dict[tuple[int, str], int] = {}
    for k, resource in enumerate(resources):
        seen = first.setdefault((resource.resource_type, resource.resource_name), k)
        if seen != k:
            refused[seen] = refused[k] = "Each resource must appear at most once."
    for k, resource in enumerate(resources):
        if k in refused:
            continue
        names = [config.name for config in resource.configs]
        nulls = [
            config.name
            for config in resource.configs
            if config.value is None and not (incremental and config.config_operation == ConfigOp.DELETE)
        ]
        if len(set(names)) != len(names):
            refused[k] = "Error due to duplicate config keys"
        elif nulls:
            refused[k] = "Null value not supported for : " + ", ".join(nulls)
    return refused
