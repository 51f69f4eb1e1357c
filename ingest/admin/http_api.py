"""The admin API over HTTP (JSON), on the sink's HTTP port under ``/admin/v1``; the operations are
``ingest.admin.operations``'s.

| method and path | what |
|---|---|
| ``GET /admin/v1/subscriptions`` | every subscription with its properties |
| ``GET /admin/v1/subscriptions/{name}`` | one subscription's properties (empty when unknown, as Kafka) |
| ``PUT /admin/v1/subscriptions/{name}`` | create or replace: the body is the complete property set |
| ``PATCH /admin/v1/subscriptions/{name}`` | set the given properties, delete those given as null |
| ``DELETE /admin/v1/subscriptions/{name}`` | delete it |
| ``GET /admin/v1/client-quotas`` | every configured quota |
| ``POST /admin/v1/client-quotas/describe`` | DescribeClientQuotas: ``{"components": [...], "strict"}`` |
| ``POST /admin/v1/client-quotas/alter`` | AlterClientQuotas: ``{"entries": [...], "validate_only"}`` |
| ``GET /admin/v1/client-instances?limit=N`` | client instances this replica knows |
| ``GET /admin/v1/client-instances/{id}`` | one of them (Kafka's base64 form or a hex UUID) |
| ``GET /admin/v1/config-log?since=OFFSET`` | the config log's changes after an offset |

Changes take ``?validate_only=true``. Entities and filters have the shape of Kafka's requests:
``{"entity_type": "user" | "client-id" | "ip", "entity_name": <name, or null for the default>}``;
filter components ``{"entity_type", "match_type": 0 exact | 1 default | 2 any, "match"}``; quota
operations ``{"key", "value"}`` (``"remove": true`` or a null value removes the key).

Client instance ids are answered in Kafka's form (``Uuid.toString()``: 22 characters of base64url,
as Kafka's tools and client logs show them) and accepted in that form or as a hex UUID.

Answers are JSON with ``error_code``, ``error`` (the Kafka error name) and ``message``, plus
``throttle_time_ms`` on changes (with ``Retry-After`` when positive). The HTTP status follows
``errors.ADMIN_HTTP_STATUS``, except that a refused request without a credential is 401 (with
``WWW-Authenticate: Bearer``). AlterClientQuotas answers every entry on its own, as Kafka does.

A change that lost the race for its config-log offset to another change
(``ingest.admin.operations``) is answered
409 with NOT_CONTROLLER (41): nothing was written, the message names the offset the change was
prepared at and the log's, ``offset`` is the log's; send it again (a PATCH is then applied to the state
that won). For AlterClientQuotas the answer is 409 too, with the entries' errors.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, cast

from aiohttp import web

from ingest.admin.config_log import ConfigRecord, QuotaChange, ScramChange, SubscriptionChange
from ingest.admin.dynamic_configs import BrokerConfigChange
from ingest.admin.operations import QuotaAlteration, SinkAdmin
from ingest.errors import admin_http_status, retry_after_seconds
from ingest.handler_time import HandlerTime, metering, record_request_time
from ingest.json_limits import small_json
from ingest.security.identity import ANONYMOUS
from ingest.wire import ADMIN_PREFIX, parse_instance_id
from quotas import DEFAULT, ClientQuotaEntity
from quotas.entities import ENTITY_FIELDS, USER_TAG, EntityComponent, EntityType, entity_parts
from subscriptions import AdminResult, ClientContext, Errors, kafka_uuid_string
from subscriptions.admin import ConfigOp
from subscriptions.errors import ApiError
from subscriptions.model import PropertyValue

__all__ = ["ADMIN_PREFIX", "admin_routes"]

_DEFAULT_LIMIT: Final = 1000


class _BadRequestError(ApiError, ValueError):
    """A request body or parameter that cannot be read: INVALID_REQUEST (42)."""

    error = Errors.INVALID_REQUEST


def _answer(
    client: ClientContext, error: Errors, message: str | None = None, throttle_ms: int = 0, **fields: Any
) -> web.Response:
    body: dict[str, Any] = {"error_code": int(error), "error": error.name, "message": message, **fields}
    headers: dict[str, str] = {}
    status = admin_http_status(error)
    if error is Errors.CLUSTER_AUTHORIZATION_FAILED and client.principal == ANONYMOUS:
        status = 401
        headers["WWW-Authenticate"] = 'Bearer realm="telemetry-sink admin"'
    if throttle_ms > 0:
        body["throttle_time_ms"] = throttle_ms
        headers["Retry-After"] = str(retry_after_seconds(throttle_ms))
    return web.json_response(body, status=status, headers=headers)


def _result(client: ClientContext, result: AdminResult[Any], **fields: Any) -> web.Response:
    return _answer(client, result.error, result.message, result.throttle_time_ms, **fields)


MAX_ADMIN_JSON_VALUES: Final = 100_000
"""An admin body with more JSON values than this (counted before parsing) is refused 400: a thousand
AlterClientQuotas entries, as the Kafka port allows, take about 10,000."""


async def _json(request: web.Request, default: Any) -> Any:
    if not request.can_read_body:
        return default
    try:
        return small_json(await request.read() or b"null", MAX_ADMIN_JSON_VALUES)
    except ValueError as exc:
        raise _BadRequestError(str(exc)) from exc


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("true", "1", "yes")


def _properties(body: Any, *, nullable: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _BadRequestError("the body must be a JSON object of subscription properties")
    for key, value in body.items():
        ok = (
            (isinstance(value, str | int) and not isinstance(value, bool))
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            or (value is None and nullable)
        )
        if not ok:
            raise _BadRequestError(f"property {key!r}: a string, an integer or a list of strings")
    return body


def _entity(parts: Any) -> ClientQuotaEntity:
    if not isinstance(parts, list):
        raise _BadRequestError("entity must be a list of {entity_type, entity_name}")
    names: dict[str, str] = {}
    for part in parts:
        if not isinstance(part, dict) or part.get("entity_type") not in ENTITY_FIELDS:
            raise _BadRequestError(
                f"entity parts are {{entity_type: {'|'.join(ENTITY_FIELDS)}, entity_name}}"
            )
        kind, name = part["entity_type"], part.get("entity_name")
        if name is not None and not isinstance(name, str):
            raise _BadRequestError("entity_name must be a string or null (the default entity)")
        if kind in names:
            raise _BadRequestError(f"Entity type {kind} cannot appear more than once")
        names[kind] = DEFAULT if name is None else name
    return ClientQuotaEntity.from_parts(names)


def _entity_json(parts: Mapping[str, str]) -> list[dict[str, str | None]]:
    return [{"entity_type": t, "entity_name": None if n == DEFAULT else n} for t, n in parts.items()]


def _alterations(body: Any) -> list[QuotaAlteration]:
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list):
        raise _BadRequestError('the body must be {"entries": [{"entity": [...], "ops": [...]}]}')
    alterations = []
    for entry in body["entries"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("ops"), list):
            raise _BadRequestError("each entry has an entity and a list of ops")
        ops: list[tuple[str, float | None]] = []
        for op in entry["ops"]:
            if not isinstance(op, dict) or not isinstance(op.get("key"), str):
                raise _BadRequestError('each op is {"key", "value"} or {"key", "remove": true}')
            value = None if op.get("remove") else op.get("value")
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise _BadRequestError(f"quota {op['key']!r}: the value must be a number")
            ops.append((op["key"], None if value is None else float(value)))
        alterations.append(QuotaAlteration(_entity(entry.get("entity")), ops))
    return alterations


def _components(body: Any) -> tuple[list[EntityComponent], bool]:
    if body is None:
        return [], False
    if not isinstance(body, dict) or not isinstance(body.get("components", []), list):
        raise _BadRequestError('the body must be {"components": [...], "strict": false}')
    components = []
    for c in body.get("components", []):
        if not isinstance(c, dict) or not isinstance(c.get("match_type"), int):
            raise _BadRequestError("each component is {entity_type, match_type, match}")
        entity_type = cast(EntityType, c.get("entity_type"))
        components.append(EntityComponent(entity_type, c["match_type"], c.get("match")))
    return components, bool(body.get("strict", False))


def _record_json(record: ConfigRecord) -> dict[str, Any]:
    change = record.change
    common = {
        "offset": record.version,
        "principal": record.principal,
        "replica_id": record.replica_id,
        "written_ms": record.written_ms,
    }
    if isinstance(change, SubscriptionChange):
        return {**common, "kind": "subscription", "name": change.name, "properties": dict(change.properties)}
    if isinstance(change, BrokerConfigChange):
        return {**common, "kind": "broker_config", "key": change.key, "value": change.value}
    if isinstance(change, ScramChange):  # never the credential itself
        return {**common, "kind": "scram_credential", USER_TAG: change.user, "mechanism": change.mechanism,
                "deleted": change.credential is None}  # fmt: skip
    assert isinstance(change, QuotaChange)
    entity = _entity_json(entity_parts(change.entity))
    return {**common, "kind": "client_quota", "entity": entity, "key": change.key, "value": change.value}


def admin_routes(
    admin: SinkAdmin, client_of: Callable[[web.Request], ClientContext]
) -> Sequence[web.RouteDef]:
    """The admin routes; ``client_of`` gives the authenticated client context of a request."""
    handlers = _AdminHandlers(admin)

    def handler(serve: Callable[[web.Request, ClientContext], Awaitable[web.Response]]) -> _Handler:
        async def handle(request: web.Request) -> web.Response:
            client = client_of(request)
            with metering() as meter:
                try:
                    response = await serve(request, client)
                except ApiError as exc:
                    response = _answer(client, exc.error, str(exc))
            return _request_quota(admin, client, meter, response)

        return handle

    p = ADMIN_PREFIX
    return [
        web.get(f"{p}/subscriptions", handler(handlers.list_subscriptions)),
        web.get(f"{p}/subscriptions/{{name}}", handler(handlers.describe_subscription)),
        web.put(f"{p}/subscriptions/{{name}}", handler(handlers.put_subscription)),
        web.patch(f"{p}/subscriptions/{{name}}", handler(handlers.patch_subscription)),
        web.delete(f"{p}/subscriptions/{{name}}", handler(handlers.delete_subscription)),
        web.get(f"{p}/client-quotas", handler(handlers.describe_quotas)),
        web.post(f"{p}/client-quotas/describe", handler(handlers.describe_quotas)),
        web.post(f"{p}/client-quotas/alter", handler(handlers.alter_quotas)),
        web.get(f"{p}/client-instances", handler(handlers.list_instances)),
        web.get(f"{p}/client-instances/{{instance_id}}", handler(handlers.describe_instance)),
        web.get(f"{p}/config-log", handler(handlers.history)),
    ]


_Handler = Callable[[web.Request], Awaitable[web.Response]]


def _request_quota(
    admin: SinkAdmin, client: ClientContext, meter: HandlerTime, response: web.Response
) -> web.Response:
    """Every admin request, authorized or not, is subject to the request quota (KIP-124;
    AUD-D13): its handler time is recorded for the client, and over ``request_percentage`` the answer
    carries the throttle (``throttle_time_ms`` and ``Retry-After``, the larger of it and the answer's
    own); nobody is held (docs/quotas.md)."""
    throttle_ms = record_request_time(admin.quotas.request, client, meter, admin.now_ms())
    if throttle_ms <= 0 or not isinstance(response.body, bytes):
        return response
    body = json.loads(response.body)
    body["throttle_time_ms"] = max(throttle_ms, int(body.get("throttle_time_ms") or 0))
    headers = {
        k: v for k, v in response.headers.items() if k.lower() not in ("content-type", "content-length")
    }
    headers["Retry-After"] = str(retry_after_seconds(body["throttle_time_ms"]))
    return web.json_response(body, status=response.status, headers=headers)


class _AdminHandlers:
    """One method per admin route: the request's client in, the answer out (``_BadRequestError``
    for a request that cannot be read, which ``admin_routes`` answers INVALID_REQUEST)."""

    def __init__(self, admin: SinkAdmin) -> None:
        self.admin = admin

    async def list_subscriptions(self, request: web.Request, client: ClientContext) -> web.Response:
        result = self.admin.list_subscriptions(client)
        return _result(client, result, subscriptions=result.value, offset=self.admin.follower.image.version)

    async def describe_subscription(self, request: web.Request, client: ClientContext) -> web.Response:
        name = request.match_info["name"]
        result = self.admin.describe_subscription(client, name)
        return _result(client, result, name=name, properties=result.value)

    async def put_subscription(self, request: web.Request, client: ClientContext) -> web.Response:
        properties = cast(dict[str, PropertyValue], _properties(await _json(request, {}), nullable=False))
        result = await self.admin.alter_subscription(
            client, request.match_info["name"], properties, validate_only=_flag(request, "validate_only")
        )
        return _result(client, result, offset=result.value)

    async def patch_subscription(self, request: web.Request, client: ClientContext) -> web.Response:
        changes = _properties(await _json(request, {}), nullable=True)
        ops = [
            (key, ConfigOp.DELETE if value is None else ConfigOp.SET, value) for key, value in changes.items()
        ]
        result = await self.admin.update_subscription(
            client, request.match_info["name"], ops, validate_only=_flag(request, "validate_only")
        )
        return _result(client, result, offset=result.value)

    async def delete_subscription(self, request: web.Request, client: ClientContext) -> web.Response:
        result = await self.admin.alter_subscription(
            client, request.match_info["name"], {}, validate_only=_flag(request, "validate_only")
        )
        return _result(client, result, offset=result.value)

    async def describe_quotas(self, request: web.Request, client: ClientContext) -> web.Response:
        body = await _json(request, None) if request.method == "POST" else None
        components, strict = _components(body)
        result = self.admin.describe_client_quotas(client, components, strict=strict)
        entries = [
            {
                "entity": _entity_json(parts),
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
            }
            for parts, values in result.value or []
        ]
        return _result(client, result, entries=entries)

    async def alter_quotas(self, request: web.Request, client: ClientContext) -> web.Response:
        body = await _json(request, None)
        alterations = _alterations(body)
        validate_only = bool(body.get("validate_only")) or _flag(request, "validate_only")
        result = await self.admin.alter_client_quotas(client, alterations, validate_only=validate_only)
        errors = {error for _, error, _ in result.entries}
        denied = errors == {Errors.CLUSTER_AUTHORIZATION_FAILED}
        overall = Errors.CLUSTER_AUTHORIZATION_FAILED if denied else Errors.NONE
        conflicts = [message for _, error, message in result.entries if error is Errors.NOT_CONTROLLER]
        if conflicts:
            overall = Errors.NOT_CONTROLLER
        entries = [
            {
                "entity": _entity_json(entity_parts(e)),
                "error_code": int(error),
                "error": error.name,
                "error_message": message,
            }
            for e, error, message in result.entries
        ]
        message = conflicts[0] if conflicts else None
        return _answer(client, overall, message, result.throttle_time_ms, entries=entries)

    async def list_instances(self, request: web.Request, client: ClientContext) -> web.Response:
        try:
            limit = int(request.query.get("limit", _DEFAULT_LIMIT))
        except ValueError as exc:
            raise _BadRequestError(f"limit: {exc}") from exc
        result = self.admin.list_instances(client, max(0, limit))
        return _result(client, result, instances=result.value, count=self.admin.manager.instance_count)

    async def describe_instance(self, request: web.Request, client: ClientContext) -> web.Response:
        try:
            instance_id = parse_instance_id(request.match_info["instance_id"])
        except ValueError as exc:
            raise _BadRequestError(str(exc)) from exc
        assert instance_id is not None
        result = self.admin.describe_instance(client, instance_id)
        if result.error is Errors.NONE and result.value is None:
            message = f"no client instance {kafka_uuid_string(instance_id)} on this replica"
            body = {"error_code": int(Errors.INVALID_REQUEST), "error": "INVALID_REQUEST", "message": message}
            return web.json_response(body, status=404)
        return _result(client, result, instance=result.value)

    async def history(self, request: web.Request, client: ClientContext) -> web.Response:
        try:
            since = int(request.query.get("since", "-1"))
        except ValueError as exc:
            raise _BadRequestError(f"since: {exc}") from exc
        result = await self.admin.history(client, since)
        return _result(client, result, changes=[_record_json(r) for r in result.value or []])
