"""One OTLP export that names a crowd of clients (T3-7, T3-6), end to end: a real ``telemetry-sink
serve`` on loopback, bearer tokens for a victim, an attacker (mallory) and a trusted forwarder, the
OpenTelemetry SDK's OTLP/HTTP exporter as the well-behaved client beside the attack, and a ``/healthz``
prober in a process of its own.

- T3-7: an export of 100,000 (or 16,384) point-labelled clients from a sender that is not a trusted
  forwarder is refused 413 / RESOURCE_EXHAUSTED without retry information, over HTTP and gRPC, and
  lands nothing; the well-behaved client's every push meanwhile is answered 200 and landed, and every
  probe is answered 200 within ``PROBE_BOUND_S`` (a generous bound: the stall was 5.7 s). An export at
  the cap lands one row per client. A trusted forwarder may carry more clients, up to its own cap.
- T3-6: mallory cannot evict the victim's instance binding, neither with one export of 16,384 new ids
  (refused) nor with many exports under the cap naming more new ids than the whole cache holds: her
  push as the victim's instance is still refused 403 / PERMISSION_DENIED, and the instance's rows
  are the victim's only.

Nothing waits for wall time: the well-behaved client pushes until the attack is over, and every
answer has a hang guard (``HANG_GUARD_S``) only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio
import pytest
import requests
from deltalake import DeltaTable
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from ingest.limits import DEFAULT_LIMITS
from ingest.wire import INSTANCE_ID_HEADER, METRICS_SERVICE, OTLP_METRICS_PATH
from subscriptions import kafka_uuid_string
from subscriptions.instance_cache import DEFAULT_CACHE_MAX_SIZE
from tests.support import attacks
from tests.support.otlp import sdk_metrics
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

HANG_GUARD_S: Final = 60.0
PROBE_BOUND_S: Final = 1.0
"""The slowest ``/healthz`` answer allowed during an attack: a generous bound on a shared machine,
not a timing goal (the benchmark's is 100 ms)."""
MIN_PUSHES: Final = 3
TOKENS: Final = {"victim": "t0k3n-victim", "mallory": "t0k3n-mallory", "forwarder": "t0k3n-forwarder"}
FORWARDER_CAP: Final = 2_500
"""``limits.max_clients_per_forwarder_export`` here: over the default cap of 1,000, small enough to land
quickly."""
CAP: Final = DEFAULT_LIMITS.max_clients_per_export
CROWD: Final = 100_000
CACHE_FULL: Final = DEFAULT_CACHE_MAX_SIZE  # 16,384: what one export used to evict
PROTOBUF: Final = {"Content-Type": "application/x-protobuf"}
RESOURCE_EXHAUSTED: Final = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Running]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("".join(f'"{token}": "User:{user}"\n' for user, token in TOKENS.items()))
    extra = f"""\
security:
  tokens_file: {tokens}
  trusted_forwarders: ["User:forwarder"]
limits:
  max_clients_per_forwarder_export: {FORWARDER_CAP}
exporter:
  options: {{max_batch_latency_ms: 20}}
  quota_sample_period_s: 0
"""
    with running_sink(tmp_path, tmp_path / "data", replica="fan-out", extra=extra) as running:
        yield running


def _bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[user]}"}


async def _post(
    sink: Running, body: bytes, headers: dict[str, str] | None = None, *, gzipped: bool = False
) -> tuple[int, bytes, dict[str, str]]:
    """One OTLP/HTTP export (in a thread: the test's loop stays free for the well-behaved client)."""
    all_headers = {**PROTOBUF, **(headers or {})}
    if gzipped:
        body, all_headers["Content-Encoding"] = gzip.compress(body), "gzip"

    def send() -> tuple[int, bytes, dict[str, str]]:
        answer = requests.post(
            f"{sink.http_url}{OTLP_METRICS_PATH}", data=body, headers=all_headers, timeout=HANG_GUARD_S
        )
        return answer.status_code, answer.content, dict(answer.headers)

    return await asyncio.to_thread(send)


