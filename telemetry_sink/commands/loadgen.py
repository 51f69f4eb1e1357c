"""``telemetry-sink loadgen``: a simulated fleet of KIP-714 clients (``loadgen``) against a running sink,
and a summary of what it was answered.

The load generator is imported when the command is declared or runs, not when ``--help`` lists it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

__all__ = ["add_arguments"]


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """Declare ``telemetry-sink loadgen`` on ``parser``, with its ``run`` function as a default
    (``telemetry_sink.cli`` has already added ``--config``)."""
    _declare_loadgen(parser)


def _kinds(text: str) -> tuple[str, ...]:
    from loadgen import CLIENT_KINDS  # noqa: PLC0415 - see the module docstring

    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in CLIENT_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"client kinds are {', '.join(CLIENT_KINDS)}, got {text!r}")
    return kinds


def _declare_loadgen(loadgen: argparse.ArgumentParser) -> None:
    from loadgen import (  # noqa: PLC0415 - see the module docstring
        DEFAULT_GRPC_ADDRESS,
        DEFAULT_HTTP_ADDRESS,
        DEFAULT_OTLP_INTERVAL_MS,
    )

    loadgen.description = (
        "Simulate N Kafka clients in one process: each asks GetTelemetrySubscriptions, then "
        "pushes librdkafka-shaped OTLP metrics (filtered to the subscription, compressed with the first "
        "codec it accepts) at the returned interval, honours throttle times, re-Gets on "
        "UNKNOWN_SUBSCRIPTION_ID, stops on the codes Kafka clients treat as fatal, and sends a "
        "terminating push at the end. Exits 0 when at least one push was accepted, 1 when none was or "
        "the target is unreachable. Ctrl-C ends the run early (terminating pushes and summary included)."
    )
    loadgen.add_argument(
        "--clients", type=int, default=10, metavar="N", help="simulated clients (default: 10)"
    )
    loadgen.add_argument(
        "--duration", type=float, default=20.0, metavar="S", help="seconds to run (default: 20)"
    )
    loadgen.add_argument(
        "--target",
        choices=("grpc", "http", "otlp"),
        default="grpc",
        help="grpc: the ClientTelemetry service; http: the KIP-714 JSON endpoints; otlp: OTLP gRPC "
        "MetricsService/Export, no subscriptions (default: grpc)",
    )
    loadgen.add_argument(
        "--grpc",
        metavar="HOST:PORT",
        help="gRPC address for the grpc and otlp targets (default: localhost at --config's "
        f"server.grpc_port; without --config {DEFAULT_GRPC_ADDRESS})",
    )
    loadgen.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="HTTP address or URL for the http target (default: localhost at --config's "
        f"server.http_port; without --config {DEFAULT_HTTP_ADDRESS})",
    )
    loadgen.add_argument(
        "--seed", type=int, default=0, help="makes values and jitter repeatable (default: 0)"
    )
    loadgen.add_argument(
        "--compression",
        choices=("auto", "zstd", "lz4", "gzip", "snappy", "none"),
        default="auto",
        help="auto: the first type the subscription accepts (otlp: none); else always this one",
    )
    loadgen.add_argument(
        "--interval-ms",
        type=int,
        metavar="MS",
        help="push at this interval instead of the subscription's (faster pushes are answered "
        f"THROTTLING_QUOTA_EXCEEDED); for otlp the export interval (default: {DEFAULT_OTLP_INTERVAL_MS})",
    )
    loadgen.add_argument(
        "--kinds",
        type=_kinds,
        default=("producer", "consumer"),
        metavar="KIND,...",
        help="client kinds, assigned in turn (default: producer,consumer)",
    )
    loadgen.add_argument(
        "--client-id-prefix", default="loadgen", help="client ids are <prefix>-<kind>-<n> (default: loadgen)"
    )
    loadgen.add_argument(
        "--ramp-up", type=float, default=0.0, metavar="S", help="spread client starts over S seconds"
    )
    loadgen.add_argument(
        "--connect-timeout", type=float, default=5.0, metavar="S", help="to reach the target (default: 5)"
    )
    loadgen.add_argument(
        "--close-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="longest wait for a throttle before the terminating push (default: 5)",
    )
    loadgen.add_argument(
        "--tls-ca-file", metavar="FILE", help="connect with TLS, trusting this CA (PEM); default: plaintext"
    )
    loadgen.add_argument("--tls-cert-file", metavar="FILE", help="client certificate (PEM) for mTLS")
    loadgen.add_argument("--tls-key-file", metavar="FILE", help="its private key (PEM)")
    loadgen.add_argument(
        "--token-file",
        metavar="FILE",
        help="send Authorization: Bearer <the file's content> (a file keeps the token out of ps)",
    )
    loadgen.add_argument("--json", action="store_true", help="print the summary as JSON")
    loadgen.set_defaults(run=_loadgen)


def _targets(args: argparse.Namespace) -> tuple[str, str]:
    """The gRPC and HTTP addresses: the flags, else the ports of ``--config`` on this host, else the
    loadgen's defaults; SinkConfigError for a bad file."""
    from ingest.config import SinkConfig  # noqa: PLC0415 - see the module docstring
    from loadgen import DEFAULT_GRPC_ADDRESS, DEFAULT_HTTP_ADDRESS  # noqa: PLC0415

    if args.config is None:
        return args.grpc or DEFAULT_GRPC_ADDRESS, args.http or DEFAULT_HTTP_ADDRESS
    server = SinkConfig.load(args.config).server
    return args.grpc or f"localhost:{server.grpc_port}", args.http or f"localhost:{server.http_port}"


