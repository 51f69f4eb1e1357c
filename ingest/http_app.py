"""The HTTP front door (aiohttp): the KIP-714 RPCs as JSON, and health.

aiohttp is the server because it is asyncio-native (it shares the event loop with ``grpc.aio``, so
the pipeline, quotas and exporter are called from one thread), mature and widely used, and serves
HTTP/1.1 with TLS and client certificates from a plain ``ssl.SSLContext``.

- ``POST /v1/kip714/get-telemetry-subscriptions``: JSON ``{"client_instance_id": <uuid or null>}``
  (or no body); answers JSON with every GetTelemetrySubscriptions response field.
- ``POST /v1/kip714/push-telemetry``: JSON ``{"client_instance_id", "subscription_id", "terminating",
  "compression_type", "metrics": <base64>}``, or the raw ``metrics`` bytes
  (``application/octet-stream``) with the other fields as query parameters; answers JSON
  ``{"throttle_time_ms", "error_code", "error"}``.
- ``GET /healthz``: 200 while the process serves. ``GET /readyz``: 200 when the exporter is healthy,
  else 503 with why. ``GET /metrics``: the Prometheus text format (``ingest.metrics``).

Kafka's error codes travel in the JSON answers with HTTP 200 (``error`` names them); a throttle also
comes as ``Retry-After`` in whole seconds (PD-7). A request that cannot be read at all is answered
400 with a JSON body carrying INVALID_REQUEST (413 and TELEMETRY_TOO_LARGE for a body over the
limit), never a 500. Instance ids are
accepted as a UUID (with or without dashes) or in Kafka's 22-character base64 form, and answered as a
UUID. Who is asking comes from ``identity``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final
from uuid import UUID

from aiohttp import web

from exporters import Health
from ingest.errors import retry_after_seconds
from ingest.identity import http_client_context
from ingest.metrics import CONTENT_TYPE
from ingest.pipeline import TelemetryPipeline
from subscriptions import (
    ClientContext,
    Errors,
    GetTelemetrySubscriptionsRequest,
    PushTelemetryRequest,
    kafka_uuid_string,
)

__all__ = ["GET_PATH", "PUSH_PATH", "create_http_app", "parse_instance_id"]

log = logging.getLogger(__name__)

GET_PATH: Final = "/v1/kip714/get-telemetry-subscriptions"
PUSH_PATH: Final = "/v1/kip714/push-telemetry"
_BINARY_TYPES: Final = frozenset({"application/octet-stream", "application/x-protobuf"})


class _BadRequestError(ValueError):
    pass


def parse_instance_id(value: object) -> UUID | None:
    """A UUID (dashes optional) or Kafka's base64 form; null or empty means none."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _BadRequestError("client_instance_id must be a string")
    if len(value) == 22:
        try:
            return UUID(bytes=base64.urlsafe_b64decode(value + "=="))
        except (binascii.Error, ValueError):
            pass
    try:
        return UUID(value)
    except ValueError:
        raise _BadRequestError(f"client_instance_id {value!r} is not a UUID") from None


def _json_error(status: int, error: Errors, message: str) -> web.Response:
    return web.json_response(
        {"error_code": int(error), "error": error.name, "message": message}, status=status
    )


def _client(request: web.Request) -> ClientContext:
    transport = request.transport
    peername = transport.get_extra_info("peername") if transport else None
    ssl_object = transport.get_extra_info("ssl_object") if transport else None
    peercert = ssl_object.getpeercert() if ssl_object is not None else None
    return http_client_context(dict(request.headers), peername, peercert)


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
        body = json.loads(await request.read() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadRequestError(f"the body is not JSON: {exc}") from exc
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
            parse_instance_id(query.get("client_instance_id")),
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
        parse_instance_id(body.get("client_instance_id")),
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
) -> web.Application:
    """The application; ``ready`` says whether the exporter can store pushes, ``metrics`` renders
    ``/metrics`` (``ingest.metrics.metrics_exposition``)."""

    async def get_subscriptions(request: web.Request) -> web.Response:
        body = await _json_body(request)
        instance_id = parse_instance_id(body.get("client_instance_id"))
        r = await pipeline.get_subscriptions(GetTelemetrySubscriptionsRequest(instance_id), _client(request))
        return _answer(
            r.throttle_time_ms,
            r.error_code,
            client_instance_id=str(r.client_instance_id),
            client_instance_id_kafka=kafka_uuid_string(r.client_instance_id),
            subscription_id=r.subscription_id,
            accepted_compression_types=list(r.accepted_compression_types),
            push_interval_ms=r.push_interval_ms,
            telemetry_max_bytes=r.telemetry_max_bytes,
            delta_temporality=r.delta_temporality,
            requested_metrics=list(r.requested_metrics),
        )

    async def push(request: web.Request) -> web.Response:
        r = await pipeline.push(await _push_request(request), _client(request))
        return _answer(r.throttle_time_ms, r.error_code)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        health = ready()
        status = 200 if health.healthy else 503
        return web.json_response(
            {"status": "ready" if health.healthy else "unready", "detail": health.detail}, status=status
        )

    async def prometheus(request: web.Request) -> web.Response:
        assert metrics is not None
        return web.Response(body=metrics(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application(client_max_size=max_body_bytes, middlewares=[_errors_as_json])
    if metrics is not None:
        app.add_routes([web.get("/metrics", prometheus)])
    app.add_routes(
        [
            web.post(GET_PATH, get_subscriptions),
            web.post(PUSH_PATH, push),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
        ]
    )
    return app


def _answer(throttle_ms: int, error_code: int, **fields: Any) -> web.Response:
    body = {
        "throttle_time_ms": throttle_ms,
        "error_code": error_code,
        "error": Errors(error_code).name,
        **fields,
    }
    headers = {"Retry-After": str(retry_after_seconds(throttle_ms))} if throttle_ms > 0 else None
    return web.json_response(body, headers=headers)


@web.middleware
async def _errors_as_json(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every failure to read a request is a 4xx with a JSON body; nothing becomes a bare 500."""
    try:
        return await handler(request)
    except _BadRequestError as exc:
        return _json_error(400, Errors.INVALID_REQUEST, str(exc))
    except web.HTTPRequestEntityTooLarge as exc:
        # like a push over telemetry.max.bytes: the client retries at its next interval
        return _json_error(413, Errors.TELEMETRY_TOO_LARGE, exc.text or "the request body is too large")
    except web.HTTPException as exc:
        return _json_error(exc.status, Errors.INVALID_REQUEST, exc.reason)
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return _json_error(503, Errors.UNKNOWN_SERVER_ERROR, "the sink could not handle the request; retry")
