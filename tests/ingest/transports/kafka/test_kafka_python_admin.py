"""kafka-python (an independent, pure Python Kafka client) managing the sink as a broker, over
SASL_PLAINTEXT with SCRAM-SHA-512: client-metrics subscriptions through DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs and ListConfigResources; the dynamic connection quotas as BROKER
configs; SCRAM users (KIP-554); client quotas (kafka-python has no method for those, so its own protocol
classes and connection send AlterClientQuotas and DescribeClientQuotas). Every change goes through the
admin path (the config log, applied by the replica) and is what the HTTP admin API then shows."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.admin._configs import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.admin._users import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion
from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

from ingest.admin import QuotaChange
from ingest.config import SinkConfig
from ingest.server import Sink
from quotas import ClientQuotaEntity, QuotaType
from subscriptions import ClientContext

pytestmark = pytest.mark.integration

ADMIN = ClientContext(principal="User:ops")


def _kafka_python_admin(
    port: int, user: str, password: str, mechanism: str = "SCRAM-SHA-512", **options: Any
) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
        request_timeout_ms=30_000,
        **options,
    )


def _refused_login(port: int, user: str, password: str, mechanism: str) -> None:
    """An admin client whose login is refused: its constructor raises once its bootstrap gives up. The
    constructor of kafka-python 3.0.12 leaves its network thread running then, so the client it made is
    stopped here."""
    made: list[KafkaNetClient] = []

    def recorded(**configs: Any) -> KafkaNetClient:
        made.append(KafkaNetClient(**configs))
        return made[-1]

    try:
        _kafka_python_admin(port, user, password, mechanism, bootstrap_timeout_ms=1000, kafka_client=recorded)
    finally:
        for client in made:
            client.close()
            client._net.stop()


@asynccontextmanager
async def admin_client(tmp_path: Path, user: str = "ops") -> AsyncIterator[tuple[Sink, Callable[..., Any]]]:
    """The sink with a SASL listener (``ops`` a super user, ``dev`` not), and a way to call a
    kafka-python admin client logged in as ``user`` (its calls block: they run in a thread)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    users = tmp_path / "users.yaml"
    users.write_text("ops: ops-secret\ndev: dev-secret\n")
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "shutdown_grace_s": 5},
            "kafka_listener": {"port": 0, "security_protocol": "SASL_PLAINTEXT"},
            "security": {"sasl_users_file": str(users), "super_users": ["User:ops"]},
            "exporter": {"quota_sample_period_s": 0},
            "subscriptions": {},
        }
    )
    sink = Sink(config)
    await sink.start()
    assert sink.kafka_port is not None
    client = await asyncio.to_thread(_kafka_python_admin, sink.kafka_port, user, f"{user}-secret")

    async def call(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "send":  # a request kafka-python has no method for, on its own connection
            return await asyncio.to_thread(client._manager.run, client._manager.send, *args)
        return await asyncio.to_thread(getattr(client, method), *args, **kwargs)

    try:
        yield sink, call
    finally:
        await asyncio.to_thread(client.close)
        await sink.stop()


def _resource(name: str, configs: Any = None) -> ConfigResource:
    return ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs)


