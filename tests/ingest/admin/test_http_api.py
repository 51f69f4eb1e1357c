"""The admin API on a real loopback HTTP server, over a real config log (Delta) and the real engines:
authorization (TEL-23), subscriptions CRUD, Kafka-shaped client quotas (QUO-2), the mutation quota
(KIP-599, TB-4/TB-5), client instances and the log's history."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower
from ingest.admin.http_api import admin_routes
from ingest.admin.operations import SinkAdmin, SuperUserAuthorizer
from ingest.security.identity import ANONYMOUS
from ingest.wire import ADMIN_PREFIX
from quotas import ClientQuotaEntity, QuotaConfig, create_quota_managers
from subscriptions import (
    ClientContext,
    ClientMetricsManager,
    Errors,
    GetTelemetrySubscriptionsRequest,
    SubscriptionStore,
    kafka_uuid_string,
)
from subscriptions.errors import ClusterAuthorizationError
from tests.support.clock import FakeClock

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": "Bearer admin-secret", "x-kafka-client-id": "ops"}
BOB = {"Authorization": "Bearer bob-secret"}
PRINCIPALS = {"Bearer admin-secret": "User:admin", "Bearer bob-secret": "User:bob"}
KAFKA = {"metrics": ["org.apache.kafka."], "interval.ms": 60000}


def client_of(request: web.Request) -> ClientContext:
    """Stands in for the sink's authenticator: a known bearer token names the principal."""
    principal = PRINCIPALS.get(request.headers.get("Authorization", ""), ANONYMOUS)
    return ClientContext(client_id=request.headers.get("x-kafka-client-id"), principal=principal)


class Admin:
    def __init__(self, http: httpx.AsyncClient, admin: SinkAdmin, clock: FakeClock) -> None:
        self.http = http
        self.admin = admin
        self.clock = clock

    async def call(
        self, method: str, path: str, json: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return await self.http.request(
            method, ADMIN_PREFIX + path, json=json, headers=ADMIN if headers is None else headers
        )


async def serve(tmp_path: Path, *, strict: bool = True) -> AsyncIterator[Admin]:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    image = ConfigImage(SubscriptionStore(), quotas)
    manager = ClientMetricsManager(image.store)
    follower = ConfigLogFollower(ConfigLog(str(tmp_path / "config_log"), replica_id="r0"), image)
    admin = SinkAdmin(
        follower,
        manager,
        quotas,
        SuperUserAuthorizer(["User:admin"]),
        clock.now_ms,
        strict_mutation_quota=strict,
    )
    app = web.Application()
    app.add_routes(admin_routes(admin, client_of))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url(""))) as http:
            yield Admin(http, admin, clock)
    finally:
        await server.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Admin]:
    async for served in serve(tmp_path):
        yield served


