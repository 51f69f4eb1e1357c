"""Benchmark of the Kafka wire listener's push path against the gRPC push path, in one run.

Both paths run the same fleet shape against ``telemetry-sink serve`` (``push_path.harness.start_sink``:
the default Delta exporter at its default bounds, landing in a temporary directory, ``interval.ms``
100, ``server.max_concurrent_requests`` twice the pushes in flight so that admission never sheds the
load): ``--instances`` simulated librdkafka instances, instance ``n`` pushing the captured payloads of
``load_payloads()[n % groups]`` in turn, with client id ``<kind>-<n % 1000>`` and client software
librdkafka 2.16.0. Each instance asks ``GetTelemetrySubscriptions`` once, then pushes never sooner
than its push interval (+2 ms, the sink's clock has millisecond resolution) after its previous answer,
so the sink's interval gate (TEL-17) accepts every push. Requests are encoded up front, so the client
spends its time in I/O. After ``--warmup-s``, pushes answered within ``--duration-s`` are counted and
timed; then the client stops issuing and waits for every answer.

- **Kafka** (``KafkaFleet``, asyncio streams): ``--connections`` TCP connections. Each sends
  ApiVersions v3 once (software name and version), then a GetTelemetrySubscriptions (api key 71 v0)
  for each instance it carries (instance ``n`` on connection ``n % connections``), then
  PushTelemetry (api key 72 v0) frames: the connection's instance whose interval has passed first
  goes next. The listener reads a connection's next request only after answering the previous one
  (a broker mutes a channel while its request is handled), so the load the sink handles at once is
  one push per connection. ``--pipeline N`` (1-5, as Kafka clients allow in flight) lets a connection
  write up to N requests ahead; they wait in the socket, answers come in order, and a push's latency
  is counted from its write, so it includes the wait behind the requests before it.
- **gRPC** (``harness.TelemetryFleet.run_saturated``, the loop of ``benchmarks/push_path``): the same
  instances and payloads over ``--grpc-channels`` channels (16, as in push_path), with
  ``--grpc-concurrency`` pushes in flight, by default as many as Kafka connections. That is the
  choice for fairness: a gRPC client multiplexes its calls over a few HTTP/2 connections, which is
  how gRPC loads a server, while a Kafka client gets concurrency only from connections; equal
  counts of pushes in flight mean the sink has the same number of pushes to handle at once on both
  paths (and so the same group-commit batches). Reusing the harness keeps the gRPC figure
  comparable with push_path's. One difference remains: a gRPC slot takes whichever instance of the
  whole fleet is ready first, a Kafka connection only its own instances (an instance belongs to
  its connection, and the sink evicts it when the connection closes, PD-8). With several instances
  per connection (default 4) a connection always has one ready, so this does not limit its load.

- **SASL** (``kafka-sasl``): the Kafka path again, against a sink whose listener is ``SASL_PLAINTEXT``;
  each connection authenticates once with SCRAM-SHA-256 (SaslHandshake v1 and two SaslAuthenticate v2
  round trips, untimed, as librdkafka does) after its ApiVersions. Its ratio is over the PLAINTEXT
  Kafka path's pushes/s (issue 21's goal: >= 0.9).

Each path gets a fresh sink process with the same config (in a subdirectory of ``--workdir``), so
neither inherits the other's instance cache, Delta table or warm-up. After each path the sink is
stopped (SIGTERM) and its Delta table must hold exactly one row per acknowledged push, per instance.
The ratio is Kafka accepted pushes/s over gRPC accepted pushes/s. The load is closed-loop and a push
is answered only once its group commit is done (a batch closes 200 ms after its first push), so
unless the sink runs out of CPU, pushes/s is about pushes in flight / latency (Little's law) on
both paths: a ratio near 1 then says the Kafka listener costs no more latency, not that the CPU
costs are equal; the CPU columns tell those apart, and a fleet large enough to saturate the sink's
core tells throughput apart. On a 2-core machine the client
(this process) and the sink get about a core each; compare CPU columns before comparing figures.

Run: ``make bench`` or ``.venv/bin/python benchmarks/kafka_listener/bench.py [--instances 4000
--connections 1000 --duration-s 15 --warmup-s 5 ...]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import contextlib
import heapq
import io
import itertools
import json
import platform
import shutil
import struct
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import scramp
from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from benchmarks.push_path.bench import verify_table
from benchmarks.push_path.harness import (
    GATE_SLACK_S,
    MIN_INTERVAL_MS,
    SOFTWARE_VERSION,
    PayloadGroup,
    Server,
    Stats,
    TelemetryFleet,
    admission_configurable,
    cpu_seconds,
    load_payloads,
    percentile,
    start_sink,
)

HOST: Final = "127.0.0.1"
SOFTWARE_NAME: Final = "librdkafka"
API_VERSIONS: Final = 18
GET_TELEMETRY_SUBSCRIPTIONS: Final = 71
PUSH_TELEMETRY: Final = 72
FRAME_SIZE: Final = struct.Struct(">i")
PUSH_RESPONSE: Final = struct.Struct(">iBihB")
"""PushTelemetry v0's answer: header v1 (correlation id, no tagged fields), throttle_time_ms,
error_code, no tagged fields."""
SASL_MECHANISM: Final = "SCRAM-SHA-256"
SASL_USER: Final = ("bench", "bench-secret")
MAX_PIPELINE: Final = 5  # max.in.flight.requests.per.connection that Kafka clients allow
DRAIN_TIMEOUT_S: Final = 60.0  # the answers still due when the window ends
SETUP_TIMEOUT_S: Final = 30.0
ZERO_UUID: Final = uuid.UUID(int=0)  # "assign me an id"
SETUP_CONCURRENCY: Final = 64  # connections being set up at once (the listener's backlog is 128)


PATHS: Final = (("grpc", "gRPC"), ("kafka", "Kafka"), ("kafka-sasl", "SASL"))
"""The paths, in the order they run: the Kafka one twice, PLAINTEXT and SASL_PLAINTEXT (SCRAM-SHA-256)."""


def encode_request(request: Any, correlation_id: int, client_id: str) -> bytes:
    """A kio request entity as a size-prefixed frame, with the request header its version uses (v1, or
    v2 in flexible versions)."""
    header_schema = RequestHeader if request.__header_schema__ is RequestHeader else RequestHeaderV1
    header = header_schema(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header)
    entity_writer(type(request))(buffer, request)
    body = buffer.getvalue()
    return FRAME_SIZE.pack(len(body)) + body


class ProtocolError(Exception):
    """An answer the client cannot match to its request."""


@dataclass
class _KafkaInstance:
    index: int  # in the fleet; also the correlation id of its pushes
    client_id: str
    group: PayloadGroup
    instance_id: bytes = b""
    interval_s: float = 0.0
    frames: tuple[bytes, ...] = ()
    pushes: int = 0


class _KafkaConnection:
    """One TCP connection to the listener and the instances it carries."""

    def __init__(self, instances: list[_KafkaInstance], sasl: tuple[str, str] | None = None) -> None:
        self.instances = instances
        self.sasl = sasl
        """(user, password) to authenticate with (SCRAM-SHA-256) on a SASL listener."""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(-1, -1)  # setup requests; pushes use instance indexes
        self.failure: str | None = None

    async def _request(self, request: Any, client_id: str) -> Any:
        """One request, its answer decoded with kio (setup only, not timed)."""
        assert self.reader is not None
        assert self.writer is not None
        correlation_id = next(self._correlation)
        self.writer.write(encode_request(request, correlation_id, client_id))
        await self.writer.drain()
        (size,) = FRAME_SIZE.unpack(await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        schema = load_response_schema(request.__api_key__, request.__version__)
        header, offset = entity_reader(schema.__header_schema__)(frame, 0)
        if header.correlation_id != correlation_id:
            raise ProtocolError(f"answer to {header.correlation_id} for request {correlation_id}")
        body, _ = entity_reader(schema)(frame, offset)
        return body

    async def _authenticate(self, user: str, password: str) -> None:
        """SCRAM-SHA-256 in SaslAuthenticate v2 requests, as librdkafka does it (setup only, not timed)."""
        client_id = self.instances[0].client_id
        handshake = await self._request(SaslHandshakeRequest(mechanism=SASL_MECHANISM), client_id)
        if handshake.error_code != ErrorCode.none:
            raise RuntimeError(f"SaslHandshake answered {handshake}")
        scram = scramp.ScramClient([SASL_MECHANISM], user, password)
        first = await self._request(
            SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()), client_id
        )
        if first.error_code != ErrorCode.none:
            raise RuntimeError(f"SaslAuthenticate answered {first}")
        scram.set_server_first(first.auth_bytes.decode())
        final = await self._request(
            SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()), client_id
        )
        if final.error_code != ErrorCode.none:
            raise RuntimeError(f"SaslAuthenticate answered {final}")
        scram.set_server_final(final.auth_bytes.decode())

    async def open(self, port: int) -> None:
        """Connect, ApiVersions v3, then one GetTelemetrySubscriptions per instance; encode each
        instance's push frames."""
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            self.reader, self.writer = await asyncio.open_connection(HOST, port)
            versions = await self._request(
                ApiVersionsRequest(
                    client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION
                ),
                self.instances[0].client_id,
            )
            v0 = {k.api_key for k in versions.api_keys if k.min_version <= 0 <= k.max_version}
            if (
                versions.error_code != ErrorCode.none
                or not {GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY} <= v0
            ):
                raise RuntimeError(f"ApiVersions v3 answered {versions}")
            if self.sasl is not None:
                await self._authenticate(*self.sasl)
            for instance in self.instances:
                r = await self._request(
                    GetTelemetrySubscriptionsRequest(client_instance_id=ZERO_UUID), instance.client_id
                )
                if r.error_code != ErrorCode.none or instance.group.compression_type not in (
                    *r.accepted_compression_types,
                    0,
                ):
                    raise RuntimeError(f"GetTelemetrySubscriptions answered {r}")
                instance.instance_id = r.client_instance_id.bytes
                instance.interval_s = r.push_interval.total_seconds() + GATE_SLACK_S
                instance.frames = tuple(
                    encode_request(
                        PushTelemetryRequest(
                            client_instance_id=r.client_instance_id,
                            subscription_id=r.subscription_id,
                            terminating=False,
                            compression_type=i8(instance.group.compression_type),
                            metrics=payload,
                        ),
                        instance.index,
                        instance.client_id,
                    )
                    for payload in instance.group.payloads
                )

    async def run(self, stats: Stats, window: tuple[float, float], pipeline: int, start: float) -> None:
        """Push until the window ends (the instance whose interval has passed first goes next, at
        most ``pipeline`` requests written ahead), then wait for every answer still due."""
        assert self.reader is not None
        assert self.writer is not None
        writer = self.writer
        instances = self.instances
        ready = [(start, n) for n in range(len(instances))]  # (may push at, local index)
        pending: deque[tuple[_KafkaInstance, int, float]] = deque()  # (instance, local index, written at)
        progress = asyncio.Event()  # an answer arrived (a slot and an instance are free) or reading failed
        drained = asyncio.Event()
        stopping = False
        perf_counter = time.perf_counter

        async def read_answers() -> None:
            assert self.reader is not None
            readexactly = self.reader.readexactly
            unpack_size, unpack_answer = FRAME_SIZE.unpack, PUSH_RESPONSE.unpack
            try:
                while True:
                    (size,) = unpack_size(await readexactly(4))
                    frame = await readexactly(size)
                    done = perf_counter()
                    if not pending:
                        raise ProtocolError("an answer to no request")
                    instance, n, written = pending.popleft()
                    if size != PUSH_RESPONSE.size:
                        raise ProtocolError(f"a PushTelemetry answer of {size} bytes")
                    correlation_id, header_tags, throttle_ms, error, body_tags = unpack_answer(frame)
                    if correlation_id != instance.index or header_tags or body_tags:
                        raise ProtocolError(f"answer {frame.hex()} to the push of instance {instance.index}")
                    if error == 0:
                        stats.accepted += 1
                        stats.accepted_by_instance[instance.instance_id] += 1
                    else:
                        stats.errors[error] += 1
                    if throttle_ms > 0:
                        stats.throttled += 1
                    if window[0] <= done < window[1]:
                        stats.window_completed += 1
                        stats.window_accepted += error == 0
                        stats.window_latencies_s.append(done - written)
                    heapq.heappush(ready, (done + instance.interval_s, n))
                    progress.set()
                    if stopping and not pending:
                        drained.set()
            except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
                self.failure = f"{type(exc).__name__}: {exc}"
                for _ in pending:  # pushes that will never be answered
                    stats.rpc_failures[f"connection failed ({type(exc).__name__})"] += 1
                pending.clear()
                progress.set()
                drained.set()

        reading = asyncio.create_task(read_answers())
        try:
            while self.failure is None:
                now = perf_counter()
                if now >= window[1]:
                    break
                if len(pending) >= pipeline or not ready:
                    progress.clear()
                    await progress.wait()
                    continue
                at = ready[0][0]
                if at > now:
                    await asyncio.sleep(min(at, window[1]) - now)
                    continue
                n = heapq.heappop(ready)[1]
                instance = instances[n]
                frame = instance.frames[instance.pushes % len(instance.frames)]
                instance.pushes += 1
                pending.append((instance, n, perf_counter()))
                writer.write(frame)
                await writer.drain()
            stopping = True
            if pending:
                try:
                    async with asyncio.timeout(DRAIN_TIMEOUT_S):
                        await drained.wait()
                except TimeoutError:
                    stats.rpc_failures[f"no answer within {DRAIN_TIMEOUT_S:g} s"] += len(pending)
                    self.failure = f"{len(pending)} answers missing"
        except OSError as exc:  # writing
            self.failure = f"{type(exc).__name__}: {exc}"
            stats.rpc_failures[f"connection failed ({type(exc).__name__})"] += len(pending)
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


