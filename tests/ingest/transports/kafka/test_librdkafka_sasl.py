"""librdkafka (confluent-kafka) authenticating to the sink's Kafka listener with SASL, as to a broker:
SASL_PLAINTEXT and SASL_SSL, with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. Its pushes land under the
principal ``User:<name>``, and the user's client quotas apply to it; a wrong password lands nothing.
Its AdminClient manages SCRAM users as on a broker (KIP-554)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from deltalake import DeltaTable

from ingest.config import SinkConfig
from ingest.server import Sink
from tests.support.certificates import self_signed
from tests.support.librdkafka import Landed, running_client

pytestmark = pytest.mark.integration

USERS = {"alice": "alice-secret"}


@asynccontextmanager
async def sasl_sink(tmp_path: Path, protocol: str) -> AsyncIterator[tuple[Sink, Landed, dict[str, str]]]:
    """The sink with a SASL Kafka listener, and the librdkafka settings that reach it."""
    users = tmp_path / "users.yaml"
    users.write_text("".join(f"{name}: {password}\n" for name, password in USERS.items()))
    server: dict[str, Any] = {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "shutdown_grace_s": 5}
    client = {"security.protocol": protocol}
    if protocol == "SASL_SSL":
        cert, key = self_signed(tmp_path)
        server |= {"tls_cert_file": str(cert), "tls_key_file": str(key)}
        client["ssl.ca.location"] = str(cert)
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "replica_id": "sasl-test",
            "server": server,
            "kafka_listener": {"port": 0, "node_id": 1, "security_protocol": protocol},
            "security": {
                "sasl_users_file": str(users),
                "require_authentication": True,
                "super_users": ["User:alice"],
            },
            "exporter": {"options": {"max_batch_latency_ms": 5}, "quota_sample_period_s": 0},
            "subscriptions": {"all": {"metrics": "org.apache.kafka.", "interval.ms": 300}},
            "client_quotas": [{"entity": {"user": "alice"}, "quotas": {"request_percentage": 400.0}}],
        }
    )
    sink = Sink(config)
    landed = Landed(sink.exporter)
    sink.pipeline.exporter = landed
    await sink.start()
    client["bootstrap.servers"] = f"127.0.0.1:{sink.kafka_port}"
    try:
        yield sink, landed, client
    finally:
        await sink.stop()


def _principals(sink: Sink) -> set[str]:
    table: pa.Table = DeltaTable(sink.exporter.table_uri).to_pyarrow_table()  # type: ignore[attr-defined]
    return set(table.column("principal").to_pylist())


@pytest.mark.parametrize(
    ("protocol", "mechanism"),
    [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("SASL_SSL", "PLAIN"),
        ("SASL_SSL", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
)
async def test_AUD_H11_librdkafka_pushes_over_sasl_land_under_the_users_principal_with_its_quotas(
    tmp_path: Path, protocol: str, mechanism: str
) -> None:
    async with sasl_sink(tmp_path, protocol) as (sink, landed, settings):
        conf = {
            **settings,
            "sasl.mechanisms": mechanism,
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        async with running_client(lambda: confluent_kafka.Producer({**conf, "client.id": "sasl-producer"})):
            await landed.until(lambda pushes: len(pushes) >= 2)
        principals = {p.context.principal for p in landed.pushes}
        assert principals == {"User:alice"}
        assert _principals(sink) == {"User:alice"}
        request_quotas = {
            name.tag_map.get("user"): value
            for name, value in sink.quotas.values(sink.clock.now_ms()).items()
            if name.group == "Request" and name.name == "request-time"
        }
        assert "alice" in request_quotas  # recorded against the user's quota entity


async def _refused(settings: dict[str, str], user: str, password: str) -> None:
    """A SCRAM-SHA-256 producer as ``user`` is told its authentication failed."""
    failed = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_error(error: confluent_kafka.KafkaError) -> None:
        if error.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            loop.call_soon_threadsafe(failed.set)

    conf = {**settings, "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}
    async with running_client(lambda: confluent_kafka.Producer({**conf, "error_cb": on_error})):
        async with asyncio.timeout(60):
            await failed.wait()


async def test_librdkafka_with_a_wrong_password_is_refused_and_lands_nothing(tmp_path: Path) -> None:
    async with sasl_sink(tmp_path, "SASL_PLAINTEXT") as (_, landed, settings):
        await _refused(settings, "alice", "guess")
        assert landed.pushes == []


def _alter(admin: AdminClient, alterations: list[Any]) -> None:
    for future in admin.alter_user_scram_credentials(alterations).values():
        future.result(timeout=30)


async def _pushes_as(settings: dict[str, str], landed: Landed, user: str, password: str) -> None:
    conf = {**settings, "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}
    principal = f"User:{user}"
    async with running_client(lambda: confluent_kafka.Producer(conf)):
        await landed.until(lambda pushes: any(p.context.principal == principal for p in pushes))


async def test_KIP_554_an_admin_client_adds_a_scram_user_who_then_pushes_and_deleting_it_refuses_it(
    tmp_path: Path,
) -> None:
    async with sasl_sink(tmp_path, "SASL_PLAINTEXT") as (_, landed, settings):
        admin_conf: dict[str, str | int | float | bool] = {
            **settings,
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
        async with running_client(lambda: AdminClient(admin_conf)) as admin:
            await admin.call(lambda a: _alter(a, [UserScramCredentialUpsertion("bob", info, b"bob-secret")]))
            described = await admin.call(
                lambda a: a.describe_user_scram_credentials(["bob"])["bob"].result(30)
            )
        assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_256, 8192)
        ]
        await _pushes_as(settings, landed, "bob", "bob-secret")
        async with running_client(lambda: AdminClient(admin_conf)) as admin:
            await admin.call(
                lambda a: _alter(a, [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)])
            )
        await _refused(settings, "bob", "bob-secret")
