"""What ``bench.py`` and ``soak.py`` share: the captured payloads, the simulated fleet (one gRPC client
process), and starting the servers under test as their own processes.

The fleet is ``instances`` simulated librdkafka clients spread over ``channels`` gRPC channels (one
TCP connection each). Each instance asks ``GetTelemetrySubscriptions`` once, then pushes one of the
captured payloads of its kind and compression in turn, never sooner than the push interval the
server gave it after its previous answer, so that the sink's interval gate accepts every push
(TEL-17). Requests are built once, up front, so the client spends its time in gRPC, not in protobuf.
"""

from __future__ import annotations

import asyncio
import heapq
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Final

import grpc
import grpc.aio

from ingest.config import ServerConfig
from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.wire import CLIENT_ID_HEADER, SOFTWARE_NAME_HEADER, SOFTWARE_VERSION_HEADER
from subscriptions import CompressionType

__all__ = [
    "FIXTURES",
    "MIN_INTERVAL_MS",
    "PayloadGroup",
    "Server",
    "Stats",
    "TelemetryFleet",
    "admission_configurable",
    "cpu_seconds",
    "load_payloads",
    "percentile",
    "rss_bytes",
    "start_noop",
    "start_sink",
]

REPO: Final = Path(__file__).resolve().parents[2]
FIXTURES: Final = REPO / "tests" / "fixtures" / "librdkafka"
HERE: Final = Path(__file__).resolve().parent
COMPRESSION: Final = {c.name.lower(): c.value for c in CompressionType}
SOFTWARE_VERSION: Final = "2.16.0"
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
MIN_INTERVAL_MS: Final = 100  # the smallest interval.ms a subscription may have
GATE_SLACK_S: Final = 0.002  # the sink's clock has millisecond resolution
_FILE: Final = re.compile(r"librdkafka-(\w+)-push\d+-(\w+)\.bin")
_BANNER: Final = re.compile(
    r"serving gRPC on [\d.]+:(\d+)(?:, HTTP on [\d.]+:\d+(?:, Kafka on [\d.]+:(\d+))?, landing in (\S+))?"
)


@dataclass(frozen=True)
class PayloadGroup:
    """The captured pushes of one client kind with one compression type, in capture order."""

    kind: str
    compression_type: int
    payloads: tuple[bytes, ...]


def load_payloads(directory: Path = FIXTURES) -> list[PayloadGroup]:
    """Every non-terminating capture, grouped by (client kind, compression); a terminating push would
    end its client instance."""
    groups: dict[tuple[str, str], list[bytes]] = {}
    for path in sorted(directory.glob("librdkafka-*.bin")):
        match = _FILE.fullmatch(path.name)
        if match is None:  # "-terminating" captures
            continue
        groups.setdefault((match[1], match[2]), []).append(path.read_bytes())
    if not groups:
        raise SystemExit(f"no librdkafka captures in {directory}")
    return [PayloadGroup(kind, COMPRESSION[codec], tuple(p)) for (kind, codec), p in sorted(groups.items())]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


@dataclass
class Stats:
    """Answers to pushes; ``window_*`` only those completed inside the measured window."""

    accepted: int = 0
    errors: Counter[int] = field(default_factory=Counter)  # Kafka error code -> count
    rpc_failures: Counter[str] = field(default_factory=Counter)  # gRPC status -> count
    throttled: int = 0  # answers with throttle_time_ms > 0
    accepted_by_instance: Counter[bytes] = field(default_factory=Counter)
    window_completed: int = 0
    window_accepted: int = 0
    window_latencies_s: list[float] = field(default_factory=list)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values()) + sum(self.rpc_failures.values())


@dataclass
class _Instance:
    metadata: tuple[tuple[str, str], ...]
    stub: pb_grpc.ClientTelemetryStub
    group: PayloadGroup
    instance_id: bytes = b""
    interval_s: float = 0.0
    requests: tuple[pb.PushTelemetryRequest, ...] = ()
    pushes: int = 0


