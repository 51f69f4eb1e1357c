"""``run_loadgen``: checks the target is reachable, runs the fleet until the duration ends (or
``stop`` is set) and returns a ``Summary``; ``LoadgenOptions`` describes one run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadgen.clients import (
    Kip714Client,
    LoadStats,
    OtlpClient,
    RequestRecord,
    Summary,
)
from loadgen.payloads import (
    _COMPRESSION_NAMES,
    CLIENT_KINDS,
    DEFAULT_GRPC_ADDRESS,
    DEFAULT_HTTP_ADDRESS,
    DEFAULT_OTLP_INTERVAL_MS,
    CompressionChoice,
    Target,
    client_identity,
)
from loadgen.transports import Credentials, GrpcTransport, HttpTransport, OtlpGrpcTransport
from quotas import Clock, SystemClock
from subscriptions import (
    CompressionType,
)


@dataclass(frozen=True, slots=True)
class LoadgenOptions:
    """One run: how many clients, how long, where to, and how they behave."""

    clients: int = 10
    duration_s: float = 20.0
    target: Target = "grpc"
    grpc_address: str = DEFAULT_GRPC_ADDRESS
    http_address: str = DEFAULT_HTTP_ADDRESS
    seed: int = 0
    compression: CompressionChoice = "auto"
    interval_ms: int | None = None
    """KIP-714 targets: push at this interval instead of the subscription's (pushes faster than the
    subscription allows are answered THROTTLING_QUOTA_EXCEEDED); OTLP: the export interval."""
    kinds: tuple[str, ...] = ("producer", "consumer")
    client_id_prefix: str = "loadgen"
    ramp_up_s: float = 0.0
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    close_timeout_s: float = 5.0
    credentials: Credentials = field(default_factory=Credentials)

    @property
    def address(self) -> str:
        return self.http_address if self.target == "http" else self.grpc_address

    def validate(self) -> list[str]:
        """Every problem, empty when the options are usable."""
        problems = []
        if self.clients < 1:
            problems.append("--clients must be at least 1")
        if not self.duration_s > 0:
            problems.append("--duration must be positive")
        if self.target not in ("grpc", "http", "otlp"):
            problems.append(f"--target must be grpc, http or otlp, not {self.target!r}")
        if self.compression != "auto" and self.compression not in _COMPRESSION_NAMES:
            problems.append(f"unknown --compression {self.compression!r}")
        if self.target == "otlp" and self.compression not in ("auto", "gzip", "none"):
            problems.append("the otlp target compresses with gzip or none (gRPC's own encodings)")
        if self.interval_ms is not None and self.interval_ms < 1:
            problems.append("--interval-ms must be positive")
        tls = self.credentials
        if (tls.tls_cert_file is None) != (tls.tls_key_file is None):
            problems.append("--tls-cert-file and --tls-key-file go together")
        if tls.tls_cert_file is not None and not tls.tls:
            problems.append("a client certificate needs --tls-ca-file (the sink's CA)")
        problems += [f"unknown client kind {kind!r}" for kind in self.kinds if kind not in CLIENT_KINDS]
        if not self.kinds:
            problems.append("at least one client kind is needed")
        for name in ("ramp_up_s", "connect_timeout_s", "request_timeout_s", "close_timeout_s"):
            if getattr(self, name) < 0:
                problems.append(f"--{name[:-2].replace('_', '-')} must not be negative")
        return problems


def _client_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


async def run_loadgen(
    options: LoadgenOptions,
    *,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    observer: Callable[[RequestRecord], None] | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> Summary:
    """Run the fleet against the target until ``options.duration_s`` has passed on ``clock`` (or ``stop``
    is set: the clients then send their terminating pushes at once). Raise ``TargetUnreachableError``
    when the target does not answer before the run."""
    problems = options.validate()
    if problems:
        raise ValueError("; ".join(problems))
    clock = clock or SystemClock()
    stop = stop or asyncio.Event()
    stats = LoadStats(observer)
    timeout = options.request_timeout_s
    transport: GrpcTransport | HttpTransport | OtlpGrpcTransport
    otlp_compression = CompressionType.GZIP if options.compression == "gzip" else CompressionType.NONE
    credentials = options.credentials
    if options.target == "grpc":
        transport = GrpcTransport(options.grpc_address, timeout, credentials)
    elif options.target == "http":
        connections = min(options.clients, 100)
        transport = HttpTransport(options.http_address, timeout, connections, credentials)
    else:
        transport = OtlpGrpcTransport(options.grpc_address, timeout, otlp_compression, credentials)
    try:
        await transport.check(options.connect_timeout_s)
        start = clock.now_ms()
        deadline = start + round(options.duration_s * 1000)
        close_timeout_ms = round(options.close_timeout_s * 1000)
        runs = []
        for index in range(options.clients):
            kind = options.kinds[index % len(options.kinds)]
            identity = client_identity(index, kind, options.client_id_prefix)
            rng = _client_rng(options.seed, index)
            begin = start + round(options.ramp_up_s * 1000 * index / options.clients)
            if isinstance(transport, OtlpGrpcTransport):
                otlp = OtlpClient(
                    identity,
                    transport,
                    clock=clock,
                    stats=stats,
                    rng=rng,
                    interval_ms=options.interval_ms or DEFAULT_OTLP_INTERVAL_MS,
                    compression=otlp_compression,
                    close_timeout_ms=close_timeout_ms,
                    timer=timer,
                )
                runs.append(otlp.run(begin, deadline, stop))
            else:
                kip714 = Kip714Client(
                    identity,
                    transport,
                    clock=clock,
                    stats=stats,
                    rng=rng,
                    compression=options.compression,
                    interval_override_ms=options.interval_ms,
                    close_timeout_ms=close_timeout_ms,
                    timer=timer,
                )
                runs.append(kip714.run(begin, deadline, stop))
        await asyncio.gather(*runs)
        elapsed = clock.now_ms() - start
    finally:
        await transport.close()
    return stats.summary(options.target, options.address, options.clients, elapsed)