def _loadgen(args: argparse.Namespace) -> int:
    from ingest.config import SinkConfigError  # noqa: PLC0415 - see the module docstring
    from loadgen import (  # noqa: PLC0415
        Credentials,
        LoadgenOptions,
        Summary,
        TargetUnreachableError,
        run_loadgen,
    )

    try:
        grpc_address, http_address = _targets(args)
    except SinkConfigError as exc:
        print(f"telemetry-sink loadgen: {exc}", file=sys.stderr)
        return 2
    token = None
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as file:
                token = file.read().strip()
        except OSError as exc:
            print(f"telemetry-sink loadgen: cannot read --token-file: {exc}", file=sys.stderr)
            return 2
        if not token:
            print("telemetry-sink loadgen: --token-file is empty", file=sys.stderr)
            return 2
    options = LoadgenOptions(
        clients=args.clients,
        duration_s=args.duration,
        target=args.target,
        grpc_address=grpc_address,
        http_address=http_address,
        seed=args.seed,
        compression=args.compression,
        interval_ms=args.interval_ms,
        kinds=args.kinds,
        client_id_prefix=args.client_id_prefix,
        ramp_up_s=args.ramp_up,
        connect_timeout_s=args.connect_timeout,
        close_timeout_s=args.close_timeout,
        credentials=Credentials(args.tls_ca_file, args.tls_cert_file, args.tls_key_file, token),
    )
    problems = options.validate()
    if problems:
        print(f"telemetry-sink loadgen: {'; '.join(problems)}", file=sys.stderr)
        return 2

    async def run() -> Summary:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(RuntimeError, NotImplementedError):  # not the main thread, or no signals
                loop.add_signal_handler(signum, stop.set)
        return await run_loadgen(options, stop=stop)

    try:
        summary = asyncio.run(run())
    except TargetUnreachableError as exc:
        print(f"telemetry-sink loadgen: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary.as_dict()) if args.json else summary.render(), flush=True)
    if summary.pushes_accepted == 0:
        why = f" ({summary.first_transport_error})" if summary.first_transport_error else ""
        print(f"telemetry-sink loadgen: no push was accepted{why}", file=sys.stderr)
        return 1
    return 0