async def test_AUD_H5_kafka_python_creates_changes_lists_and_deletes_a_subscription(tmp_path: Path) -> None:
    async with admin_client(tmp_path) as (sink, call):
        created = await call(
            "alter_configs",
            [_resource("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "30000"})],
        )
        assert created == {"client_metrics": {"producers": "OK"}}
        subscription = sink.admin.follower.image.store.get("producers")
        assert subscription is not None
        assert subscription.interval_ms == 30000
        await call(
            "alter_configs",
            # a list is changed whole, as on a broker (APPEND is refused: KF3-C-7)
            [
                _resource(
                    "producers",
                    {"metrics": (AlterConfigOp.SET, "org.apache.kafka.producer.,org.apache.kafka.consumer.")},
                )
            ],
        )
        described = await call("describe_configs", [_resource("producers")], config_filter="all")
        configs = described["client_metrics"]["producers"]
        assert configs["metrics"]["value"] == "org.apache.kafka.producer.,org.apache.kafka.consumer."
        assert configs["interval.ms"]["value"] == "30000"
        assert configs["match"]["value"] == ""  # unset: its default
        assert await call("list_config_resources", ["CLIENT_METRICS"]) == {"client_metrics": ["producers"]}
        http = sink.admin.describe_subscription(ADMIN, "producers")  # the same admin path as HTTP
        assert http.value == {
            "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
            "interval.ms": "30000",
        }
        replaced = await call(
            "alter_configs", [_resource("producers", {"interval.ms": "60000"})], incremental=False
        )
        assert replaced == {"client_metrics": {"producers": "OK"}}  # AlterConfigs: the whole set, as sent
        assert sink.admin.describe_subscription(ADMIN, "producers").value == {
            "metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.",
            "interval.ms": "60000",
        }
        await call(
            "alter_configs",
            [
                _resource(
                    "producers",
                    {"metrics": (AlterConfigOp.DELETE, None), "interval.ms": (AlterConfigOp.DELETE, None)},
                )
            ],
        )
        assert sink.admin.follower.image.store.get("producers") is None
        assert await call("list_config_resources", ["CLIENT_METRICS"]) == {}


async def test_kafka_python_gets_kafkas_errors_for_bad_configs_and_a_non_super_user(tmp_path: Path) -> None:
    async with admin_client(tmp_path) as (_, call):
        bad = await call(
            "alter_configs", [_resource("producers", {"interval.ms": "10"})], raise_on_unknown=False
        )
        assert _errors(bad) == [
            "[Error 42] InvalidRequestError: Invalid value 10 for interval.ms, interval must be between 100 "
            "and 3600000 (1 hour)"
        ]
        appended = await call(
            "alter_configs",
            [_resource("producers", {"interval.ms": (AlterConfigOp.APPEND, "5")})],
            raise_on_unknown=False,
        )
        assert _errors(appended) == [
            "[Error 40] InvalidConfigurationError: "
            "Can't APPEND to key interval.ms because its type is not LIST."
        ]
    async with admin_client(tmp_path / "dev", user="dev") as (sink, call):
        refused = await call(
            "alter_configs", [_resource("producers", {"metrics": "x."})], raise_on_unknown=False
        )
        assert _errors(refused) == [
            "[Error 31] ClusterAuthorizationFailedError: Cluster authorization failed (ALTER_CONFIGS)"
        ]
        assert sink.admin.follower.image.store.get("producers") is None


def _errors(result: dict[str, Any]) -> list[str]:
    """The error of each resource of an alter_configs result that failed."""
    return [str(error) for by_name in result.values() for error in by_name.values() if error != "OK"]


async def test_AUD_H8_kafka_python_changes_the_connection_quotas_at_run_time_as_dynamic_broker_configs(
    tmp_path: Path,
) -> None:
    async with admin_client(tmp_path) as (sink, call):
        broker = ConfigResource(ConfigResourceType.BROKER, "0")
        described = await call("describe_configs", [broker], config_filter="all")
        before = described["broker"]["0"]
        assert before["max.connections"]["value"] == "2147483647"
        assert before["listener.name.kafka.max.connections"]["value"] == "10000"
        changed = await call(
            "alter_configs",
            [
                ConfigResource(
                    ConfigResourceType.BROKER,
                    "0",  # this node's id (kafka-python names brokers by id)
                    {"max.connections": "5000", "listener.name.kafka.max.connections": "300"},
                )
            ],
        )
        assert changed == {"broker": {"0": "OK"}}
        limits = sink.quotas.connections.limits()
        assert (limits["max.connections"], limits["listener.name.kafka.max.connections"]) == (5000, 300)
        after = (await call("describe_configs", [broker], config_filter="all"))["broker"]["0"]
        assert after["max.connections"]["value"] == "5000"
        refused = await call(
            "alter_configs",
            [ConfigResource(ConfigResourceType.BROKER, "0", {"max.connections": "lots"})],
            raise_on_unknown=False,
        )
        assert _errors(refused) == [
            "[Error 42] InvalidRequestError: Invalid value lots for configuration max.connections: "
            "Not a number of type INT"
        ]


async def test_KIP_554_kafka_python_adds_a_scram_user_who_logs_in_and_deleting_it_locks_it_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with admin_client(tmp_path) as (sink, call):
        assert sink.kafka_port is not None
        port = sink.kafka_port
        added = await call(
            "alter_user_scram_credentials",
            [
                UserScramCredentialUpsertion(
                    "carol", ScramMechanism.SCRAM_SHA_256, "carol-secret", iterations=8192
                )
            ],
        )
        assert added == {"carol": None}
        described = await call("describe_user_scram_credentials", ["carol"])
        assert described["carol"]["credential_infos"] == [
            {"mechanism": ScramMechanism.SCRAM_SHA_256, "iterations": 8192}
        ]
        carol = await asyncio.to_thread(_kafka_python_admin, port, "carol", "carol-secret", "SCRAM-SHA-256")
        try:
            cluster = await asyncio.to_thread(carol.describe_cluster)
            assert cluster["cluster_id"] == "telemetry-sink"
        finally:
            await asyncio.to_thread(carol.close)
        removed = await call(
            "alter_user_scram_credentials",
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)],
        )
        assert removed == {"carol": None}
        caplog.set_level(logging.INFO, logger="ingest.transports.kafka")
        with pytest.raises(KafkaError):  # kafka-python retries until its bootstrap gives up
            await asyncio.to_thread(_refused_login, port, "carol", "carol-secret", "SCRAM-SHA-256")
        assert "SASL authentication failed" in caplog.text