class KafkaFleet:
    """Simulated librdkafka instances pushing over many connections to one Kafka listener."""

    def __init__(
        self,
        port: int,
        groups: Sequence[PayloadGroup],
        instances: int,
        connections: int,
        sasl: tuple[str, str] | None = None,
    ) -> None:
        if instances < connections:
            raise ValueError("need at least one instance per connection")
        self.port = port
        fleet = [
            _KafkaInstance(n, f"{groups[n % len(groups)].kind}-{n % 1000}", groups[n % len(groups)])
            for n in range(instances)
        ]
        self.connections = [_KafkaConnection(fleet[c::connections], sasl) for c in range(connections)]
        self.stats = Stats()

    async def subscribe(self) -> None:
        pending = iter(self.connections)

        async def worker() -> None:
            for connection in pending:
                await connection.open(self.port)

        await asyncio.gather(*(worker() for _ in range(min(SETUP_CONCURRENCY, len(self.connections)))))

    async def run_saturated(self, pipeline: int, warmup_s: float, measure_s: float) -> None:
        start = time.perf_counter()
        window = (start + warmup_s, start + warmup_s + measure_s)
        hang_guard_s = warmup_s + measure_s + DRAIN_TIMEOUT_S + 30  # a sink that stopped answering
        async with asyncio.timeout(hang_guard_s):
            await asyncio.gather(*(c.run(self.stats, window, pipeline, start) for c in self.connections))

    @property
    def failed_connections(self) -> list[str]:
        return [c.failure for c in self.connections if c.failure is not None]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))