class TelemetryFleet:
    """Simulated librdkafka client instances pushing to one gRPC endpoint."""

    def __init__(self, target: str, groups: Sequence[PayloadGroup], instances: int, channels: int) -> None:
        self.target = target
        self.channels = [
            grpc.aio.insecure_channel(
                target,
                options=[
                    ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ],
            )
            for _ in range(channels)
        ]
        stubs = [pb_grpc.ClientTelemetryStub(c) for c in self.channels]  # type: ignore[no-untyped-call]
        self.instances = [
            _Instance(
                (
                    (CLIENT_ID_HEADER, f"{groups[n % len(groups)].kind}-{n % 1000}"),
                    (SOFTWARE_NAME_HEADER, "librdkafka"),
                    (SOFTWARE_VERSION_HEADER, SOFTWARE_VERSION),
                ),
                stubs[n % channels],
                groups[n % len(groups)],
            )
            for n in range(instances)
        ]
        self.stats = Stats()

    async def subscribe(self, concurrency: int = 256) -> None:
        """GetTelemetrySubscriptions once per instance; build each instance's push requests."""
        pending = iter(self.instances)

        async def worker() -> None:
            for instance in pending:
                r = await instance.stub.GetTelemetrySubscriptions(
                    pb.GetTelemetrySubscriptionsRequest(), metadata=instance.metadata
                )
                if r.error_code or instance.group.compression_type not in (
                    *r.accepted_compression_types,
                    0,
                ):
                    raise RuntimeError(f"GetTelemetrySubscriptions answered {r}")
                instance.instance_id = r.client_instance_id
                instance.interval_s = r.push_interval_ms / 1000 + GATE_SLACK_S
                instance.requests = tuple(
                    pb.PushTelemetryRequest(
                        client_instance_id=r.client_instance_id,
                        subscription_id=r.subscription_id,
                        compression_type=instance.group.compression_type,
                        metrics=payload,
                    )
                    for payload in instance.group.payloads
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def _push(self, instance: _Instance, window: tuple[float, float]) -> float:
        """One push; returns when its answer arrived (perf_counter)."""
        request = instance.requests[instance.pushes % len(instance.requests)]
        instance.pushes += 1
        stats = self.stats
        started = time.perf_counter()
        try:
            r = await instance.stub.PushTelemetry(request, metadata=instance.metadata)
        except grpc.aio.AioRpcError as exc:
            done = time.perf_counter()
            stats.rpc_failures[exc.code().name] += 1
            return done
        done = time.perf_counter()
        if r.error_code == 0:
            stats.accepted += 1
            stats.accepted_by_instance[instance.instance_id] += 1
        else:
            stats.errors[r.error_code] += 1
        if r.throttle_time_ms > 0:
            stats.throttled += 1
        if window[0] <= done < window[1]:
            stats.window_completed += 1
            stats.window_accepted += r.error_code == 0
            stats.window_latencies_s.append(done - started)
        return done

    async def run_saturated(self, concurrency: int, warmup_s: float, measure_s: float) -> None:
        """Closed loop: ``concurrency`` pushes always in flight, each from the instance whose interval
        has passed first. Stops issuing when the window ends and waits for every answer."""
        if len(self.instances) <= concurrency:
            raise ValueError("need more instances than concurrent pushes")
        now = time.perf_counter()
        window = (now + warmup_s, now + warmup_s + measure_s)
        ready = [(now, n) for n in range(len(self.instances))]  # (may push at, instance)
        heapq.heapify(ready)

        async def worker() -> None:
            while time.perf_counter() < window[1]:
                at, n = heapq.heappop(ready)
                delay = at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                instance = self.instances[n]
                done = await self._push(instance, window)
                heapq.heappush(ready, (done + instance.interval_s, n))

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def run_paced(self, rate: float, duration_s: float, warmup_s: float) -> None:
        """Open loop at ``rate`` pushes/s: every instance pushes once per ``instances / rate`` seconds
        (phases spread evenly), but never sooner than its push interval after its previous answer."""
        period = len(self.instances) / rate
        start = time.perf_counter()
        stop = start + duration_s
        window = (start + warmup_s, stop)

        async def instance_loop(n: int) -> None:
            instance = self.instances[n]
            due = start + period * n / len(self.instances)
            earliest = start
            while due < stop:
                delay = max(due, earliest) - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                earliest = await self._push(instance, window) + instance.interval_s
                due += period

        await asyncio.gather(*(instance_loop(n) for n in range(len(self.instances))))

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


@dataclass
class Server:
    """A server under test running as its own process."""

    name: str
    process: subprocess.Popen[str]
    port: int
    log_path: Path
    table_uri: str | None = None
    kafka_port: int | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM (the sink flushes and exits 0), then wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _launch(name: str, command: list[str], log_path: Path) -> Server:
    log: IO[str]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO)
    assert process.stdout is not None
    banner = process.stdout.readline()
    match = _BANNER.search(banner)
    if match is None:
        process.kill()
        raise SystemExit(f"{name}: no banner ({banner!r}); log:\n{log_path.read_text()}")
    return Server(name, process, int(match[1]), log_path, match[3], int(match[2]) if match[2] else None)


SINK_CONFIG: Final = """\
data_root: {root}
replica_id: bench
server:
  host: 127.0.0.1
  grpc_port: 0
  http_port: 0
  shutdown_grace_s: 60{extra_server}
kafka_listener:
  port: 0{kafka_extra}
subscriptions:
  bench: {{metrics: "org.apache.kafka.", interval.ms: {interval_ms}}}
"""


def admission_configurable() -> bool:
    """Whether this sink has ``server.max_concurrent_requests`` (admission control)."""
    return "max_concurrent_requests" in {f.name for f in fields(ServerConfig)}


def start_sink(
    workdir: Path,
    interval_ms: int,
    profile_to: Path | None = None,
    *,
    max_in_flight: int | None = None,
    kafka_extra: str = "",
    niceness: int = 0,
) -> Server:
    """``telemetry-sink serve`` with its default (Delta) exporter landing under ``workdir``; with
    ``profile_to``, the same ``serve`` under cProfile (``profiled_serve.py``); ``max_in_flight`` sets
    ``server.max_concurrent_requests`` (else the sink's default); ``kafka_extra`` is YAML appended
    after ``kafka_listener.port`` (more listener keys, then other sections); ``niceness``: run under
    ``nice -n`` (its decoder processes inherit it)."""
    config = workdir / "telemetry-sink.yaml"
    extra = ""
    if max_in_flight is not None and admission_configurable():
        extra = f"\n  max_concurrent_requests: {max_in_flight}"
    config.write_text(
        SINK_CONFIG.format(
            root=workdir / "data", interval_ms=interval_ms, extra_server=extra, kafka_extra=kafka_extra
        )
    )
    if profile_to is None:
        command = [str(Path(sys.executable).with_name("telemetry-sink")), "serve", "--config", str(config)]
    else:
        command = [sys.executable, str(HERE / "profiled_serve.py"), str(profile_to), "--config", str(config)]
    if niceness:
        command = ["nice", "-n", str(niceness), *command]
    return _launch("sink", command, workdir / "sink.log")


def start_noop(workdir: Path, interval_ms: int) -> Server:
    command = [sys.executable, str(HERE / "noop_server.py"), "--interval-ms", str(interval_ms)]
    return _launch("no-op", command, workdir / "noop.log")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (``VmRSS`` in ``/proc/<pid>/status``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
