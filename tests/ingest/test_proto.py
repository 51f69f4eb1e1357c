"""The ClientTelemetry .proto: generated code up to date, and Kafka's fields one to one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import grpc
import grpc.aio
import pytest

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from subscriptions import messages
from tests.support.paths import REPO

GENERATED = ["client_telemetry_pb2.py", "client_telemetry_pb2.pyi", "client_telemetry_pb2_grpc.py"]
# the generator stamps its own version; a compatible grpcio-tools may differ in these lines only
_VERSION_LINES = re.compile(
    r"^.*(Protobuf Python Version|GRPC_GENERATED_VERSION|ValidateProtobufRuntimeVersion).*$", re.M
)


def test_checked_in_generated_code_is_not_stale(tmp_path: Path) -> None:
    outputs = [f"--{kind}_out={tmp_path}" for kind in ("python", "pyi", "grpc_python")]
    proto = str(REPO / "ingest" / "proto" / "client_telemetry.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO), *outputs, proto], check=True)
    for name in GENERATED:
        fresh = (tmp_path / "ingest" / "proto" / name).read_text()
        checked_in = (REPO / "ingest" / "proto" / name).read_text()
        assert _VERSION_LINES.sub("", fresh) == _VERSION_LINES.sub("", checked_in), (
            f"run `make proto`: {name}"
        )


@pytest.mark.parametrize(
    ("proto_message", "kafka_message"),
    [
        (pb.GetTelemetrySubscriptionsRequest, messages.GetTelemetrySubscriptionsRequest),
        (pb.GetTelemetrySubscriptionsResponse, messages.GetTelemetrySubscriptionsResponse),
        (pb.PushTelemetryRequest, messages.PushTelemetryRequest),
        (pb.PushTelemetryResponse, messages.PushTelemetryResponse),
    ],
)
def test_RPC_1_RPC_2_messages_mirror_kafkas_fields_in_order(proto_message: type, kafka_message: type) -> None:
    fields = [f.name for f in proto_message.DESCRIPTOR.fields]  # type: ignore[attr-defined]
    assert fields == list(kafka_message._fields)  # type: ignore[attr-defined]


class Echo(pb_grpc.ClientTelemetryServicer):
    async def PushTelemetry(
        self, request: pb.PushTelemetryRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.PushTelemetryResponse:
        return pb.PushTelemetryResponse(
            throttle_time_ms=len(request.metrics), error_code=request.compression_type
        )


@pytest.mark.integration
async def test_generated_stubs_talk_over_a_real_channel() -> None:
    server = grpc.aio.server()
    pb_grpc.add_ClientTelemetryServicer_to_server(Echo(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
            request = pb.PushTelemetryRequest(
                client_instance_id=bytes(16), compression_type=4, metrics=b"abc"
            )
            response = await stub.PushTelemetry(request)
            assert (response.throttle_time_ms, response.error_code) == (3, 4)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest())
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)