async def test_tel_23_the_admin_api_needs_a_super_user_credential(api: Admin) -> None:
    anonymous = await api.call("GET", "/subscriptions", headers={})
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.json()["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/subscriptions", None),
        ("PUT", "/subscriptions/s", KAFKA),
        ("GET", "/client-quotas", None),
        ("POST", "/client-quotas/alter", {"entries": [{"entity": [], "ops": []}]}),
        ("GET", "/client-instances", None),
        ("GET", "/config-log", None),
    ]
    for method, path, body in calls:
        refused = await api.call(method, path, body, headers=BOB)
        assert refused.status_code == 403, path
        assert refused.json()["error"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert api.admin.follower.image.store.get("s") is None


async def test_TEL_23_every_admin_denial_is_the_one_cluster_denial_naming_the_operation(api: Admin) -> None:
    calls: list[tuple[str, str, Any, str]] = [
        ("GET", "/subscriptions", None, "DESCRIBE_CONFIGS"),
        ("GET", "/subscriptions/s", None, "DESCRIBE_CONFIGS"),
        ("PUT", "/subscriptions/s", KAFKA, "ALTER_CONFIGS"),
        ("PATCH", "/subscriptions/s", {"interval.ms": 5000}, "ALTER_CONFIGS"),
        ("DELETE", "/subscriptions/s", None, "ALTER_CONFIGS"),
        ("GET", "/client-quotas", None, "DESCRIBE_CONFIGS"),
        ("GET", "/client-instances", None, "DESCRIBE_CONFIGS"),
        ("GET", f"/client-instances/{kafka_uuid_string(uuid.UUID(int=1))}", None, "DESCRIBE_CONFIGS"),
        ("GET", "/config-log", None, "DESCRIBE_CONFIGS"),
    ]
    for method, path, body, operation in calls:
        refused = (await api.call(method, path, body, headers=BOB)).json()
        denial = ClusterAuthorizationError(operation)
        assert (refused["error_code"], refused["message"]) == (denial.error, str(denial)), path
    altered = await api.call("POST", "/client-quotas/alter", {"entries": [{"entity": [], "ops": []}]}, BOB)
    (entry,) = altered.json()["entries"]
    assert entry["error_message"] == str(ClusterAuthorizationError("ALTER_CONFIGS"))


async def test_subscriptions_are_created_altered_described_and_deleted(api: Admin) -> None:
    created = await api.call("PUT", "/subscriptions/kafka", KAFKA)
    assert created.status_code == 200, created.text
    first_offset = created.json()["offset"]
    listed = (await api.call("GET", "/subscriptions")).json()
    assert listed["subscriptions"] == {"kafka": {"metrics": ["org.apache.kafka."], "interval.ms": 60000}}
    patched = await api.call("PATCH", "/subscriptions/kafka", {"interval.ms": 5000, "metrics": None})
    assert patched.json()["offset"] > first_offset
    described = (await api.call("GET", "/subscriptions/kafka")).json()
    assert described["properties"] == {"interval.ms": 5000}
    subscription = api.admin.follower.image.store.get("kafka")
    assert subscription is not None
    assert subscription.interval_ms == 5000
    deleted = await api.call("DELETE", "/subscriptions/kafka")
    assert deleted.status_code == 200
    assert (await api.call("GET", "/subscriptions/kafka")).json()["properties"] == {}  # as Kafka describes it
    assert api.admin.follower.image.store.get("kafka") is None


async def test_validate_only_checks_without_writing(api: Admin) -> None:
    checked = await api.call("PUT", "/subscriptions/kafka?validate_only=true", KAFKA)
    assert checked.json()["error"] == "NONE"
    assert (await api.call("GET", "/subscriptions")).json()["subscriptions"] == {}
    assert api.admin.follower.log.latest_version() == -1


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"interval.ms": 1}, Errors.INVALID_REQUEST),
        ({"interval.ms": "soon"}, Errors.INVALID_CONFIG),
        ({"no.such.key": "x"}, Errors.INVALID_REQUEST),
        ({"metrics": {"a": 1}}, Errors.INVALID_REQUEST),
        ([1, 2], Errors.INVALID_REQUEST),
    ],
)
async def test_tel_2_bad_subscriptions_are_refused_with_kafkas_codes(
    api: Admin, body: Any, error: Errors
) -> None:
    refused = await api.call("PUT", "/subscriptions/s", body)
    assert refused.status_code == 400
    assert refused.json()["error_code"] == error
    assert api.admin.follower.log.latest_version() == -1


async def test_a_body_that_is_not_json_is_a_400_with_a_json_answer(api: Admin) -> None:
    refused = await api.http.put(ADMIN_PREFIX + "/subscriptions/s", content=b"{nope", headers=ADMIN)
    assert refused.status_code == 400
    assert refused.json()["error"] == "INVALID_REQUEST"


def user(name: str | None) -> list[dict[str, str | None]]:
    return [{"entity_type": "user", "entity_name": name}]