def _summary(stats: Stats, measure_s: float, cpu: tuple[float, float], elapsed: float) -> dict[str, Any]:
    latencies = sorted(stats.window_latencies_s)
    return {
        "pushes_per_s": stats.window_completed / measure_s,
        "accepted_per_s": stats.window_accepted / measure_s,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p90_ms": percentile(latencies, 0.90) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": (latencies[-1] if latencies else float("nan")) * 1000,
        "accepted": stats.accepted,
        "errors": {str(code): n for code, n in sorted(stats.errors.items())},
        "failures": dict(stats.rpc_failures),
        "error_count": stats.error_count,
        "throttled": stats.throttled,
        "sink_cpu": cpu[0] / elapsed,  # cores busy, warm-up included
        "client_cpu": cpu[1] / elapsed,
        "accepted_by_instance": stats.accepted_by_instance,
    }


async def _measured(
    server: Server, fleet: Any, load: Callable[[], Awaitable[None]], args: argparse.Namespace
) -> dict[str, Any]:
    """Subscribe the fleet, run ``load``, and summarise it with the sink's and this process's CPU."""
    try:
        await fleet.subscribe()
        before = (cpu_seconds(server.process.pid), time.process_time())
        started = time.perf_counter()
        await load()
        elapsed = time.perf_counter() - started
        after = (cpu_seconds(server.process.pid), time.process_time())
    finally:
        await fleet.close()
    cpu = (after[0] - before[0], after[1] - before[1])
    return _summary(fleet.stats, args.duration_s, cpu, elapsed)


