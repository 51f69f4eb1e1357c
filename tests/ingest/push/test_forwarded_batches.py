"""A trusted forwarder's numbered batches through real ``telemetry-sink serve`` processes: a batch sent
again (to the same replica, to another one, to a restarted one) lands once and is answered as landed;
its rows keep their push ids; only a trusted forwarder is numbered, and its malformed header is refused."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from prometheus_client.parser import text_string_to_metric_families

from exporters import list_shards
from ingest.wire import FORWARDED_BATCH_HEADER, OTLP_METRICS_PATH
from tests.support.forwarders import FORWARDERS, Client, collector_batch, librdkafka_metrics
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

TOKEN, FORWARDER = "t0k3n-broker-1", "User:kafka-broker"
OTHER_TOKEN = "t0k3n-someone"
CLIENTS = [Client(uuid.UUID(int=0x5EED + n), f"app-{n}", "alice") for n in range(3)]


@pytest.fixture
def extra(tmp_path: Path) -> str:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "{FORWARDER}"\n"{OTHER_TOKEN}": "User:someone"\n')
    return f"security: {{tokens_file: {tokens}, trusted_forwarders: ['{FORWARDER}']}}\n"


@pytest.fixture
def body() -> bytes:
    metrics = librdkafka_metrics()
    return collector_batch([FORWARDERS["monedula"](client, metrics) for client in CLIENTS])


def _send(sink: Running, body: bytes, batch: str | None, token: str = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"}
    if batch is not None:
        headers[FORWARDED_BATCH_HEADER] = batch
    return httpx.post(sink.http_url + OTLP_METRICS_PATH, content=body, headers=headers, timeout=60)


def _landed(root: Path) -> list[dict[str, Any]]:
    shards = list_shards(str(root), "telemetry_pushes")
    columns = ["client_id", "push_id", "writer_id"]
    return sorted(
        (row for uri in shards for row in DeltaTable(uri).to_pyarrow_table(columns=columns).to_pylist()),
        key=lambda row: (row["client_id"], row["writer_id"]),
    )


def _duplicates_counted(sink: Running) -> float:
    text = httpx.get(sink.http_url + "/metrics").text
    name = "telemetry_sink_forwarded_duplicates_total"
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _stopped(sink: Running) -> None:
    sink.process.send_signal(signal.SIGTERM)
    assert sink.process.wait(timeout=60) == 0


@pytest.fixture
def two_replicas(tmp_path: Path, extra: str) -> Iterator[tuple[Running, Running]]:
    with (
        running_sink(tmp_path, tmp_path / "data", "sink-a", extra) as a,
        running_sink(tmp_path, tmp_path / "data", "sink-b", extra) as b,
    ):
        yield a, b


def test_a_batch_sent_again_to_the_same_replica_lands_once_and_is_answered_as_landed(
    tmp_path: Path, extra: str, body: bytes
) -> None:
    with running_sink(tmp_path, tmp_path / "data", "sink-a", extra) as sink:
        for attempt in range(3):
            answer = _send(sink, body, f"forwarder=b1-4f2a; pushes=10-12; attempt={attempt}")
            assert answer.status_code == 200, answer.text
            assert ExportMetricsServiceResponse.FromString(answer.content) == ExportMetricsServiceResponse()
        assert _duplicates_counted(sink) == 2 * len(CLIENTS)
        _stopped(sink)
    assert [row["client_id"] for row in _landed(tmp_path / "data")] == ["app-0", "app-1", "app-2"]


def test_a_batch_resent_to_another_replica_lands_once_with_the_same_push_ids(
    tmp_path: Path, two_replicas: tuple[Running, Running], body: bytes
) -> None:
    a, b = two_replicas
    assert _send(a, body, "forwarder=b1-4f2a; pushes=0-2; attempt=0").status_code == 200
    first = _landed(tmp_path / "data")
    assert _send(b, body, "forwarder=b1-4f2a; pushes=0-2; attempt=1").status_code == 200
    assert _duplicates_counted(b) == len(CLIENTS)
    assert _send(b, body, "forwarder=b1-4f2a; pushes=3-5; attempt=0").status_code == 200  # the next batch
    landed = _landed(tmp_path / "data")
    assert [(row["client_id"], row["writer_id"]) for row in landed] == [
        (client.client_id, writer) for client in CLIENTS for writer in ("sink-a", "sink-b")
    ]
    assert {row["push_id"] for row in first} < {row["push_id"] for row in landed}


def test_a_batch_resent_to_a_restarted_replica_lands_once(tmp_path: Path, extra: str, body: bytes) -> None:
    data = tmp_path / "data"
    with running_sink(tmp_path, data, "sink-a", extra) as sink:
        assert _send(sink, body, "forwarder=b1-4f2a; pushes=0-2; attempt=0").status_code == 200
        _stopped(sink)
    with running_sink(tmp_path, data, "sink-a", extra) as sink:
        assert _send(sink, body, "forwarder=b1-4f2a; pushes=0-2; attempt=1").status_code == 200
        assert _duplicates_counted(sink) == len(CLIENTS)
        _stopped(sink)
    assert len(_landed(data)) == len(CLIENTS)


def test_only_a_trusted_forwarder_is_numbered_and_its_malformed_header_is_refused(
    tmp_path: Path, extra: str, body: bytes
) -> None:
    with running_sink(tmp_path, tmp_path / "data", "sink-a", extra) as sink:
        for _ in range(2):  # not trusted: the header is ignored, each send lands
            answer = _send(sink, body, "forwarder=x; pushes=0-2; attempt=1", token=OTHER_TOKEN)
            assert answer.status_code == 200
        malformed_headers = ("forwarder=b1; pushes=5-2; attempt=0", "pushes=0-2", "forwarder=a b; pushes=0-1")
        for malformed in malformed_headers:
            refused = _send(sink, body, malformed)
            assert refused.status_code == 400, malformed
            assert "x-telemetry-sink-forwarded-batch" in Status.FromString(refused.content).message
        _stopped(sink)
    assert len(_landed(tmp_path / "data")) == 2 * len(CLIENTS)
