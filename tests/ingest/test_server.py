"""``telemetry-sink serve`` as a real process: both ports, a librdkafka push and an OTLP SDK push
landing in Delta, SIGTERM; the open-file limit it raises at start, and shares among its listeners
when too low (F9)."""

from __future__ import annotations

import contextlib
import gc
import re
import resource
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import grpc
import httpx
import pytest
from deltalake import DeltaTable
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.server import freeze_start_up_objects
from ingest.transports.descriptors import descriptors_in_use
from subscriptions import Errors, kafka_uuid_string
from tests.support.kip714_grpc import librdkafka_push
from tests.support.otlp import sdk_metrics
from tests.support.process import CLI, Running, run_isolated, running_sink

pytestmark = pytest.mark.integration

SUBSCRIPTION = 'subscriptions:\n  kafka-client-metrics: {metrics: "org.apache.kafka.", interval.ms: 30000}\n'


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Running]:
    with running_sink(tmp_path, tmp_path / "data", extra=SUBSCRIPTION) as running:
        yield running


def test_serve_answers_both_ports_lands_a_push_and_exits_0_on_sigterm(sink: Running) -> None:
    ready = httpx.get(f"http://127.0.0.1:{sink.http_port}/readyz")
    assert ready.status_code == 200
    metadata = (("x-kafka-client-id", "rdkafka"), ("x-kafka-client-software-name", "librdkafka"))
    with grpc.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=metadata)
        assert (got.error_code, got.push_interval_ms) == (Errors.NONE, 30000)
        pushed = stub.PushTelemetry(
            librdkafka_push(got),
            metadata=metadata,
        )
        assert pushed.error_code == Errors.NONE
    otlp = OTLPMetricExporter(endpoint=f"127.0.0.1:{sink.grpc_port}", insecure=True)
    assert otlp.export(sdk_metrics("svc")) is MetricExportResult.SUCCESS
    otlp.shutdown()
    sink.process.send_signal(signal.SIGTERM)
    assert sink.process.wait(timeout=60) == 0
    rows = DeltaTable(sink.table_uri).to_pyarrow_table().to_pylist()
    kip714 = [row for row in rows if row["subscription_id"] != 0]
    assert [row["client_instance_id"] for row in kip714] == [
        kafka_uuid_string(UUID(bytes=got.client_instance_id))
    ]
    assert kip714[0]["client_id"] == "rdkafka"
    assert len(rows) == 2  # and the OTLP push


