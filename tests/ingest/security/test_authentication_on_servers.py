"""Bearer tokens, trusted proxies and required authentication on real servers: every RPC on every
port, and the admin-facing ``request_client``; one principal per certificate on every transport (F7,
F8, F11)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import grpc.aio
import httpx
import pytest
from aiohttp import web
from cryptography.x509.oid import NameOID
from google.rpc.status_pb2 import Status
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from exporters import Health, InMemoryExporter
from ingest.config import (
    ExporterConfig,
    KafkaListenerConfig,
    SecurityConfig,
    ServerConfig,
    SinkConfig,
    SinkConfigError,
)
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.security.authentication import ANONYMOUS, Authenticator
from ingest.server import Sink
from ingest.transports.http_app import create_http_app, request_client
from ingest.wire import GET_PATH, INSTANCE_ID_HEADER, OTLP_METRICS_PATH, PUSH_PATH, parse_instance_id
from subscriptions import Errors, kafka_uuid_string
from tests.support.certificates import CertificateAuthority
from tests.support.clock import FakeClock
from tests.support.kafka import KafkaClient, encode_request, serving_kafka
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
        (("127.0.0.1",), "User:CN=producer-7,O=Acme", "203.0.113.9"),
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


# -- mTLS: one principal per certificate on every transport (F11), proxies by certificate (F7) --------

ADMIN = "User:CN=ops-admin,O=Acme"
PROXY = "User:CN=edge-proxy"


@asynccontextmanager
async def mtls_sink(
    tmp_path: Path, security: SecurityConfig
) -> AsyncIterator[tuple[Sink, CertificateAuthority]]:
    """A sink with TLS and client certificates required on gRPC, HTTP and the Kafka port."""
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("server", (NameOID.COMMON_NAME, "127.0.0.1"))
    config = SinkConfig(
        data_root=str(tmp_path / "data"),
        replica_id="mtls-test",
        server=ServerConfig(
            host="127.0.0.1",
            grpc_port=0,
            http_port=0,
            shutdown_grace_s=1,
            decode_processes=1,
            tls_cert_file=str(cert),
            tls_key_file=str(key),
            tls_client_ca_file=str(ca.ca_file),
        ),
        kafka_listener=KafkaListenerConfig(port=0),
        security=security,
        exporter=ExporterConfig("memory", {}, quota_sample_period_s=0),
    )
    assert config.validate() == []
    sink = Sink(config)
    await sink.start()
    try:
        yield sink, ca
    finally:
        await sink.stop()


def client_tls(ca: CertificateAuthority, name: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.ca_file))
    context.load_cert_chain(ca.folder / f"{name}.pem", ca.folder / f"{name}.key")
    return context


async def principal_over_grpc(sink: Sink, ca: CertificateAuthority, name: str) -> str:
    credentials = grpc.ssl_channel_credentials(
        ca.ca_file.read_bytes(),
        (ca.folder / f"{name}.key").read_bytes(),
        (ca.folder / f"{name}.pem").read_bytes(),
    )
    async with grpc.aio.secure_channel(f"127.0.0.1:{sink.grpc_port}", credentials) as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
    return instance_principal(sink, uuid.UUID(bytes=got.client_instance_id))


async def principal_over_http(sink: Sink, ca: CertificateAuthority, name: str) -> str:
    async with httpx.AsyncClient(verify=client_tls(ca, name)) as http:
        got = (await http.post(f"https://127.0.0.1:{sink.http_port}{GET_PATH}", json={})).json()
    instance_id = parse_instance_id(got["client_instance_id"])  # answered in Kafka's form
    assert instance_id is not None
    return instance_principal(sink, instance_id)


async def principal_over_kafka(sink: Sink, ca: CertificateAuthority, name: str) -> str:
    assert sink.kafka_port is not None
    client = await KafkaClient.connect(sink.kafka_port, client_tls(ca, name))
    try:
        got = await client.request(GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)))
    finally:
        client.close()
    return instance_principal(sink, got.client_instance_id)


def instance_principal(sink: Sink, instance_id: uuid.UUID) -> str:
    instance = sink.manager.instance(instance_id)
    assert instance is not None
    return instance.context.principal


async def test_F11_one_certificate_is_one_principal_on_grpc_http_and_the_kafka_port(tmp_path: Path) -> None:
    async with mtls_sink(tmp_path, SecurityConfig()) as (sink, ca):
        ca.issue("producer", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "producer-7"))
        ca.issue("odd", (NameOID.COMMON_NAME, 'a,b+c"d=e'), (NameOID.ORGANIZATIONAL_UNIT_NAME, " x "))
        for name, principal in (
            ("producer", "User:CN=producer-7,O=Acme"),
            ("odd", 'User:OU=\\ x\\ ,CN=a\\,b\\+c\\"d\\=e'),
        ):
            seen = [
                await principal_over_grpc(sink, ca, name),
                await principal_over_http(sink, ca, name),
                await principal_over_kafka(sink, ca, name),
            ]
            assert seen == [principal] * 3
        # the injection certificate: O = "Acme,CN=ops-admin" is not the admin's O=Acme + CN=ops-admin
        ca.issue("admin", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "ops-admin"))
        ca.issue("evil", (NameOID.ORGANIZATION_NAME, "Acme,CN=ops-admin"))
        for over in (principal_over_grpc, principal_over_http, principal_over_kafka):
            assert await over(sink, ca, "admin") == ADMIN
            assert await over(sink, ca, "evil") == "User:O=Acme\\,CN\\=ops-admin"


async def test_F11_F7_neither_a_comma_in_a_subject_nor_a_forwarded_subject_makes_a_super_user(
    tmp_path: Path,
) -> None:
    security = SecurityConfig(super_users=(ADMIN,), trusted_proxy_principals=(PROXY,))
    async with mtls_sink(tmp_path, security) as (sink, ca):
        ca.issue("admin", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "ops-admin"))
        ca.issue("evil", (NameOID.ORGANIZATION_NAME, "Acme,CN=ops-admin"))  # O = "Acme,CN=ops-admin"
        ca.issue("edge-proxy", (NameOID.COMMON_NAME, "edge-proxy"))
        url = f"https://127.0.0.1:{sink.http_port}/admin/v1/subscriptions"
        xfcc = {"x-forwarded-client-cert": 'By=spiffe://x;Subject="CN=ops-admin,O=Acme"'}

        async def status(name: str, headers: dict[str, str] | None = None) -> int:
            async with httpx.AsyncClient(verify=client_tls(ca, name)) as http:
                return (await http.get(url, headers=headers)).status_code

        assert await status("admin") == 200
        assert await status("evil") == 403  # User:O=Acme\,CN\=ops-admin is not the super user
        assert await status("evil", xfcc) == 403  # any pod with a certificate: not a trusted proxy
        assert await status("edge-proxy") == 401  # a proxied client without a certificate: anonymous
        assert await status("edge-proxy", xfcc) == 200  # the proxy vouching for the admin's certificate
        escaped = {"x-forwarded-client-cert": 'Subject="CN=ops-admin\\,O=Acme"'}
        assert await status("edge-proxy", escaped) == 403  # the escape is kept: one CN attribute


# -- required authentication (F8) --------------------------------------------------------------


async def test_F8_required_authentication_refuses_anonymous_clients_on_grpc_and_http(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f'"{TOKEN}": "User:alice"\n')
    exporter = InMemoryExporter()
    pipeline = kafka_pipeline(
        FakeClock(), exporter, authenticator=Authenticator(str(path), require_authentication=True)
    )
    async with serve_both(pipeline) as endpoints:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await endpoints.stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (await endpoints.otlp_export(resource_payload()))[0] is grpc.StatusCode.UNAUTHENTICATED
        answer = await endpoints.http.post(GET_PATH, json={})
        assert answer.status_code == 401
        assert answer.json() == {
            "error_code": 58,
            "error": "SASL_AUTHENTICATION_FAILED",
            "message": "authentication is required: present a client certificate or a bearer token",
        }
        otlp = await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=PROTOBUF)
        assert otlp.status_code == 401
        assert Status.FromString(otlp.content).code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        bearer = {"Authorization": f"Bearer {TOKEN}", **PROTOBUF}
        assert (
            await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=bearer)
        ).is_success
    assert [push.context.principal for push in exporter.pushes] == ["User:alice"]


async def test_F8_required_authentication_closes_kafka_connections_without_a_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "ingest.transports.kafka.listener")
    async with serving_kafka(tmp_path) as served:
        served.pipeline.authenticator = Authenticator(require_authentication=True)
        client = await served.connect()
        client.send_raw(
            encode_request(GetTelemetrySubscriptionsRequest(client_instance_id=uuid.UUID(int=0)), 1)
        )
        assert await client.closed_by_server()  # unanswered
    assert served.manager.instance_count == 0
    assert "presented no client certificate (the Kafka port has no SASL)" in caplog.text


def test_F8_required_authentication_needs_sasl_or_mtls_on_the_kafka_port_and_some_way_to_authenticate(
    tmp_path: Path,
) -> None:
    with pytest.raises(SinkConfigError) as refused:
        SinkConfig.from_document({"security": {"require_authentication": True}})
    problems = "\n".join(refused.value.problems)
    assert (
        "the Kafka listener's clients cannot authenticate: set kafka_listener.security_protocol" in problems
    )
    assert "no client could authenticate" in problems
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "User:alice"\n')
    document = {
        "security": {"require_authentication": True, "tokens_file": str(tokens)},
        "kafka_listener": {"port": None},
    }
    assert SinkConfig.from_document(document).security.authenticator().require_authentication
    users = tmp_path / "users.yaml"
    users.write_text("alice: secret\n")
    sasl = {
        "security": {"require_authentication": True, "sasl_users_file": str(users)},
        "kafka_listener": {"security_protocol": "SASL_PLAINTEXT"},
    }
    assert SinkConfig.from_document(sasl).kafka_listener.uses_sasl(ServerConfig())


# -- OTLP instance ids belong to a principal (F8) -------------------------------------------------


async def test_F8_an_otlp_instance_id_cannot_be_claimed_by_another_principal(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f'"{TOKEN}": "User:alice"\n"t0k3n-bob": "User:bob"\n')
    clock, exporter = FakeClock(), InMemoryExporter()
    pipeline = kafka_pipeline(clock, exporter, authenticator=Authenticator(str(path)))
    alice = (("authorization", f"Bearer {TOKEN}"),)
    async with serve_both(pipeline) as endpoints:
        got = await endpoints.stub.GetTelemetrySubscriptions(
            pb.GetTelemetrySubscriptionsRequest(), metadata=alice
        )
        owned = str(uuid.UUID(bytes=got.client_instance_id))  # alice's, made by her Get
        for who in ({}, {"Authorization": "Bearer t0k3n-bob"}):  # anonymous, then bob
            answer = await endpoints.http.post(
                OTLP_METRICS_PATH,
                content=resource_payload(),
                headers={INSTANCE_ID_HEADER: owned, **who, **PROTOBUF},
            )
            assert answer.status_code == 403
            status = Status.FromString(answer.content)
            assert status.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
            kafka_form = kafka_uuid_string(uuid.UUID(owned))  # the hex form sent, Kafka's form answered
            assert status.message == f"client instance {kafka_form} belongs to another principal"
        refused = await endpoints.otlp_export(resource_payload(), ((INSTANCE_ID_HEADER, owned),))
        assert refused[0] is grpc.StatusCode.PERMISSION_DENIED
        assert (await endpoints.otlp_export(resource_payload(), ((INSTANCE_ID_HEADER, owned), *alice)))[
            0
        ] is (grpc.StatusCode.OK)
        # an id first used by an OTLP push belongs to its pusher from then on
        first = str(uuid.uuid4())
        bob = {"Authorization": "Bearer t0k3n-bob", INSTANCE_ID_HEADER: first, **PROTOBUF}
        assert (
            await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=bob)
        ).is_success
        assert (await endpoints.otlp_export(resource_payload(), ((INSTANCE_ID_HEADER, first), *alice)))[
            0
        ] is (grpc.StatusCode.PERMISSION_DENIED)
        assert (
            await endpoints.http.post(OTLP_METRICS_PATH, content=resource_payload(), headers=bob)
        ).is_success
    assert [(str(p.context.client_instance_id), p.context.principal) for p in exporter.pushes] == [
        (owned, "User:alice"),
        (first, "User:bob"),
        (first, "User:bob"),
    ]