async def _grpc_export(
    sink: Running, body: bytes, user: str | None = None, instance: str | None = None
) -> grpc.StatusCode:
    metadata = [] if user is None else [("authorization", f"Bearer {TOKENS[user]}")]
    if instance is not None:
        metadata.append((INSTANCE_ID_HEADER, instance))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        export: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        try:
            await export(body, metadata=tuple(metadata), timeout=HANG_GUARD_S)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def _assert_too_large(answer: tuple[int, bytes, dict[str, str]]) -> None:
    """413 with a ``google.rpc.Status`` RESOURCE_EXHAUSTED naming the limit, and no retry asked for."""
    status_code, body, headers = answer
    assert status_code == 413, (status_code, body[:300])
    assert "retry-after" not in {k.lower() for k in headers}
    status = Status.FromString(body)
    assert status.code == RESOURCE_EXHAUSTED, status
    assert "clients in one export (limits.max_clients_per_export" in status.message
    assert not any(detail.Is(RetryInfo.DESCRIPTOR) for detail in status.details)


def _rows(sink: Running) -> list[dict[str, Any]]:
    table = DeltaTable(sink.table_uri).to_pyarrow_table(
        columns=["client_instance_id", "principal", "client_id"]
    )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _kafka_ids(ids: list[uuid.UUID]) -> set[str]:
    return {kafka_uuid_string(i) for i in ids}


@dataclass
class _Fleet:
    """The well-behaved client: the SDK's OTLP/HTTP exporter (gzip), every attempt's status seen."""

    client_id: str = "good-otlp-http"
    accepted: int = 0
    refused: list[str] = field(default_factory=list)


async def _well_behaved(sink: Running, attack_over: asyncio.Event, fleet: _Fleet) -> None:
    session = requests.Session()
    statuses: list[int] = []
    session.hooks["response"].append(lambda response, *_, **__: statuses.append(response.status_code))
    exporter = OTLPMetricExporter(
        endpoint=f"{sink.http_url}{OTLP_METRICS_PATH}",
        headers={"x-kafka-client-id": fleet.client_id},
        timeout=HANG_GUARD_S,
        compression=Compression.Gzip,
        session=session,
    )
    try:
        while not attack_over.is_set() or fleet.accepted + len(fleet.refused) < MIN_PUSHES:
            result = await asyncio.to_thread(exporter.export, sdk_metrics("good-service"))
            if result is MetricExportResult.SUCCESS and statuses == [200]:
                fleet.accepted += 1
            else:
                fleet.refused.append(f"{result.name}, HTTP statuses {statuses}")
            statuses.clear()
    finally:
        exporter.shutdown()


@contextlib.asynccontextmanager
async def _beside_a_fleet(sink: Running) -> AsyncIterator[_Fleet]:
    """The well-behaved client and the prober run while the block (the attack) does; on leaving, both
    are checked: every push answered 200 at the first attempt and landed, every probe 200 and quick."""
    fleet, attack_over = _Fleet(), asyncio.Event()
    prober = attacks.HealthProber(sink.http_port).start()
    pushing = asyncio.create_task(_well_behaved(sink, attack_over, fleet))
    try:
        yield fleet
    finally:
        attack_over.set()
        try:
            await pushing
        finally:
            probes = prober.stop()
    assert fleet.refused == [], fleet.refused[:5]
    assert fleet.accepted >= MIN_PUSHES
    assert sum(row["client_id"] == fleet.client_id for row in _rows(sink)) == fleet.accepted
    assert probes, "the prober never completed a probe"
    assert [p for p in probes if p.status != 200] == []
    slowest = max(p.seconds for p in probes)
    assert slowest < PROBE_BOUND_S, f"/healthz took {slowest:.3f} s during the attack"


