"""A KIP-714 client's first exchange with a sink over gRPC: Get, then one push of a payload captured
from librdkafka, with the instance id and subscription id the Get gave."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import grpc.aio

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc

__all__ = ["LIBRDKAFKA_PUSH", "get_and_push", "librdkafka_push"]

LIBRDKAFKA_PUSH: Final = (
    Path(__file__).resolve().parents[1] / "fixtures" / "librdkafka" / "librdkafka-producer-push001-zstd.bin"
)
"""A zstd-compressed librdkafka producer push (``compression_type`` 4)."""


def librdkafka_push(got: pb.GetTelemetrySubscriptionsResponse) -> pb.PushTelemetryRequest:
    """The captured librdkafka push, as the client the Get answered sends it."""
    return pb.PushTelemetryRequest(
        client_instance_id=got.client_instance_id,
        subscription_id=got.subscription_id,
        compression_type=4,
        metrics=LIBRDKAFKA_PUSH.read_bytes(),
    )


async def get_and_push(
    grpc_port: int, metadata: Sequence[tuple[str, str]]
) -> tuple[pb.GetTelemetrySubscriptionsResponse, pb.PushTelemetryResponse]:
    """The Get's answer and the push's answer, on one channel to 127.0.0.1:``grpc_port``."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = pb_grpc.ClientTelemetryStub(channel)  # type: ignore[no-untyped-call]
        got = await stub.GetTelemetrySubscriptions(pb.GetTelemetrySubscriptionsRequest(), metadata=metadata)
        pushed = await stub.PushTelemetry(librdkafka_push(got), metadata=metadata)
    return got, pushed
