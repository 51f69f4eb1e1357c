"""``Sink`` wires the security and admission settings into both ports, and the bootstrap quotas and
the config log into the engines (in process, real servers)."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio
import httpx
import pytest

from exporters import InMemoryExporter
from exporters.delta.schema import CONFIG_LOG_TABLE
from ingest.admin.config_log import ConfigLog, QuotaChange
from ingest.config import SinkConfig
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.server import Sink
from ingest.wire import GET_PATH
from quotas import DEFAULT, ClientQuotaEntity, QuotaType
from subscriptions import Errors

pytestmark = pytest.mark.integration


async def test_the_configured_tokens_limits_and_request_metrics_are_live_on_both_ports(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"good": "User:alice"\n')
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "max_concurrent_requests": 7},
            "kafka_listener": {"port": 0},
            "security": {"tokens_file": str(tokens), "super_users": "User:admin"},
            "exporter": {"name": "memory"},
        }
    )
    sink = Sink(config)
    await sink.start()
    try:
        assert isinstance(sink.exporter, InMemoryExporter)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
            stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
            got = await stub.GetTelemetrySubscriptions(
                pb.GetTelemetrySubscriptionsRequest(), metadata=(("authorization", "Bearer good"),)
            )
            assert got.error_code == Errors.NONE
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetTelemetrySubscriptions(
                    pb.GetTelemetrySubscriptionsRequest(), metadata=(("authorization", "Bearer bad"),)
                )
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sink.http_port}") as client:
            unknown = await client.post(GET_PATH, json={}, headers={"Authorization": "Bearer bad"})
            assert unknown.status_code == 401
            scrape = (await client.get("/metrics")).text
        assert "telemetry_sink_requests_max_in_flight 7.0" in scrape
        labels = (
            'code="58",error="SASL_AUTHENTICATION_FAILED",rpc="GetTelemetrySubscriptions",transport="http"'
        )
        assert f"telemetry_sink_requests_total{{{labels}}} 1.0" in scrape
        assert sink.config.security.super_users == ("User:admin",)
    finally:
        await sink.stop()


async def test_bootstrap_quotas_apply_first_and_the_config_log_is_replayed_on_top(tmp_path: Path) -> None:
    data = tmp_path / "data"
    earlier = ConfigLog(str(data / CONFIG_LOG_TABLE), replica_id="other")
    alice = ClientQuotaEntity(user="alice")
    earlier.append([QuotaChange(alice, "producer_byte_rate", 2048.0)], "User:admin", 1)
    config = SinkConfig.from_document(
        {
            "data_root": str(data),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
            "kafka_listener": {"port": 0},
            "exporter": {"name": "memory", "quota_sample_period_s": 0},
            "client_quotas": [
                {"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 1024}},
                {"entity": {"client-id": None}, "quotas": {"request_percentage": 10}},
            ],
        }
    )
    sink = Sink(config)
    await sink.start()
    try:
        assert sink.config_log.image.client_quotas == {
            alice: {"producer_byte_rate": 2048.0},  # the log wins over the file
            ClientQuotaEntity(client_id=DEFAULT): {"request_percentage": 10.0},
        }
        tags = {"user": "alice", "client-id": ""}
        assert sink.quotas.produce.callback.quota_limit(QuotaType.PRODUCE, tags) == 2048.0
        assert sink.quota_samples is None
    finally:
        await sink.stop()


def test_the_configured_request_limits_reach_the_pipeline_holds_counters_and_quota_managers(
    tmp_path: Path,
) -> None:
    config = SinkConfig.from_document(
        {
            "data_root": str(tmp_path / "data"),
            "exporter": {"name": "memory"},
            "server": {"decode_processes": 3},
            "limits": {
                "max_data_points": 500,
                "max_quota_entities": 7,
                "max_held_clients": 5,
                "max_entity_counters": 9,
            },
        }
    )
    sink = Sink(config)
    assert sink.pipeline.limits == config.limits
    assert sink.pipeline.decoders.processes == 3
    managers = (sink.quotas.produce, sink.quotas.fetch, sink.quotas.request, sink.quotas.controller_mutation)
    assert [manager.config.max_entities for manager in managers] == [7, 7, 7, 7]
    assert sink.pipeline.holds.max_held_clients == 5
    assert sink.pipeline.request_metrics.max_entities == 9


async def test_AUD_C14_sinks_on_one_data_root_announce_themselves_and_a_shared_quota_divides(
    tmp_path: Path,
) -> None:
    """KIP-257's updateClusterMetadata in production: each replica announces itself in the data root
    at start and learns the others, so ``ReplicaShareQuotaCallback`` enforces 1/N of the fleet's quota;
    a replica that stops withdraws, and the others take the whole quota back."""

    def config(replica: str) -> SinkConfig:
        return SinkConfig.from_document(
            {
                "data_root": str(tmp_path / "data"),
                "replica_id": replica,
                "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
                "kafka_listener": {"port": None},
                "exporter": {"name": "memory", "quota_sample_period_s": 0},
                "quotas": {"client.quota.callback.class": "quotas.callback.ReplicaShareQuotaCallback"},
                "client_quotas": [{"entity": {"client-id": None}, "quotas": {"producer_byte_rate": 1000}}],
            }
        )

    first, second = Sink(config("sink-0")), Sink(config("sink-1"))
    await first.start()
    try:
        assert first.quotas.produce.quota_limit("User:u", "c") == 1000
        await second.start()
        try:
            assert second.quotas.produce.quota_limit("User:u", "c") == 500  # it saw sink-0 at start
            assert await first.replicas.heartbeat() == ("sink-0", "sink-1")
            assert first.quotas.produce.quota_limit("User:u", "c") == 500
        finally:
            await second.stop()
        assert await first.replicas.heartbeat() == ("sink-0",)
        assert first.quotas.produce.quota_limit("User:u", "c") == 1000
    finally:
        await first.stop()


def _exempt_request_time(sink: Sink) -> float:
    values = sink.quotas.values(sink.clock.now_ms())
    return next(v for m, v in values.items() if m.name == "exempt-request-time")


async def test_AUD_D10_probes_scrapes_and_applying_the_config_log_go_to_the_exempt_sensor_only(
    tmp_path: Path,
) -> None:
    """Work that is no client's (health probes, metric scrapes, applying other replicas' changes) is
    recorded in ``exempt-request-time`` and never in a client's request-time sensor (KIP-124)."""
    data = tmp_path / "data"
    config = SinkConfig.from_document(
        {
            "data_root": str(data),
            "server": {"host": "127.0.0.1", "grpc_port": 0, "http_port": 0},
            "kafka_listener": {"port": None},
            "exporter": {"name": "memory", "quota_sample_period_s": 0},
            "client_quotas": [{"entity": {"client-id": None}, "quotas": {"request_percentage": 50}}],
        }
    )
    sink = Sink(config)
    await sink.start()
    try:
        assert _exempt_request_time(sink) == 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sink.http_port}") as client:
            for path in ("/healthz", "/readyz", "/metrics"):
                assert (await client.get(path)).status_code == 200
        after_probes = _exempt_request_time(sink)
        assert after_probes > 0
        assert sink.quotas.request.entity_count == 0  # no client was charged
        other = ConfigLog(str(data / CONFIG_LOG_TABLE), replica_id="other")
        other.append([QuotaChange(ClientQuotaEntity(user="bob"), "request_percentage", 5.0)], "User:admin", 1)
        await sink.config_log.catch_up()
        assert _exempt_request_time(sink) > after_probes
        assert sink.quotas.request.entity_count == 0
    finally:
        await sink.stop()
