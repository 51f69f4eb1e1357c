"""QUO-14 for the KIP-714 RPCs on real servers: a client that ignores its throttle has its next request
held until the throttle ends, while a well-behaved client on the same sink is not affected. Time is
a FakeClock: a held request waits in virtual time, so how long it waited is read off the clock."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import httpx
import pytest
from aiohttp import web

from exporters import Health, InMemoryExporter
from ingest.proto import client_telemetry_pb2 as pb
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.authentication import Authenticator
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app
from ingest.wire import OTLP_METRICS_PATH, PUSH_PATH
from quotas import ClientQuotaEntity, MetricName
from subscriptions import Errors
from tests.support.clock import FakeClock, SteppedClock, eventually
from tests.support.otlp import metrics_data
from tests.support.pipeline import kafka_pipeline
from tests.support.servers import Endpoints, serve_both

pytestmark = pytest.mark.integration

GREEDY = (("x-kafka-client-id", "greedy"),)
POLITE = (("x-kafka-client-id", "polite"),)
PAYLOAD = metrics_data(points=100)  # a few KB against 100 B/s


def over_quota_pipeline(
    clock: FakeClock, exporter: InMemoryExporter, max_hold_delay_ms: int
) -> TelemetryPipeline:
    pipeline = kafka_pipeline(clock, exporter, max_hold_delay_ms=max_hold_delay_ms)
    pipeline.quotas.alter(ClientQuotaEntity(None, "greedy"), "producer_byte_rate", 100)
    return pipeline


class Client:
    def __init__(self, endpoints: Endpoints, metadata: tuple[tuple[str, str], ...]) -> None:
        self.endpoints, self.metadata = endpoints, metadata
        self.instance_id, self.subscription_id = b"", 0

    async def get(self) -> pb.GetTelemetrySubscriptionsResponse:
        got: pb.GetTelemetrySubscriptionsResponse = await self.endpoints.stub.GetTelemetrySubscriptions(
            pb.GetTelemetrySubscriptionsRequest(client_instance_id=self.instance_id), metadata=self.metadata
        )
        if got.error_code == Errors.NONE:
            self.instance_id, self.subscription_id = got.client_instance_id, got.subscription_id
        return got

    async def push(self) -> pb.PushTelemetryResponse:
        request = pb.PushTelemetryRequest(
            client_instance_id=self.instance_id, subscription_id=self.subscription_id, metrics=PAYLOAD
        )
        pushed: pb.PushTelemetryResponse = await self.endpoints.stub.PushTelemetry(
            request, metadata=self.metadata
        )
        return pushed


async def test_QUO_14_a_client_ignoring_its_throttle_is_held_until_it_ends_and_others_are_not() -> None:
    clock, exporter = FakeClock(), InMemoryExporter()
    async with serve_both(over_quota_pipeline(clock, exporter, max_hold_delay_ms=600_000)) as endpoints:
        greedy, polite = Client(endpoints, GREEDY), Client(endpoints, POLITE)
        assert (await greedy.get()).error_code == Errors.NONE
        assert (await polite.get()).error_code == Errors.NONE
        clock.advance(1000)
        first = await greedy.push()
        assert first.error_code == Errors.NONE  # landed: the throttle asks it to slow down
        assert first.throttle_time_ms > 1000
        throttled_at = clock.now_ms()
        # a well-behaved client is answered at once, held by nothing
        assert (await polite.push()).throttle_time_ms == 0
        assert clock.now_ms() == throttled_at
        # greedy sends again at once: the request waits out the throttle, then is handled as usual
        second = await greedy.push()
        assert clock.now_ms() - throttled_at >= first.throttle_time_ms
        assert second.error_code == Errors.NONE  # not a too-early push: the interval passed while held
    assert [p.context.client_id for p in exporter.pushes] == ["greedy", "polite", "greedy"]


async def test_QUO_14_a_hold_longer_than_the_delay_cap_is_refused_with_the_time_left_unrecorded() -> None:
    clock, exporter = FakeClock(), InMemoryExporter()
    pipeline = over_quota_pipeline(clock, exporter, max_hold_delay_ms=0)
    sensor = MetricName.of("byte-rate", "Produce", {"user": "", "client-id": "greedy"})
    async with serve_both(pipeline) as endpoints:
        greedy = Client(endpoints, GREEDY)
        await greedy.get()
        clock.advance(1000)
        throttle_ms = (await greedy.push()).throttle_time_ms
        assert throttle_ms > 0
        clock.advance(400)
        recorded = pipeline.quotas.values(clock.now_ms())[sensor]
        refused = await greedy.push()
        assert (refused.error_code, refused.throttle_time_ms) == (
            Errors.THROTTLING_QUOTA_EXCEEDED,
            throttle_ms - 400,
        )
        got = await greedy.get()  # every RPC of the held client
        assert (got.error_code, got.throttle_time_ms) == (Errors.THROTTLING_QUOTA_EXCEEDED, throttle_ms - 400)
        over_http = await endpoints.http.post(
            PUSH_PATH,
            params={
                "client_instance_id": greedy.instance_id.hex(),
                "subscription_id": greedy.subscription_id,
            },
            content=PAYLOAD,
            headers={"x-kafka-client-id": "greedy", "Content-Type": "application/octet-stream"},
        )
        assert over_http.json()["error"] == "THROTTLING_QUOTA_EXCEEDED"
        assert over_http.headers["Retry-After"] == str(-(-(throttle_ms - 400) // 1000))
        assert pipeline.quotas.values(clock.now_ms())[sensor] == recorded  # nothing recorded
        clock.advance(throttle_ms - 400)
        assert (await greedy.push()).error_code == Errors.NONE  # the hold is over
    assert len(exporter.pushes) == 2


# -- T3-5: a throttle holds every client id of a user under a user quota --------------------------


def alice_and_bob(clock: FakeClock, exporter: InMemoryExporter, tmp_path: Path) -> TelemetryPipeline:
    """Bearer tokens for User:alice and User:bob, and a <user> quota of 100 B/s on alice."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"t-alice": "User:alice"\n"t-bob": "User:bob"\n')
    pipeline = kafka_pipeline(
        clock,
        exporter,
        max_hold_delay_ms=600_000,
        max_otlp_hold_delay_ms=600_000,
        authenticator=Authenticator(str(tokens)),
    )
    pipeline.quotas.alter(ClientQuotaEntity("alice", None), "producer_byte_rate", 100)
    return pipeline