async def test_quo_2_client_quotas_alter_and_describe_in_kafkas_shape(api: Admin) -> None:
    altered = await api.call(
        "POST",
        "/client-quotas/alter",
        {
            "entries": [
                {"entity": user("alice"), "ops": [{"key": "producer_byte_rate", "value": 1024}]},
                {"entity": user(None), "ops": [{"key": "request_percentage", "value": 50.5}]},
                {"entity": user("bob"), "ops": [{"key": "connection_creation_rate", "value": 3}]},
                {"entity": user("carol"), "ops": [{"key": "producer_byte_rate", "value": -1}]},
            ]
        },
    )
    assert altered.status_code == 200
    errors = [e["error"] for e in altered.json()["entries"]]
    assert errors == ["NONE", "NONE", "INVALID_REQUEST", "INVALID_REQUEST"]
    assert altered.json()["entries"][1]["entity"] == user(None)
    everything = (await api.call("GET", "/client-quotas")).json()["entries"]
    assert sorted((e["entity"][0]["entity_name"] or "", e["values"]) for e in everything) == [
        ("", [{"key": "request_percentage", "value": 50.5}]),
        ("alice", [{"key": "producer_byte_rate", "value": 1024.0}]),
    ]
    default_only = await api.call(
        "POST", "/client-quotas/describe", {"components": [{"entity_type": "user", "match_type": 1}]}
    )
    assert [e["entity"] for e in default_only.json()["entries"]] == [user(None)]
    bad_filter = await api.call(
        "POST", "/client-quotas/describe", {"components": [{"entity_type": "user", "match_type": 0}]}
    )
    assert bad_filter.status_code == 400
    assert bad_filter.json()["error"] == "INVALID_REQUEST"
    tags = {"user": "alice", "client-id": ""}
    assert api.admin.quotas.produce.callback.quota_limit(api.admin.quotas.produce.quota_type, tags) == 1024.0
    removed = await api.call(
        "POST",
        "/client-quotas/alter",
        {"entries": [{"entity": user("alice"), "ops": [{"key": "producer_byte_rate", "remove": True}]}]},
    )
    assert removed.json()["entries"][0]["error"] == "NONE"
    remaining = (await api.call("GET", "/client-quotas")).json()["entries"]
    assert [e["entity"] for e in remaining] == [user(None)]


async def test_quota_validate_only_changes_nothing(api: Admin) -> None:
    body = {"entries": [{"entity": user("alice"), "ops": [{"key": "producer_byte_rate", "value": 1}]}]}
    checked = await api.call("POST", "/client-quotas/alter?validate_only=true", body)
    assert checked.json()["entries"][0]["error"] == "NONE"
    assert (await api.call("GET", "/client-quotas")).json()["entries"] == []


async def test_TB_4_AUD_D25_strict_mutation_quota_refuses_changes_over_it_with_retry_after(
    api: Admin,
) -> None:
    limit = {"entries": [{"entity": user("admin"), "ops": [{"key": "controller_mutation_rate", "value": 1}]}]}
    assert (await api.call("POST", "/client-quotas/alter", limit)).json()["entries"][0]["error"] == "NONE"
    answers = [await api.call("PUT", f"/subscriptions/s{i}", KAFKA) for i in range(20)]
    refused = [a for a in answers if a.status_code == 429]
    assert refused, "a burst of 20 changes at 1/s must hit the quota (burst 11)"
    first = refused[0].json()
    assert first["error"] == "THROTTLING_QUOTA_EXCEEDED"
    assert first["throttle_time_ms"] > 0
    assert int(refused[0].headers["Retry-After"]) >= 1
    accepted = len(answers) - len(refused)
    assert len(api.admin.follower.image.store) == accepted  # refused changes were not logged
    api.clock.advance(first["throttle_time_ms"])
    assert (await api.call("PUT", "/subscriptions/later", KAFKA)).status_code == 200


async def test_TB_5_AUD_D25_permissive_mutation_quota_accepts_and_throttles_holding_nobody(
    tmp_path: Path,
) -> None:
    async for api in serve(tmp_path, strict=False):
        limit = {
            "entries": [{"entity": user("admin"), "ops": [{"key": "controller_mutation_rate", "value": 1}]}]
        }
        await api.call("POST", "/client-quotas/alter", limit)
        answers = [await api.call("PUT", f"/subscriptions/s{i}", KAFKA) for i in range(20)]
        assert {a.status_code for a in answers} == {200}
        assert answers[-1].json()["throttle_time_ms"] > 0
        assert "Retry-After" in answers[-1].headers
        assert len(api.admin.follower.image.store) == 20


