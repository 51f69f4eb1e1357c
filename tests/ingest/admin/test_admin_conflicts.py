"""No lost admin updates (F16): two replicas' admin APIs on one config log, each on a real loopback
HTTP server, each with its own image (not tailing, so as stale as a replica between two polls)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from deltalake import write_deltalake

import ingest.admin.config_log as config_log_module
from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower, SubscriptionChange
from ingest.admin.http_api import admin_routes
from ingest.admin.operations import QuotaAlteration, SinkAdmin, SuperUserAuthorizer
from quotas import ClientQuotaEntity, QuotaConfig, create_quota_managers
from subscriptions import ClientContext, ClientMetricsManager, Errors, SubscriptionStore
from tests.support.clock import FakeClock

pytestmark = pytest.mark.integration

ADMIN = ClientContext(client_id="admin-tool", principal="User:admin")
PATH = "/admin/v1/subscriptions/producers"


class Replica:
    def __init__(self, admin: SinkAdmin, http: httpx.AsyncClient) -> None:
        self.admin = admin
        self.http = http

    async def properties(self) -> dict[str, Any]:
        await self.admin.follower.catch_up()
        return dict((await self.http.get(PATH)).json()["properties"])


def admin_stack(log_uri: str, name: str) -> SinkAdmin:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    image = ConfigImage(SubscriptionStore(), quotas)
    follower = ConfigLogFollower(ConfigLog(log_uri, replica_id=name), image)
    return SinkAdmin(
        follower, ClientMetricsManager(image.store), quotas, SuperUserAuthorizer(["User:admin"]), clock.now_ms
    )


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Replica, Replica]]:
    log_uri = str(tmp_path / "data" / "config_log")
    async with AsyncExitStack() as stack:
        served = []
        for name in ("sink-a", "sink-b"):
            admin = admin_stack(log_uri, name)
            app = web.Application()
            app.add_routes(admin_routes(admin, lambda _: ADMIN))
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            stack.push_async_callback(server.close)
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=str(server.make_url(""))))
            served.append(Replica(admin, http))
        a, b = served
        created = await a.http.put(PATH, json={"metrics": ["org.apache.kafka."], "interval.ms": 30000})
        assert created.status_code == 200, created.text
        await b.admin.follower.catch_up()  # both start from offset 0
        yield a, b


async def test_F16_a_patch_from_a_stale_image_is_refused_409_and_reverts_nothing(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    first = await a.http.patch(PATH, json={"interval.ms": 60000})
    assert (first.status_code, first.json()["offset"]) == (200, 1)
    stale = await b.http.patch(PATH, json={"metrics": ["org.apache.kafka.producer."]})  # b is at 0
    assert stale.status_code == 409
    body = stale.json()
    assert (body["error_code"], body["error"], body["offset"]) == (41, "NOT_CONTROLLER", 1)
    assert "prepared at offset 0, but the log is at offset 1" in body["message"]
    assert await a.properties() == {"metrics": ["org.apache.kafka."], "interval.ms": 60000}
    again = await b.http.patch(PATH, json={"metrics": ["org.apache.kafka.producer."]})  # b caught up
    assert (again.status_code, again.json()["offset"]) == (200, 2)
    both = {"metrics": ["org.apache.kafka.producer."], "interval.ms": 60000}
    assert await a.properties() == both == await b.properties()


async def test_F16_two_concurrent_patches_one_wins_the_other_is_told_and_nothing_is_lost(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    answers = await asyncio.gather(
        a.http.patch(PATH, json={"interval.ms": 60000}),
        b.http.patch(PATH, json={"metrics": ["org.apache.kafka.producer."]}),
    )
    statuses = sorted(r.status_code for r in answers)
    assert statuses in ([200, 200], [200, 409])  # both, if one was prepared after the other committed
    for replica, answer, body in zip(
        (a, b), answers, ({"interval.ms": 60000}, {"metrics": ["org.apache.kafka.producer."]}), strict=True
    ):
        if answer.status_code == 409:
            assert answer.json()["error"] == "NOT_CONTROLLER"
            assert (await replica.http.patch(PATH, json=body)).status_code == 200  # the admin retries
    both = {"metrics": ["org.apache.kafka.producer."], "interval.ms": 60000}
    assert await a.properties() == both == await b.properties()


async def test_F16_a_put_or_delete_from_a_stale_image_is_prepared_again_and_applied(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    assert (await a.http.patch(PATH, json={"interval.ms": 60000})).status_code == 200
    replaced = await b.http.put(PATH, json={"metrics": ["org.apache.kafka.consumer."]})  # b is at 0
    assert (replaced.status_code, replaced.json()["offset"]) == (200, 2)
    assert await a.properties() == {"metrics": ["org.apache.kafka.consumer."]}  # PUT: the whole set
    assert (await a.http.patch(PATH, json={"interval.ms": 10000})).status_code == 200
    deleted = await b.http.delete(PATH)
    assert (deleted.status_code, deleted.json()["offset"]) == (200, 4)
    assert await a.properties() == {} == await b.properties()


async def test_F16_a_quota_alteration_from_a_stale_image_is_applied(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    assert (await a.http.patch(PATH, json={"interval.ms": 60000})).status_code == 200
    entity = [{"entity_type": "user", "entity_name": "alice"}]
    altered = await b.http.post(
        "/admin/v1/client-quotas/alter",
        json={"entries": [{"entity": entity, "ops": [{"key": "producer_byte_rate", "value": 1024}]}]},
    )
    assert altered.status_code == 200, altered.text
    await a.admin.follower.catch_up()
    assert a.admin.follower.image.client_quotas == {
        ClientQuotaEntity(user="alice"): {"producer_byte_rate": 1024}
    }
    assert (await a.properties())["interval.ms"] == 60000


async def test_F16_a_change_that_loses_every_race_is_answered_not_controller_on_every_transport(
    replicas: tuple[Replica, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time b commits, a's replica commits first (the race lost twice: the retry too)."""
    a, b = replicas
    other = ConfigLog(a.admin.follower.log.table_uri, replica_id="sink-c")

    def another_replica_first(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(config_log_module, "write_deltalake", write_deltalake)
        other.append([SubscriptionChange("other", {"interval.ms": 5000})], "User:admin", 0)
        monkeypatch.setattr(config_log_module, "write_deltalake", another_replica_first)
        write_deltalake(*args, **kwargs)

    monkeypatch.setattr(config_log_module, "write_deltalake", another_replica_first)
    entity = ClientQuotaEntity(user="alice")
    result = await b.admin.alter_client_quotas(
        ADMIN, [QuotaAlteration(entity, [("producer_byte_rate", 1.0)])]
    )
    ((_, error, message),) = result.entries
    assert error is Errors.NOT_CONTROLLER  # on the Kafka port: error code 41 in the entry
    assert "prepared at offset 1, but the log is at offset 2" in str(message)
    altered = await b.http.post(
        "/admin/v1/client-quotas/alter",
        json={
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": "alice"}],
                    "ops": [{"key": "producer_byte_rate", "value": 1}],
                }
            ]
        },
    )
    assert altered.status_code == 409
    assert altered.json()["entries"][0]["error"] == "NOT_CONTROLLER"
    put = await b.http.put(PATH, json={"metrics": ["org.apache.kafka.consumer."]})
    assert (put.status_code, put.json()["error"]) == (409, "NOT_CONTROLLER")
    monkeypatch.setattr(config_log_module, "write_deltalake", write_deltalake)
    await b.admin.follower.catch_up()
    assert entity not in b.admin.follower.image.client_quotas  # refused: not in the log
    assert (await b.properties())["metrics"] == ["org.apache.kafka."]
