"""Two real ``telemetry-sink serve`` processes with ``data_root: s3://...``: admin changes made on
both replicas at the same moment both land in the one config log and reach both replicas; a push
lands in its replica's shard on the store; quota samples too."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from subscriptions import Errors
from tests.ingest.test_replicas import ADMIN, EXTRA, TOKEN, eventually_listed
from tests.support.kip714_grpc import get_and_push
from tests.support.process import running_sink
from tests.support.s3 import S3

pytestmark = pytest.mark.integration


async def test_two_sinks_on_s3_share_changes_made_at_once_and_land_pushes(
    tmp_path: Path, s3: S3, s3_root: str
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f'"{TOKEN}": "User:admin"\n')
    options = "".join(f'  {k}: "{v}"\n' for k, v in s3.storage_options.items())
    extra = EXTRA.format(tokens=tokens) + f"storage_options:\n{options}"
    with (
        running_sink(tmp_path, s3_root, "sink-a", extra) as a,
        running_sink(tmp_path, s3_root, "sink-b", extra) as b,
    ):

        async def subscribe(url: str, name: str) -> str:
            async with httpx.AsyncClient(base_url=url, headers=ADMIN) as http:
                answer = await http.put(f"/admin/v1/subscriptions/{name}", json={"metrics": [f"{name}."]})
            return str(answer.json()["error"])

        assert list(
            await asyncio.gather(subscribe(a.http_url, "from-a"), subscribe(b.http_url, "from-b"))
        ) == [
            "NONE",
            "NONE",
        ]
        for sink in (a, b):
            for name in ("from-a", "from-b"):
                assert await eventually_listed(sink, name) == {"metrics": [f"{name}."]}
        metadata = (("x-kafka-client-id", "s3-test"),)
        _, pushed = await get_and_push(b.grpc_port, metadata)
        assert pushed.error_code == Errors.NONE
        for sink in (a, b):
            sink.process.send_signal(signal.SIGTERM)
        assert [await asyncio.to_thread(s.process.wait) for s in (a, b)] == [0, 0]
    store = s3.storage_options
    landed = DeltaTable(f"{s3_root}/telemetry_pushes/sink-b", storage_options=store).to_pyarrow_table()
    assert landed.column("client_id").to_pylist() == ["s3-test"]
    log = DeltaTable(f"{s3_root}/config_log", storage_options=store).to_pyarrow_table().to_pylist()
    assert sorted((r["subscription"], r["replica_id"]) for r in log) == [
        ("from-a", "sink-a"),
        ("from-b", "sink-b"),
    ]
    for replica in ("sink-a", "sink-b"):
        samples = DeltaTable(f"{s3_root}/quota_samples/{replica}", storage_options=store)
        assert samples.version() >= 0