async def test_client_instances_are_listed_and_described(api: Admin) -> None:
    await api.call("PUT", "/subscriptions/kafka", KAFKA)
    context = ClientContext(client_id="producer-1", client_software_name="librdkafka", principal="User:app")
    response = api.admin.manager.process_get(
        GetTelemetrySubscriptionsRequest(None), context, api.clock.now_ms()
    )
    listed = (await api.call("GET", "/client-instances")).json()
    assert listed["count"] == 1
    (instance,) = listed["instances"]
    assert instance["client_instance_id"] == kafka_uuid_string(response.client_instance_id)  # Kafka's form
    assert "client_instance_id_kafka" not in instance
    assert instance["client_id"] == "producer-1"
    assert instance["subscriptions"] == ["kafka"]
    assert instance["push_interval_ms"] == 60000
    by_kafka_id = await api.call("GET", f"/client-instances/{instance['client_instance_id']}")
    assert by_kafka_id.json()["instance"] == instance
    by_uuid = await api.call("GET", f"/client-instances/{response.client_instance_id}")  # hex read too
    assert by_uuid.json()["instance"] == instance
    unknown = await api.call("GET", "/client-instances/00000000-0000-0000-0000-000000000001")
    assert unknown.status_code == 404
    assert "AAAAAAAAAAAAAAAAAAAAAQ" in unknown.json()["message"]  # named in Kafka's form
    assert (await api.call("GET", "/client-instances/not-a-uuid")).status_code == 400


async def test_the_config_log_history_lists_every_change_with_its_offset(api: Admin) -> None:
    await api.call("PUT", "/subscriptions/kafka", KAFKA)
    await api.call(
        "POST",
        "/client-quotas/alter",
        {"entries": [{"entity": user(None), "ops": [{"key": "producer_byte_rate", "value": 10}]}]},
    )
    changes = (await api.call("GET", "/config-log")).json()["changes"]
    assert [c["kind"] for c in changes] == ["subscription", "client_quota"]
    assert changes[0]["offset"] < changes[1]["offset"]
    assert {c["principal"] for c in changes} == {"User:admin"}
    assert changes[1]["entity"] == user(None)
    later = (await api.call("GET", f"/config-log?since={changes[0]['offset']}")).json()["changes"]
    assert later == changes[1:]


async def test_deleting_an_unknown_subscription_writes_nothing(api: Admin) -> None:
    answer = await api.call("DELETE", "/subscriptions/never-made")
    assert answer.status_code == 200
    assert answer.json()["error"] == "NONE"
    assert api.admin.follower.log.latest_version() == -1


async def test_an_instance_never_seen_has_no_last_push(api: Admin) -> None:
    await api.call("PUT", "/subscriptions/kafka", KAFKA)
    response = api.admin.manager.process_get(
        GetTelemetrySubscriptionsRequest(None), ClientContext(), api.clock.now_ms()
    )
    described = await api.call("GET", f"/client-instances/{response.client_instance_id}")
    assert described.json()["instance"]["last_push_ms"] is None


async def test_AUD_D13_admin_requests_authorized_or_not_are_subject_to_the_request_quota(api: Admin) -> None:
    api.admin.quotas.alter(ClientQuotaEntity(user="bob"), "request_percentage", 1e-6)
    refused = await api.call("GET", "/subscriptions", headers=BOB)
    assert refused.status_code == 403  # denied, and recorded all the same
    assert refused.json()["throttle_time_ms"] > 0
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"] == "CLUSTER_AUTHORIZATION_FAILED"
    served = await api.call("GET", "/subscriptions")  # the admin's own entity has no such quota
    assert "throttle_time_ms" not in served.json()


async def test_AUD_D24_an_admin_answer_carries_the_larger_of_the_request_and_mutation_throttles(
    tmp_path: Path,
) -> None:
    """KIP-599: ``throttle_time_ms`` is the max of the request-quota throttle (at most one 1 s window)
    and the controller mutation throttle."""
    async for api in serve(tmp_path, strict=False):
        ops = [{"key": "request_percentage", "value": 1e-6}, {"key": "controller_mutation_rate", "value": 1}]
        await api.call("POST", "/client-quotas/alter", {"entries": [{"entity": user("admin"), "ops": ops}]})
        one = (await api.call("PUT", "/subscriptions/one", KAFKA)).json()
        assert 0 < one["throttle_time_ms"] <= 1000  # the request quota's: the bucket still has tokens
        answers = [await api.call("PUT", f"/subscriptions/s{i}", KAFKA) for i in range(20)]
        assert answers[-1].json()["throttle_time_ms"] > 1000  # the mutation quota's: 9 changes over burst
