"""The HTTP front door (aiohttp): the KIP-714 RPCs as JSON, and health.

aiohttp is the server because it is asyncio-native (it shares the event loop with ``grpc.aio``, so
the pipeline, quotas and exporter are called from one thread), mature and widely used, and serves
HTTP/1.1 with TLS and client certificates from a plain ``ssl.SSLContext``.

- ``POST /v1/kip714/get-telemetry-subscriptions``: JSON ``{"client_instance_id": <id or null>}``
  (or no body); answers JSON with every GetTelemetrySubscriptions response field.
- ``POST /v1/kip714/push-telemetry``: JSON ``{"client_instance_id", "subscription_id", "terminating",
  "compression_type", "metrics": <base64>}``, or the raw ``metrics`` bytes
  (``application/octet-stream``) with the other fields as query parameters; answers JSON
  ``{"throttle_time_ms", "error_code", "error"}``.
- ``POST /v1/metrics``: the OTLP/HTTP receiver. Bodies are ``application/x-protobuf`` or
  ``application/json`` (OTLP JSON), optionally ``Content-Encoding: gzip``; answers in the request's
  encoding: an ``ExportMetricsServiceResponse``, or on failure a ``google.rpc.Status`` with the status
  from ``errors.OTLP_ANSWERS`` (429 or 503 with ``Retry-After`` when the client should send again); a
  landed export whose invalid points were dropped carries ``partial_success`` (``otlp_points``). The
  client instance comes from ``identity.otlp_instance_id``.
- ``GET /healthz``: 200 while the process serves. ``GET /readyz``: 200 when the exporter is healthy,
  else 503 with why. ``GET /metrics``: the Prometheus text format (``ingest.push.metrics``).

Kafka's error codes travel in the JSON answers with HTTP 200 (``error`` names them); a throttle also
comes as ``Retry-After`` in whole seconds (PD-7). A request that cannot be read at all is answered
400 with a JSON body carrying INVALID_REQUEST (413 and TELEMETRY_TOO_LARGE for a body over the
limit), never a 500. Instance ids are answered in Kafka's form (``Uuid.toString()``: 22 characters
of base64url, no padding) and accepted in that form or as a hex UUID (dashes optional). Who is asking
comes from ``ingest.security.identity`` with the pipeline's ``Authenticator``; other handlers (the admin API)
get it the same way with ``request_client(request)``, whose ``AuthenticationError`` (an unknown bearer token)
this app's middleware answers 401 with ``WWW-Authenticate: Bearer`` and a JSON body (a
``google.rpc.Status`` UNAUTHENTICATED on ``/v1/metrics``), and its ``ClientTextError`` (a client id,
software name or version that is not valid text or is over its ``limits:``) 400 with INVALID_REQUEST
naming the header (a ``google.rpc.Status`` INVALID_ARGUMENT on ``/v1/metrics``). Every RPC is counted
and timed (``metrics.RequestMetrics``, transport ``http``).

A request with a body holds its size (``Content-Length``, or the body limit when chunked) in the
listeners' ``RequestMemory`` from its headers until it is answered; one over a bound is answered at
once, its body never read: 503 with ``Retry-After`` and UNKNOWN_SERVER_ERROR saying which bound (a
``google.rpc.Status`` UNAVAILABLE on ``/v1/metrics``, which OTLP clients retry), and its connection
closed (nothing reads the body beyond aiohttp's read-ahead; a client that sent ``Expect:
100-continue`` was told to go on before the check, as aiohttp answers it first).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Final
from uuid import UUID

from aiohttp import web
from aiohttp.typedefs import Middleware
from google.protobuf import json_format
from google.rpc.status_pb2 import Status

from exporters import Health
from ingest.errors import (
    AUTHENTICATION_ANSWER,
    AUTHENTICATION_FAILED,
    OtlpAnswer,
    error_name,
    otlp_answer,
    retry_after_seconds,
)
from ingest.handler_time import metering, record_request_time
from ingest.json_limits import small_json
from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push.metrics import CONTENT_TYPE, Rpc
from ingest.push.pipeline import EXPORTER_RETRY_MS, OtlpOutcome, TelemetryPipeline
from ingest.security.authentication import AuthenticationError, Authenticator
from ingest.security.identity import ClientTextError, http_client_context
from ingest.transports.connections import connection_ip
from ingest.transports.request_memory import RequestMemory
from ingest.wire import (
    FORWARDED_BATCH_HEADER,
    GET_PATH,
    HEALTH_PATH,
    INSTANCE_ID_HEADER,
    JSON_CONTENT_TYPE,
    METRICS_PATH,
    OTLP_METRICS_PATH,
    PROTOBUF_CONTENT_TYPE,
    PUSH_PATH,
    parse_instance_id,
)
from subscriptions import (
    ClientContext,
    CompressionType,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    kafka_uuid_string,
)

__all__ = [
    "AUTHENTICATOR",
    "LIMITS",
    "SERVER_OPTIONS",
    "create_http_app",
    "request_client",
]

log = logging.getLogger(__name__)

_Route = Callable[[web.Request], Awaitable[web.Response]]

SERVER_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType({"auto_decompress": False})
"""For the ``AppRunner`` serving the app: ``Content-Encoding`` is undone by the codec, whose output is
capped (zip-bomb safe), never by aiohttp."""
_CONTENT_ENCODINGS: Final = {"identity": CompressionType.NONE, "gzip": CompressionType.GZIP}
_BINARY_TYPES: Final = frozenset({"application/octet-stream", PROTOBUF_CONTENT_TYPE})
_RPCS: Final[Mapping[str, Rpc]] = MappingProxyType(
    {GET_PATH: "GetTelemetrySubscriptions", PUSH_PATH: "PushTelemetry", OTLP_METRICS_PATH: "Export"}
)
AUTHENTICATOR: Final = web.AppKey("authenticator", Authenticator)
"""Where the app keeps the ``Authenticator`` (``request.config_dict[AUTHENTICATOR]``, sub-apps too)."""
LIMITS: Final = web.AppKey("limits", RequestLimits)
"""Where the app keeps the pipeline's ``RequestLimits``, for the client text ``request_client`` checks."""
_OUTCOME: Final = web.ResponseKey("outcome", int)
"""The Kafka error code an answer carries, for the request counters."""
_CLIENT: Final = web.RequestKey("client", ClientContext)
"""Who sent the request, once known, for the counters by quota entity."""
_UNAUTHORIZED_HEADERS: Final = MappingProxyType({"WWW-Authenticate": 'Bearer error="invalid_token"'})