async def drive_grpc(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    fleet = TelemetryFleet(server.target, load_payloads(), args.instances, args.grpc_channels)
    return await _measured(
        server,
        fleet,
        lambda: fleet.run_saturated(args.grpc_concurrency, args.warmup_s, args.duration_s),
        args,
    )


async def drive_kafka(server: Server, args: argparse.Namespace, sasl: bool = False) -> dict[str, Any]:
    if server.kafka_port is None:
        raise SystemExit("the sink did not announce a Kafka listener (kafka_listener.port)")
    credentials = SASL_USER if sasl else None
    fleet = KafkaFleet(server.kafka_port, load_payloads(), args.instances, args.connections, credentials)
    result = await _measured(
        server, fleet, lambda: fleet.run_saturated(args.pipeline, args.warmup_s, args.duration_s), args
    )
    failed = fleet.failed_connections
    result["failed_connections"] = len(failed)
    if failed:
        result["first_failure"] = failed[0]
    return result


def run_path(path: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One path against a fresh sink; its Delta table checked against the acknowledged pushes."""
    directory = workdir / path
    directory.mkdir(parents=True, exist_ok=True)
    kafka_extra = ""
    if path == "kafka-sasl":
        users = directory / "users.yaml"
        users.write_text(f"{SASL_USER[0]}: {SASL_USER[1]}\n")
        kafka_extra = f"\n  security_protocol: SASL_PLAINTEXT\nsecurity:\n  sasl_users_file: {users}"
    server = start_sink(
        directory, args.interval_ms, max_in_flight=args.sink_max_in_flight or None, kafka_extra=kafka_extra
    )
    try:
        if path == "grpc":
            result = asyncio.run(drive_grpc(server, args))
        else:
            result = asyncio.run(drive_kafka(server, args, sasl=path == "kafka-sasl"))
    finally:
        code = server.stop()
    if code != 0:
        raise SystemExit(f"the sink ({path}) exited {code}; log:\n{server.log_tail()}")
    assert server.table_uri is not None
    result["table"] = verify_table(server.table_uri, result.pop("accepted_by_instance"))
    return result


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    limit = args.sink_max_in_flight
    shown = f"{limit:,}" if limit and admission_configurable() else "the sink's default"
    print(
        f"kafka listener vs gRPC push path: {args.instances:,} instances, interval.ms {args.interval_ms}, "
        f"warm-up {args.warmup_s:g} s, measured {args.duration_s:g} s; a fresh sink per path "
        f"(Delta exporter at its default bounds, server.max_concurrent_requests {shown})"
    )
    if "grpc" in results:
        print(
            f"  gRPC:  {args.grpc_concurrency:,} pushes in flight over {args.grpc_channels} channels "
            f"(harness.TelemetryFleet.run_saturated)"
        )
    if "kafka" in results:
        print(
            f"  Kafka: {args.connections:,} connections, {args.pipeline} request(s) in flight per "
            f"connection (the sink handles one per connection at a time)"
        )
    header = (
        f"  {'path':<6}{'pushes/s':>10}{'accepted/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
        f"{'max ms':>9}{'accepted':>10}{'errors':>8}{'throttled':>10}{'sink cpu':>10}{'client cpu':>11}"
        f"{'Delta rows':>12}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for path, label in PATHS:
        if path not in results:
            continue
        r = results[path]
        print(
            f"  {label:<6}{r['pushes_per_s']:>10,.0f}{r['accepted_per_s']:>12,.0f}{r['p50_ms']:>9.1f}"
            f"{r['p90_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['max_ms']:>9.1f}{r['accepted']:>10,}"
            f"{r['error_count']:>8,}{r['throttled']:>10,}{r['sink_cpu']:>10.2f}{r['client_cpu']:>11.2f}"
            f"{r['table']['rows']:>12,}"
        )
    for path, label in PATHS:
        if path not in results:
            continue
        r = results[path]
        if r["error_count"]:
            print(f"  {label} errors: Kafka error codes {r['errors']}, failures {r['failures']}")
        if r.get("failed_connections"):
            print(f"  {label}: {r['failed_connections']} connections failed, first: {r['first_failure']}")
        t = r["table"]
        if t["missing"] or t["extra"]:
            print(f"  {label} Delta table MISMATCH: {t['acked']:,} acknowledged, {t}")
    ratio = None
    if "grpc" in results and "kafka" in results and results["grpc"]["accepted_per_s"]:
        ratio = results["kafka"]["accepted_per_s"] / results["grpc"]["accepted_per_s"]
        print(f"  ratio (accepted pushes/s, Kafka / gRPC)   {ratio:.3f}")
    sasl_ratio = None
    if "kafka" in results and "kafka-sasl" in results and results["kafka"]["accepted_per_s"]:
        sasl_ratio = results["kafka-sasl"]["accepted_per_s"] / results["kafka"]["accepted_per_s"]
        print(f"  ratio (accepted pushes/s, SASL_PLAINTEXT {SASL_MECHANISM} / PLAINTEXT)   {sasl_ratio:.3f}")
    print(
        json.dumps(
            {
                "benchmark": "kafka_listener",
                "python": platform.python_version(),
                "machine": platform.machine(),
                "date": time.strftime("%Y-%m-%d"),
                "instances": args.instances,
                "connections": args.connections,
                "pipeline": args.pipeline,
                "grpc_channels": args.grpc_channels,
                "grpc_concurrency": args.grpc_concurrency,
                "interval_ms": args.interval_ms,
                "warmup_s": args.warmup_s,
                "duration_s": args.duration_s,
                **results,
                "ratio": ratio,
                "sasl_ratio": sasl_ratio,
            }
        )
    )
    if any(r["table"]["missing"] or r["table"]["extra"] for r in results.values()):
        raise SystemExit("a Delta table does not match the acknowledged pushes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=4000, help="simulated client instances")
    parser.add_argument("--connections", type=int, default=1000, help="Kafka connections")
    parser.add_argument(
        "--pipeline",
        type=int,
        default=1,
        choices=range(1, MAX_PIPELINE + 1),
        metavar=f"1..{MAX_PIPELINE}",
        help="Kafka requests written ahead per connection (answers come in order)",
    )
    parser.add_argument("--grpc-channels", type=int, default=16, help="gRPC channels (connections)")
    parser.add_argument("--grpc-concurrency", type=int, help="gRPC pushes in flight (default: --connections)")
    parser.add_argument("--duration-s", type=float, default=15.0, help="measured window, after the warm-up")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument(
        "--interval-ms", type=int, default=MIN_INTERVAL_MS, help="the subscription's interval.ms"
    )
    parser.add_argument(
        "--sink-max-in-flight",
        type=int,
        help="the sink's server.max_concurrent_requests (default: twice the larger of the two paths' "
        "pushes in flight, so admission never sheds the load; 0: the sink's own default)",
    )
    parser.add_argument("--only", choices=[path for path, _ in PATHS], help="run one path only (no ratio)")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary directory)")
    args = parser.parse_args()
    if args.grpc_concurrency is None:
        args.grpc_concurrency = args.connections
    if args.instances <= max(args.connections, args.grpc_concurrency):
        parser.error("--instances must exceed --connections and --grpc-concurrency")
    if args.interval_ms < MIN_INTERVAL_MS:
        parser.error(f"--interval-ms must be at least {MIN_INTERVAL_MS}")
    if args.sink_max_in_flight is None:
        args.sink_max_in_flight = 2 * max(args.grpc_concurrency, args.connections * args.pipeline)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafka-listener-bench-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for path, _ in PATHS:
            if args.only in (None, path):
                results[path] = run_path(path, workdir, args)
        report(args, results)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
