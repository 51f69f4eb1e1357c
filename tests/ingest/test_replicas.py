"""Two real ``telemetry-sink serve`` processes on one data root: an admin change made on one replica
is applied by the other from the config log, without a restart; both land quota samples."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from subscriptions import Errors
from tests.support.kip714_grpc import get_and_push
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

TOKEN = "replica-test-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
EXTRA = """\
security:
  tokens_file: {tokens}
  super_users: ["User:admin"]
admin:
  config_log_poll_s: 0.1
exporter:
  quota_sample_period_s: 0.1
"""


async def eventually_listed(sink: Running, name: str) -> dict[str, object]:
    """Poll the replica's admin API until it has applied the subscription (bounded)."""
    async with httpx.AsyncClient(base_url=sink.http_url, headers=ADMIN) as http, asyncio.timeout(60):
        while True:
            listed = (await http.get("/admin/v1/subscriptions")).json()["subscriptions"]
            if name in listed:
                return dict(listed[name])
            await asyncio.sleep(0.05)


async def test_an_admin_change_on_one_replica_is_applied_by_the_other(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "User:admin"\n')
    extra = EXTRA.format(tokens=tokens)
    data = tmp_path / "data"
    with (
        running_sink(tmp_path, data, "sink-a", extra) as a,
        running_sink(tmp_path, data, "sink-b", extra) as b,
    ):
        async with httpx.AsyncClient(base_url=a.http_url, headers=ADMIN) as http:
            created = await http.put(
                "/admin/v1/subscriptions/producers",
                json={"metrics": ["org.apache.kafka.producer."], "interval.ms": 100},
            )
            assert created.json()["error"] == "NONE", created.text
            quota = await http.post(
                "/admin/v1/client-quotas/alter",
                json={
                    "entries": [
                        {
                            "entity": [{"entity_type": "client-id", "entity_name": None}],
                            "ops": [{"key": "producer_byte_rate", "value": 1}],
                        }
                    ]
                },
            )
            assert quota.json()["entries"][0]["error"] == "NONE"
        assert await eventually_listed(b, "producers") == {
            "metrics": ["org.apache.kafka.producer."],
            "interval.ms": 100,
        }
        async with httpx.AsyncClient(base_url=b.http_url, headers=ADMIN) as http, asyncio.timeout(60):
            while not (await http.get("/admin/v1/client-quotas")).json()["entries"]:  # the next change
                await asyncio.sleep(0.05)
        metadata = (("x-kafka-client-id", "replica-test"),)
        got, pushed = await get_and_push(b.grpc_port, metadata)
        assert got.push_interval_ms == 100
        assert "org.apache.kafka.producer." in got.requested_metrics
        assert pushed.error_code == Errors.NONE
        assert pushed.throttle_time_ms > 0  # the 1 B/s quota set on replica a throttles on replica b
        async with httpx.AsyncClient(base_url=b.http_url, headers=ADMIN) as http:
            changes = (await http.get("/admin/v1/config-log")).json()["changes"]
        assert [(c["kind"], c["replica_id"]) for c in changes] == [
            ("subscription", "sink-a"),
            ("client_quota", "sink-a"),
        ]
        for sink in (a, b):
            sink.process.send_signal(signal.SIGTERM)
        assert [await asyncio.to_thread(s.process.wait) for s in (a, b)] == [0, 0]
    samples = DeltaTable(str(data / "quota_samples" / "sink-b")).to_pyarrow_table().to_pylist()
    byte_rates = [s for s in samples if (s["group"], s["metric"]) == ("Produce", "byte-rate")]
    assert {s["entity"] for s in byte_rates} == {"client-id=replica-test,user="}