class _BadRequestError(ValueError):
    pass


def _instance_id(value: object) -> UUID | None:
    if value is not None and not isinstance(value, str):
        raise _BadRequestError("client_instance_id must be a string")
    try:
        return parse_instance_id(value)
    except ValueError as exc:
        raise _BadRequestError(str(exc)) from None


def _json_error(
    status: int, code: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    response = web.json_response(
        {"error_code": code, "error": error_name(code), "message": message}, status=status, headers=headers
    )
    response[_OUTCOME] = code
    return response


def request_client(request: web.Request) -> ClientContext:
    """Who sent ``request``: principal (bearer token, trusted proxy, client certificate), client id
    and software from the headers, source address and port. Raises ``AuthenticationError`` for an
    unknown bearer token, which this app's middleware answers 401, and ``ClientTextError`` for client
    text that breaks ``ingest.security.identity``'s rules, which it answers 400 naming the header."""
    transport = request.transport
    peername = transport.get_extra_info("peername") if transport else None
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    client = http_client_context(
        dict(request.headers),
        peername,
        certificate,
        request.config_dict[AUTHENTICATOR],
        request.config_dict.get(LIMITS, DEFAULT_LIMITS),
    )
    request[_CLIENT] = client  # for the request's metrics
    return client


def _field(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name, default)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _BadRequestError(f"{name} must be an integer")
    if kind is bool and not isinstance(value, bool):
        raise _BadRequestError(f"{name} must be true or false")
    return value


async def _json_body(request: web.Request) -> Mapping[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = small_json(await request.read() or b"{}")
    except ValueError as exc:
        raise _BadRequestError(str(exc)) from exc
    if not isinstance(body, dict):
        raise _BadRequestError("the body must be a JSON object")
    return body


async def _push_request(request: web.Request) -> PushTelemetryRequest:
    if request.content_type in _BINARY_TYPES:
        query = request.query
        try:
            subscription_id = int(query.get("subscription_id", "0"))
            compression = int(query.get("compression_type", "0"))
        except ValueError as exc:
            raise _BadRequestError(f"query parameters: {exc}") from exc
        terminating = query.get("terminating", "false").lower() in ("true", "1", "yes")
        return PushTelemetryRequest(
            _instance_id(query.get("client_instance_id")),
            subscription_id,
            terminating,
            compression,
            await request.read(),
        )
    body = await _json_body(request)
    metrics = body.get("metrics")
    if metrics is not None and not isinstance(metrics, str):
        raise _BadRequestError("metrics must be base64 text")
    try:
        payload = base64.b64decode(metrics, validate=True) if metrics else b""
    except binascii.Error as exc:
        raise _BadRequestError(f"metrics is not base64: {exc}") from exc
    return PushTelemetryRequest(
        _instance_id(body.get("client_instance_id")),
        _field(body, "subscription_id", int, 0),
        _field(body, "terminating", bool, False),
        _field(body, "compression_type", int, 0),
        payload,
    )


def create_http_app(
    pipeline: TelemetryPipeline,
    *,
    ready: Callable[[], Health],
    metrics: Callable[[], bytes] | None = None,
    max_body_bytes: int = 4 * 1024 * 1024,
    request_memory: RequestMemory | None = None,
) -> web.Application:
    """The application; ``ready`` says whether the exporter can store pushes, ``metrics`` renders
    ``/metrics`` (``ingest.push.metrics.metrics_exposition``); request bodies are held within
    ``request_memory`` (shared with the other listeners; by default one of its own)."""
    handlers = _Handlers(pipeline, ready, metrics)
    held = _within(request_memory or RequestMemory(), max_body_bytes)
    app = web.Application(
        client_max_size=max_body_bytes, middlewares=[handlers.observed, _errors_as_json, held]
    )
    app[AUTHENTICATOR] = pipeline.authenticator
    app[LIMITS] = pipeline.limits
    if metrics is not None:
        app.add_routes([web.get(METRICS_PATH, handlers.exempt(handlers.prometheus))])
    app.add_routes(
        [
            web.post(GET_PATH, handlers.get_subscriptions),
            web.post(PUSH_PATH, handlers.push),
            web.post(OTLP_METRICS_PATH, handlers.otlp_metrics),
            web.get(HEALTH_PATH, handlers.exempt(handlers.healthz)),
            web.get("/readyz", handlers.exempt(handlers.readyz)),
        ]
    )
    return app


class _Handlers:
    """The app's request handlers and its request-metrics middleware, over one pipeline."""

    def __init__(
        self,
        pipeline: TelemetryPipeline,
        ready: Callable[[], Health],
        metrics: Callable[[], bytes] | None,
    ) -> None:
        self.pipeline = pipeline
        self.ready = ready
        self.metrics = metrics

    async def get_subscriptions(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        instance_id = _instance_id(body.get("client_instance_id"))
        r = await self.pipeline.get_subscriptions(
            GetTelemetrySubscriptionsRequest(instance_id), request_client(request)
        )
        fields = r._asdict()
        throttle_ms, error_code = fields.pop("throttle_time_ms"), fields.pop("error_code")
        fields["client_instance_id"] = kafka_uuid_string(r.client_instance_id)
        return _answer(throttle_ms, error_code, **fields)

    async def push(self, request: web.Request) -> web.Response:
        r = await self.pipeline.push(await _push_request(request), request_client(request))
        return _answer(r.throttle_time_ms, r.error_code)

    async def otlp_metrics(self, request: web.Request) -> web.Response:
        as_json = request.content_type == JSON_CONTENT_TYPE
        if not as_json and request.content_type != PROTOBUF_CONTENT_TYPE:
            message = (
                f"unsupported content type {request.content_type!r}: "
                f"send {PROTOBUF_CONTENT_TYPE} or {JSON_CONTENT_TYPE}"
            )
            return _json_error(415, Errors.INVALID_REQUEST, message)
        encoding = request.headers.get("Content-Encoding", "identity").lower()
        if encoding not in _CONTENT_ENCODINGS:
            return _json_error(
                415, Errors.UNSUPPORTED_COMPRESSION_TYPE, f"unsupported Content-Encoding {encoding!r}"
            )
        try:
            client = request_client(request)
        except AuthenticationError as exc:
            return _otlp_reply(AUTHENTICATION_ANSWER, AUTHENTICATION_FAILED, str(exc), 0, as_json)
        held = await self.pipeline.otlp_hold(client)  # a held client's body is not read meanwhile
        if held is not None:
            return _otlp_answer(held, as_json)
        body, compression = await request.read(), _CONTENT_ENCODINGS[encoding]
        outcome = await self.pipeline.export_otlp(
            body,
            compression,
            client,
            request.headers.get(INSTANCE_ID_HEADER),
            as_json=as_json,
            batch_header=request.headers.get(FORWARDED_BATCH_HEADER),
        )
        return _otlp_answer(outcome, as_json)

    def exempt(self, handler: _Route) -> _Route:
        """The platform's requests (probes, scrapes) are nobody's client traffic: their handler time
        goes to the request quota's never-throttled ``exempt-request-time``, as a broker's
        cluster-action requests do (KIP-124; AUD-D10)."""

        async def metered(request: web.Request) -> web.Response:
            with metering() as meter:
                response = await handler(request)
            record_request_time(self.pipeline.quotas.request, None, meter, self.pipeline.clock.now_ms())
            return response

        return metered

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        health = self.ready()
        status = 200 if health.healthy else 503
        return web.json_response(
            {"status": "ready" if health.healthy else "unready", "detail": health.detail}, status=status
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        return web.Response(body=self.metrics(), headers={"Content-Type": CONTENT_TYPE})

    @web.middleware
    async def observed(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """The middleware counting and timing every RPC by the Kafka error code it answered."""
        rpc = _RPCS.get(request.path)
        if rpc is None:
            return await handler(request)
        with self.pipeline.request_metrics.observe("http", rpc) as seen:
            response = await handler(request)
            seen.code = response.get(_OUTCOME, Errors.UNKNOWN_SERVER_ERROR)
            seen.client = request.get(_CLIENT)
            return response


def _answer(throttle_ms: int, error_code: int, **fields: Any) -> web.Response:
    body = {
        "throttle_time_ms": throttle_ms,
        "error_code": error_code,
        "error": Errors(error_code).name,
        **fields,
    }
    headers = {"Retry-After": str(retry_after_seconds(throttle_ms))} if throttle_ms > 0 else None
    response = web.json_response(body, headers=headers)
    response[_OUTCOME] = error_code
    return response


def _otlp_answer(outcome: OtlpOutcome, as_json: bool) -> web.Response:
    if outcome.error is Errors.NONE:
        return _otlp_response(outcome.export_response(), 200, None, outcome.error, as_json)
    answer = otlp_answer(outcome.error)
    return _otlp_reply(answer, outcome.error, outcome.message, outcome.retry_after_ms, as_json)


def _otlp_reply(
    answer: OtlpAnswer, code: int, message: str, retry_after_ms: int, as_json: bool
) -> web.Response:
    """A failed OTLP export: a ``google.rpc.Status`` with the answer's status and wait."""
    reply = Status(code=answer.grpc_status.value[0], message=message)
    headers: dict[str, str] = {}
    if answer.retryable and retry_after_ms > 0:
        headers["Retry-After"] = str(retry_after_seconds(retry_after_ms))
    if answer is AUTHENTICATION_ANSWER:
        headers.update(_UNAUTHORIZED_HEADERS)
    return _otlp_response(reply, answer.http_status, headers, code, as_json)


def _otlp_response(
    reply: Any, status: int, headers: Mapping[str, str] | None, code: int, as_json: bool
) -> web.Response:
    if as_json:
        response = web.Response(
            text=json_format.MessageToJson(reply),
            status=status,
            headers=headers,
            content_type=JSON_CONTENT_TYPE,
        )
    else:
        response = web.Response(
            body=reply.SerializeToString(), status=status, headers=headers, content_type=PROTOBUF_CONTENT_TYPE
        )
    response[_OUTCOME] = code
    return response


@web.middleware
async def _errors_as_json(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every failure to read a request is a 4xx with a JSON body; nothing becomes a bare 500. Client
    text that breaks ``ingest.security.identity``'s rules is INVALID_REQUEST (400). On ``/v1/metrics`` the
    body is the ``google.rpc.Status`` an OTLP client reads, in the request's encoding (``_refused``)."""
    try:
        return await handler(request)
    except (ClientTextError, _BadRequestError) as exc:
        return _refused(request, 400, Errors.INVALID_REQUEST, str(exc))
    except AuthenticationError as exc:
        return _json_error(401, AUTHENTICATION_FAILED, str(exc), _UNAUTHORIZED_HEADERS)
    except web.HTTPRequestEntityTooLarge as exc:
        # like a push over telemetry.max.bytes: the client retries at its next interval
        message = exc.text or "the request body is too large"
        return _refused(request, 413, Errors.TELEMETRY_TOO_LARGE, message)
    except web.HTTPException as exc:
        return _json_error(exc.status, Errors.INVALID_REQUEST, exc.reason)
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        message = "the sink could not handle the request; retry"
        return _refused(request, 503, Errors.UNKNOWN_SERVER_ERROR, message)


def _within(memory: RequestMemory, max_body_bytes: int) -> Middleware:
    """The middleware holding each request body's size in ``memory`` until the request is answered."""

    @web.middleware
    async def held(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.body_exists:
            return await handler(request)
        length = request.content_length
        size = max_body_bytes if length is None else min(length, max_body_bytes)
        transport = request.transport
        ip = connection_ip(transport.get_extra_info("peername") if transport is not None else None)
        if ip is None or size <= 0:
            return await handler(request)
        if not memory.try_take(ip, size):
            why = memory.refusal(ip)
            response = _refused(request, 503, Errors.UNKNOWN_SERVER_ERROR, f"{why}: retry later")
            response.headers.setdefault("Retry-After", str(retry_after_seconds(EXPORTER_RETRY_MS)))
            response.force_close()  # not drained (aiohttp would read the body for up to 10 s)
            return response
        try:
            return await handler(request)
        finally:
            memory.give_back(ip, size)

    return held


def _refused(request: web.Request, status: int, code: Errors, message: str) -> web.Response:
    """A refused request: Kafka's JSON error body, or on ``/v1/metrics`` OTLP's ``google.rpc.Status``
    (with the transport status ``errors.OTLP_ANSWERS`` gives the code)."""
    if request.path != OTLP_METRICS_PATH:
        return _json_error(status, code, message)
    as_json = request.content_type == JSON_CONTENT_TYPE
    return _otlp_reply(otlp_answer(code), code, message, EXPORTER_RETRY_MS, as_json)
