"""Bearer tokens and trusted proxies on real servers: every RPC on both ports, and the admin-facing
``request_client``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import grpc.aio
import pytest
from aiohttp import web
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters import Health, InMemoryExporter
from ingest.http_app import GET_PATH, OTLP_METRICS_PATH, PUSH_PATH, create_http_app, request_client
from ingest.proto import client_telemetry_pb2 as pb
from ingest.security import ANONYMOUS, Authenticator
from subscriptions import Errors
from tests.support.clock import FakeClock
from tests.support.otlp import metrics_data, resource_payload, sdk_metrics
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import Endpoints, serve_both

pytestmark = pytest.mark.integration

TOKEN = "t0k3n-alice-5d2f"
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def authenticator(tmp_path: Path) -> Authenticator:
    path = tmp_path / "tokens.yaml"
    path.write_text(f'"{TOKEN}": "User:alice"\n')
    return Authenticator(str(path))


async def kip714_round(endpoints: Endpoints, clock: FakeClock, metadata: tuple[tuple[str, str], ...]) -> None:
    got = await endpoints.stub.GetTelemetrySubscriptions(
        pb.GetTelemetrySubscriptionsRequest(), metadata=metadata
    )
    clock.advance(1000)
    pushed = await endpoints.stub.PushTelemetry(
        pb.PushTelemetryRequest(
            client_instance_id=got.client_instance_id,
            subscription_id=got.subscription_id,
            metrics=metrics_data(),
        ),
        metadata=metadata,
    )
    assert pushed.error_code == Errors.NONE


async def test_a_bearer_token_names_the_principal_on_every_rpc(authenticator: Authenticator) -> None:
    clock, exporter = FakeClock(), InMemoryExporter()
    async with serve_both(kafka_pipeline(clock, exporter, authenticator=authenticator)) as endpoints:
        await kip714_round(endpoints, clock, (("authorization", f"Bearer {TOKEN}"),))
        assert (await endpoints.otlp_export(resource_payload(), (("authorization", f"Bearer {TOKEN}"),)))[
            0
        ] is (grpc.StatusCode.OK)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        got = (await endpoints.http.post(GET_PATH, headers=bearer)).json()
        clock.advance(1000)
        pushed = await endpoints.http.post(
            PUSH_PATH,
            params={
                "client_instance_id": got["client_instance_id"],
                "subscription_id": got["subscription_id"],
            },
            content=metrics_data(),
            headers={**bearer, "Content-Type": "application/octet-stream"},
        )
        assert pushed.json()["error"] == "NONE"
        otlp = await endpoints.http.post(
            OTLP_METRICS_PATH, content=resource_payload(), headers={**bearer, **PROTOBUF}
        )
        assert otlp.status_code == 200
        anonymous = await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=PROTOBUF)
        assert anonymous.status_code == 200
    assert [p.context.principal for p in exporter.pushes] == ["User:alice"] * 4 + [ANONYMOUS]


async def test_an_unknown_token_is_refused_on_every_rpc_before_anything_is_handled(
    authenticator: Authenticator,
) -> None:
    clock, exporter = FakeClock(), InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter, authenticator=authenticator)
    wrong = (("authorization", "Bearer guessed"),)
    async with serve_both(pipeline) as endpoints:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await endpoints.stub.GetTelemetrySubscriptions(
                pb.GetTelemetrySubscriptionsRequest(), metadata=wrong
            )
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await endpoints.stub.PushTelemetry(pb.PushTelemetryRequest(), metadata=wrong)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        status, _, trailers = await endpoints.otlp_export(resource_payload(), wrong)
        assert status is grpc.StatusCode.UNAUTHENTICATED
        assert "google.rpc.retryinfo-bin" not in trailers
        for path in (GET_PATH, PUSH_PATH):
            answer = await endpoints.http.post(path, json={}, headers={"Authorization": "Bearer guessed"})
            assert answer.status_code == 401
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert answer.json() == {
                "error_code": 58,
                "error": "SASL_AUTHENTICATION_FAILED",
                "message": "unknown bearer token",
            }
        otlp = await endpoints.http.post(
            OTLP_METRICS_PATH,
            content=resource_payload(),
            headers={"Authorization": "Bearer guessed", **PROTOBUF},
        )
        assert otlp.status_code == 401
        assert Status.FromString(otlp.content).code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        sdk = OTLPMetricExporter(
            endpoint=f"127.0.0.1:{endpoints.grpc_port}",
            insecure=True,
            headers=(("authorization", "Bearer x"),),
        )
        assert (
            await asyncio.to_thread(sdk.export, sdk_metrics("svc")) is MetricExportResult.FAILURE
        )  # no retry
        sdk.shutdown()
    assert exporter.pushes == []
    assert pipeline.manager.instance_count == 0


XFCC = {"x-forwarded-client-cert": 'Hash=ab;Subject="CN=producer-7,O=Acme"', "x-forwarded-for": "203.0.113.9"}


@pytest.mark.parametrize(
    ("proxies", "principal", "address"),
    [
        ((), ANONYMOUS, "127.0.0.1"),  # any client could send those headers
        (("127.0.0.0/8",), "User:CN=producer-7,O=Acme", "203.0.113.9"),
    ],
)
async def test_forwarded_identity_is_believed_only_from_a_trusted_proxy(
    proxies: tuple[str, ...], principal: str, address: str
) -> None:
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(FakeClock(), exporter, authenticator=Authenticator(trusted_proxies=proxies))
    async with serve_both(pipeline) as endpoints:
        assert (await endpoints.otlp_export(resource_payload(), tuple(XFCC.items())))[0] is grpc.StatusCode.OK
        answer = await endpoints.http.post(
            OTLP_METRICS_PATH, content=resource_payload(), headers={**XFCC, **PROTOBUF}
        )
        assert answer.status_code == 200
    for push in exporter.pushes:
        assert (push.context.principal, push.context.client_source_address) == (principal, address)
        assert (push.context.client_source_port is None) == bool(proxies)


async def test_another_handler_gets_the_authenticated_client_with_request_client(
    authenticator: Authenticator,
) -> None:
    async def whoami(request: web.Request) -> web.Response:
        return web.json_response({"principal": request_client(request).principal})

    pipeline = kafka_pipeline(FakeClock(), InMemoryExporter(), authenticator=authenticator)
    admin = web.Application()
    admin.router.add_get("/whoami", whoami)
    app = create_http_app(pipeline, ready=lambda: Health(True))
    app.add_subapp("/admin", admin)
    async with serve_both(pipeline, app) as endpoints:
        alice = await endpoints.http.get("/admin/whoami", headers={"Authorization": f"Bearer {TOKEN}"})
        assert alice.json() == {"principal": "User:alice"}
        assert (await endpoints.http.get("/admin/whoami")).json() == {"principal": ANONYMOUS}
        refused = await endpoints.http.get("/admin/whoami", headers={"Authorization": "Bearer guessed"})
        assert refused.status_code == 401
        assert refused.json()["error"] == "SASL_AUTHENTICATION_FAILED"