def test_serve_rejects_a_bad_config_with_exit_2_and_says_why(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server: {grpc_port: 70000}\n")
    command = [CLI, "serve", "--config", str(config)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "server.grpc_port must be a port number" in done.stderr


def test_F9_serve_raises_the_soft_open_file_limit_to_the_hard_one(tmp_path: Path) -> None:
    """Started with a soft limit of 512, the sink runs with the hard one: its sockets up to the
    connection limits must not leave its own files (Delta commits) failing with EMFILE."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 512:
        pytest.skip("needs a finite hard open-file limit above 512")
    with running_sink(tmp_path, tmp_path / "data", extra=SUBSCRIPTION, open_files=(512, hard)) as sink:
        limits = Path(f"/proc/{sink.process.pid}/limits").read_text()  # serving: raised already
    open_files = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert open_files.split()[3:5] == [str(hard), str(hard)]


def _kafka_api_versions(port: int) -> int:
    """The error code of a Kafka ApiVersions v0 answer on a fresh connection."""
    client_id = b"fd-test"
    request = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", port), timeout=30) as kafka:
        kafka.sendall(struct.pack(">i", len(request)) + request)
        head = b""
        while len(head) < 10:
            chunk = kafka.recv(10 - len(head))
            assert chunk, "the Kafka listener closed the connection"
            head += chunk
    _, correlation_id, error_code = struct.unpack(">iih", head)
    assert correlation_id == 7
    return int(error_code)


FLOOD = 1100
"""Sockets from one IP: more than the sink's whole limit, as many as its per-IP limit (1,000) lets in
and its gate lets wait."""


def _skip_unless_open_files(count: int) -> None:
    """The flood holds ``count`` descriptors in this process (whose soft limit tests/conftest.py raised
    to the hard one)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < count:
        pytest.skip(f"the flood needs {count} open files; this host's hard limit is {soft}")


def test_F9_with_1024_open_files_a_flood_on_one_port_leaves_the_others_and_the_commits_working(
    tmp_path: Path,
) -> None:
    """Hard limit 1,024: the default connection limits would let one IP's idle sockets take every
    descriptor (each accept then failing with EMFILE, nobody served). The listeners get shares of the
    limit, said once at start; the flood fills only the HTTP share."""
    with running_sink(tmp_path, tmp_path / "data", extra=SUBSCRIPTION, open_files=1024) as sink:
        said = sink.log.read_text()
        assert "The open-file limit (1,024) leaves" in said
        assert re.search(r"GRPC [\d,]+ \(of 10,000\), HTTP [\d,]+ \(of 11,000\), KAFKA", said)
        _skip_unless_open_files(descriptors_in_use() + FLOOD + 100)
        with contextlib.ExitStack() as flood:  # one IP's idle sockets, closed at the end of the block
            for _ in range(FLOOD):
                flood.enter_context(socket.create_connection(("127.0.0.1", sink.http_port), timeout=30))
            opened = len(list(Path(f"/proc/{sink.process.pid}/fd").iterdir()))
            assert opened < 1024 - 200  # the rest of the descriptors are the other listeners' and its own

            otlp = OTLPMetricExporter(endpoint=f"127.0.0.1:{sink.grpc_port}", insecure=True)
            assert otlp.export(sdk_metrics("svc")) is MetricExportResult.SUCCESS  # landed: a Delta commit
            otlp.shutdown()
            assert _kafka_api_versions(sink.kafka_port) == Errors.NONE
        deadline = time.monotonic() + 60
        while (ready := _ready(sink)) != 200:  # the HTTP port serves again once the flood has gone
            assert time.monotonic() < deadline, ready
            time.sleep(0.05)  # a poll, not a wait for time: the loop ends once the port answers
        sink.process.send_signal(signal.SIGTERM)
        assert sink.process.wait(timeout=60) == 0
    said = sink.log.read_text()
    assert "Too many open files" not in said
    assert said.count("The open-file limit") == 1
    assert len(DeltaTable(sink.table_uri).to_pyarrow_table()) == 1


def _ready(sink: Running) -> int | str:
    try:
        return httpx.get(f"{sink.http_url}/readyz", timeout=10).status_code
    except httpx.TransportError as exc:
        return repr(exc)


def test_start_up_objects_are_frozen_out_of_every_later_full_collection() -> None:
    """A full collection walks every tracked object; what start-up made (modules, schemas) lives as
    long as the process, so serve freezes it: later collections walk only what serving made. Run in a
    fresh interpreter: the freeze count falls whenever any thread frees a frozen object."""
    frozen = run_isolated(_freeze_the_imported_sink)
    assert isinstance(frozen, dict)
    assert frozen["frozen"] > 10_000  # the import-time world: most of the process
    assert frozen["oldest_generation_after"] <= frozen["oldest_generation_before"]  # no longer there
    assert frozen["made_later_is_tracked"]  # what serving makes is collected as usual


def _freeze_the_imported_sink() -> dict[str, object]:
    """``freeze_start_up_objects`` in a process that imported the sink, and what it did (``run_isolated``)."""
    alive = gc.get_count()
    frozen = freeze_start_up_objects()
    made_later = [[index] for index in range(1000)]
    return {
        "frozen": frozen,
        "oldest_generation_before": alive[2],
        "oldest_generation_after": gc.get_count()[2],
        "made_later_is_tracked": gc.is_tracked(made_later[0]),
    }