def as_user(token: str, client_id: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"), ("x-kafka-client-id", client_id))


async def test_T3_5_a_kip714_push_under_a_new_client_id_waits_out_its_users_hold(tmp_path: Path) -> None:
    clock, exporter = FakeClock(), InMemoryExporter()
    async with serve_both(alice_and_bob(clock, exporter, tmp_path)) as endpoints:
        first, second = (
            Client(endpoints, as_user("t-alice", "app-1")),
            Client(endpoints, as_user("t-alice", "app-2")),
        )
        bob = Client(endpoints, as_user("t-bob", "app-1"))
        for client in (first, second, bob):
            assert (await client.get()).error_code == Errors.NONE
        clock.advance(1000)
        throttle_ms = (await first.push()).throttle_time_ms
        assert throttle_ms > 1000
        throttled_at = clock.now_ms()
        assert (await bob.push()).throttle_time_ms == 0  # another user: held by nothing
        assert clock.now_ms() == throttled_at
        pushed = await second.push()  # alice under another client id: her user's sensor is held
        assert clock.now_ms() - throttled_at >= throttle_ms
        assert pushed.error_code == Errors.NONE
    assert [(p.context.principal, p.context.client_id) for p in exporter.pushes] == [
        ("User:alice", "app-1"),
        ("User:bob", "app-1"),
        ("User:alice", "app-2"),
    ]


async def test_T3_5_otlp_exports_under_new_client_ids_are_held_while_their_user_is(tmp_path: Path) -> None:
    """Over gRPC a held export is refused at once with the time to wait; over HTTP it is muted: it waits
    out the hold before its body is read, then lands (the clock moved past the hold meanwhile)."""
    clock, exporter = FakeClock(), InMemoryExporter()
    async with serve_both(alice_and_bob(clock, exporter, tmp_path)) as endpoints:
        http = {"Authorization": "Bearer t-alice", "Content-Type": "application/x-protobuf"}
        first = await endpoints.http.post(
            OTLP_METRICS_PATH, content=PAYLOAD, headers={**http, "x-kafka-client-id": "app-0"}
        )
        assert first.status_code == 200  # landed: the throttle starts the hold
        held_at = clock.now_ms()
        status, _, trailers = await endpoints.otlp_export(PAYLOAD, as_user("t-alice", "app-1"))
        assert status == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "google.rpc.retryinfo-bin" in trailers
        status, _, _ = await endpoints.otlp_export(PAYLOAD, as_user("t-bob", "app-1"))
        assert status == grpc.StatusCode.OK  # bob is not alice
        assert clock.now_ms() == held_at  # nobody waited so far
        muted = await endpoints.http.post(
            OTLP_METRICS_PATH, content=PAYLOAD, headers={**http, "x-kafka-client-id": "app-2"}
        )
        assert muted.status_code == 200
        assert clock.now_ms() > held_at  # it waited out alice's hold
    assert [(p.context.principal, p.context.client_id) for p in exporter.pushes] == [
        ("User:alice", "app-0"),
        ("User:bob", "app-1"),
        ("User:alice", "app-2"),
    ]


async def test_T3_5_a_muted_otlp_export_whose_client_gave_up_meanwhile_does_not_land(tmp_path: Path) -> None:
    """The exporter's timeout ran out while its request was muted: nobody will read the answer, and the
    client will send the batch again, so the request does not land once the hold ends (its body, read
    only then, is gone with its connection). Served as the sink serves: an ``AppRunner`` that does not
    cancel a handler whose client went away."""
    clock, exporter = SteppedClock(), InMemoryExporter()
    app = create_http_app(alice_and_bob(clock, exporter, tmp_path), ready=lambda: Health(True))
    runner = web.AppRunner(app, **SERVER_OPTIONS)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.server is not None
    connections = runner.server.connections
    http = {"Authorization": "Bearer t-alice", "Content-Type": "application/x-protobuf"}
    base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with httpx.AsyncClient(base_url=base_url) as client:
            first = await client.post(
                OTLP_METRICS_PATH, content=PAYLOAD, headers={**http, "x-kafka-client-id": "a"}
            )
            assert first.status_code == 200  # landed: the throttle starts the hold
            muted = asyncio.create_task(
                client.post(OTLP_METRICS_PATH, content=PAYLOAD, headers={**http, "x-kafka-client-id": "b"})
            )
            await eventually(lambda: bool(clock.pending))  # waiting out the hold
            muted.cancel()  # the exporter gives up: its connection is closed
            with contextlib.suppress(asyncio.CancelledError):
                await muted
        await eventually(lambda: not connections)
        clock.advance(600_000)  # the hold is over: the muted request goes on
        await eventually(lambda: not clock.pending)
    finally:
        await runner.cleanup()  # once the muted request's handler has finished
    assert [p.context.client_id for p in exporter.pushes] == ["a"]