async def test_T3_7_a_crowd_of_clients_in_one_untrusted_export_is_refused_and_nobody_else_notices(
    sink: Running,
) -> None:
    crowd, cache_full = attacks.fan_out_points(CROWD, seed=1), attacks.fan_out_points(CACHE_FULL, seed=2)
    at_cap = attacks.fan_out_points(CAP, seed=3)
    async with _beside_a_fleet(sink):
        anonymous_crowd = await _post(sink, crowd, gzipped=True)
        anonymous_cache_full = await _post(sink, cache_full)
        over_grpc = await _grpc_export(sink, cache_full)
        over_grpc_authenticated = await _grpc_export(sink, cache_full, "mallory")
        at_the_cap = await _post(sink, at_cap, gzipped=True)
    for refused in (anonymous_crowd, anonymous_cache_full):
        _assert_too_large(refused)
    assert over_grpc is over_grpc_authenticated is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert at_the_cap[0] == 200, at_the_cap
    landed = [row["client_instance_id"] for row in _rows(sink)]
    assert not _kafka_ids(attacks.fan_out_ids(CROWD, seed=1) + attacks.fan_out_ids(CACHE_FULL, seed=2)) & set(
        landed
    )
    at_cap_ids = _kafka_ids(attacks.fan_out_ids(CAP, seed=3))
    assert sum(i in at_cap_ids for i in landed) == CAP  # one row per client, once


async def test_T3_7_a_trusted_forwarder_may_carry_more_clients_up_to_its_own_cap(sink: Running) -> None:
    forwarded = attacks.fan_out_points(FORWARDER_CAP, seed=4)
    assert (await _post(sink, forwarded, _bearer("forwarder"), gzipped=True))[0] == 200
    _assert_too_large(
        await _post(sink, attacks.fan_out_points(FORWARDER_CAP + 1, seed=5), _bearer("forwarder"))
    )
    _assert_too_large(await _post(sink, attacks.fan_out_points(CAP + 1, seed=6), _bearer("mallory")))
    assert (
        await _grpc_export(sink, attacks.fan_out_points(FORWARDER_CAP, seed=7), "forwarder")
        is grpc.StatusCode.OK
    )
    rows = _rows(sink)
    for seed in (4, 7):
        ids = _kafka_ids(attacks.fan_out_ids(FORWARDER_CAP, seed=seed))
        assert [row["principal"] for row in rows if row["client_instance_id"] in ids] == [
            "User:forwarder"
        ] * FORWARDER_CAP
    refused = _kafka_ids(
        attacks.fan_out_ids(FORWARDER_CAP + 1, seed=5) + attacks.fan_out_ids(CAP + 1, seed=6)
    )
    assert not refused & {row["client_instance_id"] for row in rows}


async def test_T3_6_mallory_cannot_evict_the_victims_instance_and_then_push_as_it(sink: Running) -> None:
    victims = str(uuid.uuid4())
    payload = encode_metrics(sdk_metrics("victim-service")).SerializeToString()
    as_victims = {INSTANCE_ID_HEADER: victims}
    assert (await _post(sink, payload, {**_bearer("victim"), **as_victims}))[0] == 200
    assert (await _post(sink, payload, {**_bearer("mallory"), **as_victims}))[0] == 403
    # one export of 16,384 new ids: refused outright (T3-7's cap)
    _assert_too_large(await _post(sink, attacks.fan_out_points(CACHE_FULL, seed=8), _bearer("mallory")))
    assert await _grpc_export(sink, attacks.fan_out_points(CACHE_FULL, seed=8), "mallory") is (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    # exports under the cap, naming more new ids than the whole cache holds: all hers, all landed
    for seed in range(100, 100 + CACHE_FULL // CAP + 1):
        status, body, _ = await _post(
            sink, attacks.fan_out_points(CAP, seed=seed), _bearer("mallory"), gzipped=True
        )
        assert status == 200, body[:300]
    answer = await _post(sink, payload, {**_bearer("mallory"), **as_victims})
    assert answer[0] == 403, answer
    assert Status.FromString(answer[1]).code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert await _grpc_export(sink, payload, "mallory", victims) is grpc.StatusCode.PERMISSION_DENIED
    assert (await _post(sink, payload, {**_bearer("victim"), **as_victims}))[0] == 200
    principals = [
        row["principal"]
        for row in _rows(sink)
        if row["client_instance_id"] == kafka_uuid_string(uuid.UUID(victims))
    ]
    assert principals == ["User:victim", "User:victim"]