async def test_QUO_2_kafka_python_alters_and_describes_client_quotas_through_the_admin_path(
    tmp_path: Path,
) -> None:
    entity = AlterClientQuotasRequest.EntryData.EntityData
    op = AlterClientQuotasRequest.EntryData.OpData
    async with admin_client(tmp_path) as (sink, call):
        altered = await call(
            "send",
            AlterClientQuotasRequest(
                entries=[
                    AlterClientQuotasRequest.EntryData(
                        entity=[entity(entity_type="user", entity_name="alice")],
                        ops=[op(key="producer_byte_rate", value=2048.0, remove=False)],
                    ),
                    AlterClientQuotasRequest.EntryData(
                        entity=[entity(entity_type="client-id", entity_name="app")],
                        ops=[op(key="producer_byte_rate", value=0.5, remove=False)],  # fractional bytes
                    ),
                ],
                validate_only=False,
            ),
        )
        assert [e.error_code for e in altered.entries] == [0, 42]
        assert "producer_byte_rate" in (altered.entries[1].error_message or "")
        tags = {"user": "alice", "client-id": ""}
        assert sink.quotas.produce.callback.quota_limit(QuotaType.PRODUCE, tags) == 2048.0
        component = DescribeClientQuotasRequest.ComponentData
        described = await call(
            "send",
            DescribeClientQuotasRequest(
                components=[component(entity_type="user", match_type=0, match="alice")], strict=False
            ),
        )
        assert described.error_code == 0
        (entry,) = described.entries
        assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "alice")]
        assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 2048.0)]
        logged = await sink.admin.follower.history(-1)
        assert [r.change for r in logged] == [
            QuotaChange(ClientQuotaEntity(user="alice"), "producer_byte_rate", 2048.0)
        ]  # the refused entry wrote nothing


async def test_T3_11_deleting_every_scram_credential_of_a_user_refuses_its_plain_login_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with admin_client(tmp_path) as (sink, call):
        assert sink.kafka_port is not None
        port = sink.kafka_port
        dev = await asyncio.to_thread(_kafka_python_admin, port, "dev", "dev-secret", "PLAIN")
        await asyncio.to_thread(dev.close)  # dev logs in with the users file's password
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one a request (U4)
            removed = await call(
                "alter_user_scram_credentials", [UserScramCredentialDeletion("dev", mechanism)]
            )
            assert removed == {"dev": None}
        caplog.set_level(logging.INFO, logger="ingest.transports.kafka")
        with pytest.raises(KafkaError):  # kafka-python retries until its bootstrap gives up
            await asyncio.to_thread(_refused_login, port, "dev", "dev-secret", "PLAIN")
        assert "SASL authentication failed" in caplog.text
        ops = await asyncio.to_thread(_kafka_python_admin, port, "ops", "ops-secret", "PLAIN")
        try:  # another user's PLAIN login is untouched
            cluster = await asyncio.to_thread(ops.describe_cluster)
            assert cluster["cluster_id"] == "telemetry-sink"
        finally:
            await asyncio.to_thread(ops.close)
