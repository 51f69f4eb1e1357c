"""The ceiling of ``bench.py``: a ``grpc.aio`` server of the same ``ClientTelemetry`` service (same
proto, same generated code, same server options as the sink) that answers every request at once.

GetTelemetrySubscriptions answers a fresh instance id and a fixed subscription; PushTelemetry answers
error code 0. What it costs is gRPC plus Python: everything the sink does beyond that is the sink's.

Run by ``bench.py``; alone: ``.venv/bin/python benchmarks/push_path/noop_server.py [--port N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid

import grpc
import grpc.aio

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc

Context = grpc.aio.ServicerContext[object, object]


class NoopClientTelemetry(pb_grpc.ClientTelemetryServicer):
    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms

    async def GetTelemetrySubscriptions(  # noqa: N802 - gRPC's method name
        self, request: pb.GetTelemetrySubscriptionsRequest, context: Context
    ) -> pb.GetTelemetrySubscriptionsResponse:
        return pb.GetTelemetrySubscriptionsResponse(
            client_instance_id=request.client_instance_id or uuid.uuid4().bytes,
            subscription_id=422777291,
            accepted_compression_types=[4, 3, 2, 1],
            push_interval_ms=self.interval_ms,
            telemetry_max_bytes=1048576,
            delta_temporality=True,
            requested_metrics=["org.apache.kafka."],
        )

    async def PushTelemetry(  # noqa: N802 - gRPC's method name
        self, request: pb.PushTelemetryRequest, context: Context
    ) -> pb.PushTelemetryResponse:
        return pb.PushTelemetryResponse()


async def serve(port: int, interval_ms: int) -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    pb_grpc.add_ClientTelemetryServicer_to_server(NoopClientTelemetry(interval_ms), server)  # type: ignore[no-untyped-call]
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"noop serving gRPC on 127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval-ms", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.interval_ms))


if __name__ == "__main__":
    main()
