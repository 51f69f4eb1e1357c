"""The sink's Delta tables on S3 (moto's real S3 server on loopback): the store's conditional put that
makes concurrent commits safe, the landing exporter, the config log with two replicas writing at once,
``telemetry-sink maintain``, and the storage options the configuration refuses."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from deltalake import DeltaTable

from exporters import DeltaLandingExporter, ExportResult, list_shards, shard_uri
from exporters.delta.object_store import arrow_filesystem
from ingest.admin.config_log import ConfigLog, SubscriptionChange
from ingest.config import SinkConfig, SinkConfigError
from telemetry_sink.cli import main
from tests.support.otlp import push
from tests.support.s3 import ACCESS_KEY, REGION, S3, SECRET_KEY

pytestmark = pytest.mark.integration


def test_the_store_refuses_a_second_put_if_absent_of_one_key(s3: S3) -> None:
    """What delta-rs' commits rely on: the second writer of a log version gets 412, not an overwrite."""
    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    bucket, key = s3.bucket().removeprefix("s3://"), "t/_delta_log/00000000000000000000.json"
    client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


async def _land(table_uri: str, s3: S3, writer_id: str, ids: range) -> DeltaLandingExporter:
    exporter = DeltaLandingExporter(
        table_uri, storage_options=s3.storage_options, writer_id=writer_id, max_batch_rows=5
    )
    await exporter.start()
    results = await asyncio.gather(*(exporter.export(push(n, push_id=f"p-{n}")) for n in ids))
    await exporter.shutdown()
    assert set(results) == {ExportResult.SUCCESS}
    return exporter


def _push_ids(table_uri: str, s3: S3) -> list[str]:
    table = DeltaTable(table_uri, storage_options=s3.storage_options)
    ids: list[str] = table.to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
    return sorted(ids)


async def test_pushes_land_in_a_shard_on_s3_and_a_restarted_writer_appends_to_it(
    s3: S3, s3_root: str
) -> None:
    table_uri = shard_uri(s3_root, "telemetry_pushes", "sink-0")
    first = await _land(table_uri, s3, "sink-0", range(12))
    assert first.commits >= 3  # batches of at most 5 rows
    again = await _land(table_uri, s3, "sink-0", range(12, 20))  # the same writer id after a restart
    assert again.commits >= 2
    assert _push_ids(table_uri, s3) == sorted(f"p-{n}" for n in range(20))  # each once
    assert list_shards(s3_root, "telemetry_pushes", s3.storage_options) == [table_uri]


def test_two_replicas_appending_to_the_config_log_at_once_lose_nothing(s3: S3, s3_root: str) -> None:
    """Every replica writes the one config log: concurrent commits race for each log version, the
    store's conditional put lets one win, the other retries on the next version."""
    uri = f"{s3_root}/config_log"
    changes_each = 6
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def replica(name: str) -> None:
        log = ConfigLog(uri, replica_id=name, storage_options=s3.storage_options)
        try:
            start.wait(timeout=30)
            for n in range(changes_each):
                log.append([SubscriptionChange(f"{name}-{n}", {"metrics": "org.apache.kafka."})], "User:a", n)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(name,)) for name in ("sink-0", "sink-1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    reader = ConfigLog(uri, replica_id="reader", storage_options=s3.storage_options)
    latest, records = reader.read_since(-1)
    names = sorted(r.change.name for r in records if isinstance(r.change, SubscriptionChange))
    assert names == sorted(f"{r}-{n}" for r in ("sink-0", "sink-1") for n in range(changes_each))
    offsets = [r.version for r in records]
    assert len(set(offsets)) == len(offsets)  # one change per commit: no commit overwrote another
    assert latest == max(offsets)


def test_maintain_compacts_every_shard_on_s3(
    s3: S3, s3_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``telemetry-sink maintain`` finds the shards on the store with the storage options it is given."""
    shards = [shard_uri(s3_root, "telemetry_pushes", r) for r in ("sink-0", "sink-1")]
    for n, uri in enumerate(shards):
        asyncio.run(_land(uri, s3, f"sink-{n}", range(10 * n, 10 * n + 10)))
    options = [f"--storage-option={k}={v}" for k, v in s3.storage_options.items()]
    status = main(
        ["maintain", "--data-root", s3_root, "--table", "telemetry_pushes", "--no-vacuum", *options]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    reports: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
    assert [r["table_uri"] for r in reports] == shards
    for report, uri in zip(reports, shards, strict=True):
        assert report["files_removed_by_compaction"] >= 2
        assert report["files_added_by_compaction"] == 1
        assert report["checkpoint_version"] == report["version_after"] > report["version_before"]
        table = DeltaTable(uri, storage_options=s3.storage_options)
        assert len(table.file_uris()) == 1
    assert sorted(_push_ids(shards[0], s3) + _push_ids(shards[1], s3)) == sorted(f"p-{n}" for n in range(20))
    fs, root = arrow_filesystem(shards[0], s3.storage_options)
    assert fs.get_file_info(f"{root}/_delta_log/_last_checkpoint").size


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("AWS_S3_LOCKING_PROVIDER", "dynamodb", "not supported by deltalake 1.x"),
        ("DELTA_DYNAMO_TABLE_NAME", "delta_log", "not supported by deltalake 1.x"),
        ("aws_conditional_put", "disabled", "aws_conditional_put must be etag"),
        ("AWS_S3_ALLOW_UNSAFE_RENAME", "true", "overwrite each other's commit"),
    ],
)
def test_an_s3_data_root_refuses_options_that_make_commits_unsafe(
    option: str, value: str, reason: str
) -> None:
    document = {
        "data_root": "s3://lake/telemetry",
        "storage_options": {"AWS_REGION": "eu-west-1", option: value},
    }
    with pytest.raises(SinkConfigError) as refused:
        SinkConfig.from_document(document)
    assert any(option.upper() in p.upper() and reason in p for p in refused.value.problems), refused.value
    # the same options mean nothing to a local data root, and conditional put is delta-rs' default on S3
    assert SinkConfig.from_document({**document, "data_root": "data"}).storage_options[option] == value
    accepted = SinkConfig.from_document(
        {"data_root": "s3://lake/t", "storage_options": {"aws_conditional_put": "etag"}}
    )
    assert accepted.data_root == "s3://lake/t"


def test_an_unsafe_option_from_the_environment_is_refused_too() -> None:
    with pytest.raises(SinkConfigError, match="AWS_S3_LOCKING_PROVIDER"):
        SinkConfig.load(
            env={
                "TELEMETRY_SINK_DATA_ROOT": "s3a://lake/telemetry",
                "TELEMETRY_SINK_STORAGE_OPTIONS__AWS_S3_LOCKING_PROVIDER": "dynamodb",
            }
        )


@pytest.mark.parametrize("command", ["maintain", "rollup"])
def test_maintain_and_rollup_refuse_unsafe_storage_options_before_touching_a_table(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        command,
        "--data-root",
        "s3://lake/telemetry",
        "--storage-option",
        "AWS_S3_LOCKING_PROVIDER=dynamodb",
    ]
    assert main(argv) == 2
    assert "AWS_S3_LOCKING_PROVIDER is not supported by deltalake 1.x" in capsys.readouterr().err
