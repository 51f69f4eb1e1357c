"""``telemetry-sink serve``: run the sink (``ingest.server``) from its YAML configuration until SIGTERM or
SIGINT.

The sink's modules are imported when the command runs, not when it is declared: ``--help`` imports none.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

__all__ = ["add_arguments"]


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """Declare ``telemetry-sink serve`` on ``parser``, with its ``run`` function as a default
    (``telemetry_sink.cli`` has already added ``--config``)."""
    _declare_serve(parser)


def _declare_serve(parser: argparse.ArgumentParser) -> None:
    from ingest.config import KafkaListenerConfig, ServerConfig  # noqa: PLC0415 - see the module docstring

    server, kafka = ServerConfig(), KafkaListenerConfig()
    parser.description = (
        "Run the sink until SIGTERM or SIGINT. Without --config it uses the embedded default (data "
        f"root ./data; gRPC on port {server.grpc_port}, HTTP on {server.http_port}, the Kafka listener "
        f"on {kafka.port}; a subscription to every Kafka client metric); TELEMETRY_SINK_* environment "
        "variables override any setting (see docs/ingest.md)."
    )
    parser.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    from ingest.config import SinkConfig, SinkConfigError  # noqa: PLC0415 - see the module docstring
    from ingest.server import serve  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = SinkConfig.load(args.config)
    except SinkConfigError as exc:
        print(f"telemetry-sink serve: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(config))
