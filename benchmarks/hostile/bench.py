"""Benchmark: what one hostile client costs everyone else (issue 17).

The push_path fleet (``benchmarks/push_path/harness.TelemetryFleet``: simulated librdkafka instances
over gRPC pushing the captured payloads of ``tests/fixtures/librdkafka``) drives one
``telemetry-sink serve`` (Delta exporter, default limits) in phases of the same length, in one run:

- ``clean``: the fleet alone;
- then one phase per attack: the fleet, and beside it one attacker sending that attack back to back
  (one request at a time; the slow-client attack holds ``--slow-sockets`` sockets instead, the
  stalled-bodies attack ``--stalled-bodies`` uploads), each at the largest size the sink's default
  limits let it send (``tests/support/attacks.py`` builds them).
  The attacker runs in a Python process of its own (``AttackerProcess``), as the ``/healthz`` prober
  does, and connects from 127.0.0.2, another client address on loopback, so that per-IP connection
  limits apply to it and not to the fleet.
  One attacker is not hostile input but a client dodging its quota (``t3-5-rotating-ids``, T3-5): a
  user with a ``<user>`` byte-rate quota (set through the admin API for its phase only) sending each
  OTLP/HTTP export under a new client id; it reports the bytes/s it landed beside the quota.

The fleet is open loop by default: ``--rate`` pushes/s (1,000: a third of what one sink lands on
this machine, a fleet of 30,000 clients at the default 30 s interval), so that its latency and the
``/healthz`` prober show what the attacker adds, not the queueing of a saturated sink;
``--saturated`` runs it closed loop as push_path does (``--concurrency`` in flight), where the ratio
shows the CPU the attacker takes from the fleet.

For each phase it prints the fleet's accepted pushes/s in the measured window and their ratio to the
clean phase, the fleet's error answers, their p99 latency, the worst ``GET /healthz`` latency seen by
a prober in a process of its own (``attacks.HealthProber``: a fresh connection every 20 ms, an
event-loop stall shows here, and the fleet's and attacker's process does not), the sink's own worst
event loop lag over the phase (``telemetry_sink_event_loop_lag_max_seconds`` from ``/metrics``, read
at the phase start to reset it and at its end; the lag includes what that first scrape cost), the
sink's peak RSS in the phase (``VmHWM``, reset at each phase start), and what the attacker was
answered. Goal beside the figures: ratio >= 0.9, zero well-behaved errors, worst /healthz < 100 ms
(the external prober; the loop lag is printed beside it); for the fan-out and rotating-client-id
attacks (T3-7, T3-5: ``T3_GOAL_PHASES``) ratio >= 0.99. After the run the sink is stopped and every
acknowledged fleet push must be in its Delta table, once.

Run: ``make bench`` or ``.venv/bin/python benchmarks/hostile/bench.py [--phase-s 15 --attacks f1-points]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import shutil
import struct
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from deltalake import DeltaTable
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.push_path.harness import (
    MIN_INTERVAL_MS,
    Server,
    Stats,
    TelemetryFleet,
    load_payloads,
    percentile,
    start_sink,
)
from ingest.config import DEFAULT_SOCKET_REQUEST_MAX_BYTES
from ingest.limits import DEFAULT_LIMITS
from ingest.push.codec import DEFAULT_MAX_DECOMPRESSED_BYTES
from subscriptions import ClientMetricsConfig, Errors, kafka_uuid_string
from tests.support import attacks
from tests.support.kafka import encode_request
from tests.support.otlp import metrics_data
from tests.support.process import free_port

SOURCE: Final = "127.0.0.2"
"""The attacker's address: another client on loopback."""
KAFKA_STRING_MAX: Final = 32_767
GOAL_RATIO: Final = 0.9
T3_GOAL_RATIO: Final = 0.99
"""The goal beside the fan-out and rotating-client-id attacks (T3-7, T3-5): the fleet keeps at least
this share of its clean rate."""
T3_GOAL_PHASES: Final = frozenset({"t3-7-fan-out", "t3-7-fan-out-cap-quota", "t3-5-rotating-ids"})
"""The phases held to ``T3_GOAL_RATIO``. Not ``t3-7-fan-out-cap``: a sender at the cap with no quota
is not over any limit but a heavy client (a thousand clients' rows a request, back to back), which
like any client without a quota shares the sink with the others (``GOAL_RATIO``); its quota phase
shows what bounds it."""
GOAL_STALL_MS: Final = 100.0
TIMEOUT_S: Final = 60.0
LOOP_LAG_MAX: Final = "telemetry_sink_event_loop_lag_max_seconds"
ROTATING_USER: Final = "rotating"
ROTATING_QUOTA: Final = 10_240
"""The rotating-client-id sender's ``<user>`` quota, ``producer_byte_rate`` (bytes/s)."""
ROTATING_TOKENS: Final = {"t-rotating": f"User:{ROTATING_USER}", "t-bench-admin": "User:bench-admin"}
"""The bearer tokens of the rotating sender and of the super user who sets its quota."""
SENDER_REQUEST_QUOTA: Final = 10.0
"""The at-cap fan-out sender's ``request_percentage`` in its quota phase: a tenth of one thread."""
ROTATING_BODY: Final = metrics_data(points=600)
"""About 21 KB: two requests a second are four times the quota."""

Attack = Callable[[Counter[str]], Coroutine[Any, Any, None]]
"""An attacker: sends until cancelled, counting what it was answered."""
Request = Callable[[], Awaitable[str]]
"""One attack request; what it was answered."""


@dataclass(frozen=True)
class Target:
    http_port: int
    kafka_port: int


async def _http(target: Target, request: bytes) -> attacks.HttpAnswer:
    return await attacks.http_exchange(target.http_port, request, TIMEOUT_S, source=SOURCE)


def _otlp(body: bytes, *, content_type: bytes = b"application/x-protobuf", gzip: bool = False) -> bytes:
    headers = [("Content-Type", content_type), ("x-kafka-client-id", b"hostile")]
    if gzip:
        headers.append(("Content-Encoding", b"gzip"))
    return attacks.http_request("POST", "/v1/metrics", headers, body)


def back_to_back(send: Request) -> Attack:
    """The attacker sending ``send``'s request again as soon as it is answered."""

    async def attack(answers: Counter[str]) -> None:
        while True:
            try:
                answers[await send()] += 1
            except (OSError, TimeoutError, ValueError, KeyError) as exc:
                answers[type(exc).__name__] += 1

    return attack


def otlp_attack(target: Target, request: bytes) -> Attack:
    async def send() -> str:
        return f"HTTP {(await _http(target, request)).status}"

    return back_to_back(send)


def kip714_attack(target: Target, compression_type: int, metrics: bytes) -> Attack:
    """A Get (a fresh client instance), then one push of ``metrics`` over HTTP (binary body)."""
    get = attacks.http_request(
        "POST",
        "/v1/kip714/get-telemetry-subscriptions",
        [("Content-Type", b"application/json"), ("x-kafka-client-id", b"hostile")],
        b"{}",
    )

    async def send() -> str:
        got = json.loads((await _http(target, get)).body)
        query = (
            f"client_instance_id={got['client_instance_id']}&subscription_id={got['subscription_id']}"
            f"&compression_type={compression_type}"
        )
        push = attacks.http_request(
            "POST",
            f"/v1/kip714/push-telemetry?{query}",
            [("Content-Type", b"application/octet-stream"), ("x-kafka-client-id", b"hostile")],
            metrics,
        )
        return str(json.loads((await _http(target, push)).body)["error"])

    return back_to_back(send)


async def _kafka_exchange(target: Target, frame: bytes) -> str:
    """Send one Kafka frame on a fresh connection: ``closed``, or the Kafka error code that starts the
    answer's body (ApiVersions answers start with it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", target.kafka_port, local_addr=(SOURCE, 0))
    try:
        writer.write(frame)
        await writer.drain()
        async with asyncio.timeout(TIMEOUT_S):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            answer = await reader.readexactly(size)
        (code,) = struct.unpack(">h", answer[4:6])  # after the correlation id
        return f"answered {Errors(code).name}"
    except (ConnectionError, asyncio.IncompleteReadError):  # closed, maybe while sending the frame
        return "closed"
    finally:
        writer.close()


def kafka_attack(target: Target, frame: bytes) -> Attack:
    async def send() -> str:
        return await _kafka_exchange(target, frame)

    return back_to_back(send)


def client_id_flood(target: Target) -> Attack:
    """Gets, each with a new client id of ``max_client_id_chars`` characters, on one connection."""
    counter = iter(range(2**62))
    pad = "x" * (DEFAULT_LIMITS.max_client_id_chars - 20)

    async def send() -> str:
        client_id = f"{next(counter):020d}{pad}".encode()
        request = attacks.http_request(
            "POST",
            "/v1/kip714/get-telemetry-subscriptions",
            [("Content-Type", b"application/json"), ("x-kafka-client-id", client_id)],
            b"{}",
        )
        answer = await _http(target, request)
        return f"HTTP {answer.status} {json.loads(answer.body).get('error')}"

    return back_to_back(send)


def rotating_ids_environment(workdir: Path) -> None:
    """The tokens the rotating-client-id sender needs, given to the sink through its environment (set
    before it starts): anonymous clients, the fleet among them, are not affected by them."""
    tokens = workdir / "tokens.yaml"
    tokens.write_text("".join(f'"{token}": "{principal}"\n' for token, principal in ROTATING_TOKENS.items()))
    os.environ["TELEMETRY_SINK_SECURITY__TOKENS_FILE"] = str(tokens)
    os.environ["TELEMETRY_SINK_SECURITY__SUPER_USERS"] = ROTATING_TOKENS["t-bench-admin"]


async def _set_quota(target: Target, entity_type: str, name: str, key: str, value: float | None) -> None:
    """Set (None: remove) a quota through the admin API, as an operator would."""
    op: dict[str, Any] = {"key": key} | ({"remove": True} if value is None else {"value": value})
    entity = [{"entity_type": entity_type, "entity_name": name}]
    body = json.dumps({"entries": [{"entity": entity, "ops": [op]}]}).encode()
    headers = [("Content-Type", b"application/json"), ("Authorization", b"Bearer t-bench-admin")]
    request = attacks.http_request("POST", "/admin/v1/client-quotas/alter", headers, body)
    answer = await attacks.http_exchange(target.http_port, request, TIMEOUT_S)
    if answer.status != 200 or any(e["error_code"] for e in json.loads(answer.body)["entries"]):
        raise RuntimeError(f"the quota on {name} was not set: {answer.status} {answer.body[:300]!r}")


def rotating_client_ids(target: Target, body: bytes) -> Attack:
    """T3-5: a user with a ``<user>`` quota of ``ROTATING_QUOTA`` sending OTLP/HTTP exports of ``body``
    back to back, each under a client id it never used before. The quota is set through the admin API
    when the attack starts and removed when it ends, so the other phases run without it. Besides the
    answers, it counts what it landed: ``accepted B/s`` against ``quota B/s``."""
    numbers = itertools.count()

    async def attack(answers: Counter[str]) -> None:
        await _set_quota(target, "user", ROTATING_USER, "producer_byte_rate", ROTATING_QUOTA)
        started, accepted = time.monotonic(), 0
        try:
            while True:
                headers = [
                    ("Content-Type", b"application/x-protobuf"),
                    ("Authorization", b"Bearer t-rotating"),
                    ("x-kafka-client-id", f"app-{next(numbers)}".encode()),
                ]
                try:
                    status = (
                        await _http(target, attacks.http_request("POST", "/v1/metrics", headers, body))
                    ).status
                except (OSError, TimeoutError, ValueError, KeyError) as exc:
                    answers[type(exc).__name__] += 1
                    continue
                answers[f"HTTP {status}"] += 1
                accepted += len(body) if status == 200 else 0
        finally:
            answers["accepted B/s"] = round(accepted / (time.monotonic() - started))
            answers["quota B/s"] = ROTATING_QUOTA
            await _set_quota(target, "user", ROTATING_USER, "producer_byte_rate", None)

    return attack


async def _hold(port: int, start: bytes, answers: Counter[str]) -> None:
    """A socket that sends ``start`` and nothing more, reopened as soon as the sink closes it."""
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(SOURCE, 0))
        except OSError as exc:
            answers[f"connect: {type(exc).__name__}"] += 1
            await asyncio.sleep(0.1)
            continue
        try:
            writer.write(start)
            while answer := await reader.read(65536):  # whatever the sink answers, until it closes
                if answer.startswith(b"HTTP/1.1 "):
                    answers[answer[:12].decode()] += 1
            answers["closed by the sink"] += 1
        except ConnectionError:
            answers["closed by the sink"] += 1
        finally:
            writer.close()


def slow_sockets(target: Target, count: int) -> Attack:
    """``count`` sockets, each reopened as soon as the sink closes it: a third stop in the middle of
    HTTP headers, a third send HTTP headers and never the body, a third start a Kafka frame and never
    finish it."""
    starts = [
        (target.http_port, b"POST /v1/metrics HTTP/1.1\r\nHost: sink\r\nContent-Ty"),
        (
            target.http_port,
            attacks.http_request(
                "POST",
                "/v1/kip714/push-telemetry",
                [("Content-Type", b"application/octet-stream")],
                length=2 * 1024 * 1024,
            ),
        ),
        (target.kafka_port, attacks.declared_frame(1_000_000)),
    ]

    async def attack(answers: Counter[str]) -> None:
        await asyncio.gather(*(_hold(*starts[n % len(starts)], answers) for n in range(count)))

    return attack


def stalled_bodies(target: Target, count: int, body_bytes: int) -> Attack:
    """``count`` OTLP/HTTP uploads announcing ``body_bytes`` and stalling 1 KiB short of the end, each
    reopened as soon as the sink closes it (the body timeout, 30 s): what they hold in memory."""
    start = attacks.http_request(
        "POST", "/v1/metrics", [("Content-Type", b"application/x-protobuf")], length=body_bytes
    ) + bytes(body_bytes - 1024)

    async def attack(answers: Counter[str]) -> None:
        await asyncio.gather(*(_hold(target.http_port, start, answers) for _ in range(count)))

    return attack


def under_request_quota(target: Target, attack: Attack) -> Attack:
    """``attack`` (sent as client id ``hostile``) with a ``request_percentage`` quota of
    ``SENDER_REQUEST_QUOTA`` on that client id, set through the admin API when it starts and removed
    when it ends."""

    async def quoted(answers: Counter[str]) -> None:
        await _set_quota(target, "client-id", "hostile", "request_percentage", SENDER_REQUEST_QUOTA)
        try:
            await attack(answers)
        finally:
            await _set_quota(target, "client-id", "hostile", "request_percentage", None)

    return quoted


def fan_out_attacks(target: Target) -> dict[str, tuple[str, Attack]]:
    """T3-7: one anonymous OTLP/HTTP export naming a client per data point (``attacks.fan_out_points``),
    back to back: 100,000 clients (refused, 413), and as many as ``limits.max_clients_per_export`` (each
    request lands that many rows), without a quota and with a ``request_percentage`` one on the
    sender's client id."""
    crowd, cap = 100_000, DEFAULT_LIMITS.max_clients_per_export
    at_cap = _otlp(attacks.gzip_bomb(attacks.fan_out_points(cap)), gzip=True)
    return {
        "t3-7-fan-out": (
            f"OTLP/HTTP gzip, {crowd:,} clients named in point labels (over the cap: 413)",
            otlp_attack(target, _otlp(attacks.gzip_bomb(attacks.fan_out_points(crowd)), gzip=True)),
        ),
        "t3-7-fan-out-cap": (
            f"OTLP/HTTP gzip, {cap:,} clients named in point labels (at the cap: {cap:,} rows a request)",
            otlp_attack(target, at_cap),
        ),
        "t3-7-fan-out-cap-quota": (
            f"the same with a request_percentage quota of {SENDER_REQUEST_QUOTA:g} on its client id",
            under_request_quota(target, otlp_attack(target, at_cap)),
        ),
    }


def build_attacks(target: Target, args: argparse.Namespace) -> dict[str, tuple[str, Attack]]:
    """Each attack at the largest size the default limits let it send: name -> (what, attack)."""
    limits = DEFAULT_LIMITS
    cap = DEFAULT_MAX_DECOMPRESSED_BYTES - 1024
    push_max = ClientMetricsConfig().telemetry_max_bytes - 1024
    body_max = 2 * ClientMetricsConfig().telemetry_max_bytes  # the HTTP body limit, less its slack
    pairs = limits.max_data_points // 2
    long_text = "a" * KAFKA_STRING_MAX
    api_versions = encode_request(
        ApiVersionsRequest(client_software_name=long_text, client_software_version=long_text), 1
    )
    built: dict[str, tuple[str, Attack]] = {
        "f1-points": (
            f"OTLP/HTTP, {2 * pairs:,} points, every other one invalid (partial success)",
            otlp_attack(target, _otlp(attacks.alternating_points(pairs))),
        ),
        "f1-points-gzip": (
            f"OTLP/HTTP gzip, alternating points inflating to {cap >> 20} MiB",
            otlp_attack(target, _otlp(attacks.gzip_bomb(attacks.alternating_points(cap // 15)), gzip=True)),
        ),
        "f2-protobuf": (
            f"OTLP/HTTP gzip, {cap // 2:,} empty ResourceMetrics ({cap >> 20} MiB)",
            otlp_attack(
                target, _otlp(attacks.gzip_bomb(attacks.empty_resource_metrics(cap // 2)), gzip=True)
            ),
        ),
        "f2-json-flood": (
            f"OTLP/JSON gzip, {cap // 3:,} empty objects",
            otlp_attack(
                target,
                _otlp(
                    attacks.gzip_bomb(attacks.json_object_flood(cap // 3)),
                    content_type=b"application/json",
                    gzip=True,
                ),
            ),
        ),
        "f2-json-deep": (
            f"OTLP/JSON, arrays nested {body_max // 2:,} deep",
            otlp_attack(
                target, _otlp(attacks.json_nesting(body_max // 2 - 16), content_type=b"application/json")
            ),
        ),
        "f2-kip714-zstd": (
            f"KIP-714 push (HTTP), zstd of {cap // 2:,} empty ResourceMetrics",
            kip714_attack(target, 4, attacks.zstd_bomb(attacks.empty_resource_metrics(cap // 2))),
        ),
        "f3-client-id": (
            "OTLP/HTTP with x-kafka-client-id: \\xff",
            otlp_attack(
                target,
                attacks.http_request(
                    "POST",
                    "/v1/metrics",
                    [
                        ("Content-Type", b"application/x-protobuf"),
                        ("x-kafka-client-id", b"\xff"),
                        ("x-kafka-client-instance-id", b"00000000-0000-0000-0000-00000000beef"),
                    ],
                    attacks.empty_resource_metrics(1),
                ),
            ),
        ),
        "f4-software": (
            f"Kafka ApiVersions v3, software name and version of {KAFKA_STRING_MAX:,} chars",
            kafka_attack(target, api_versions),
        ),
        "f5-zstd-frames": (
            f"KIP-714 push (HTTP), {push_max:,} bytes of empty zstd frames",
            kip714_attack(target, 4, attacks.zstd_frames(push_max)),
        ),
        "f5-gzip-members": (
            f"KIP-714 push (HTTP), {push_max:,} bytes of empty gzip members",
            kip714_attack(target, 1, attacks.gzip_members(push_max)),
        ),
        "f9-slow": (
            f"{args.slow_sockets} sockets that never finish their request (HTTP headers/body, Kafka frame)",
            slow_sockets(target, args.slow_sockets),
        ),
        "f9-stalled-bodies": (
            f"{args.stalled_bodies} OTLP/HTTP uploads of {body_max >> 20} MiB stalled 1 KiB short of the end",
            stalled_bodies(target, args.stalled_bodies, body_max),
        ),
        "f10-metadata": (
            f"Kafka Metadata v0 frame of {DEFAULT_SOCKET_REQUEST_MAX_BYTES >> 20} MiB naming "
            f"{(DEFAULT_SOCKET_REQUEST_MAX_BYTES - 16) // 2:,} topics",
            kafka_attack(target, attacks.metadata_flood_frame(DEFAULT_SOCKET_REQUEST_MAX_BYTES - 16)),
        ),
        "f13-client-ids": (
            f"KIP-714 Gets (HTTP), each a new client id of {limits.max_client_id_chars:,} chars",
            client_id_flood(target),
        ),
        "t3-5-rotating-ids": (
            f"OTLP/HTTP as a user with a {ROTATING_QUOTA:,} B/s <user> quota, "
            f"{len(ROTATING_BODY):,} B exports, a new client id each",
            rotating_client_ids(target, ROTATING_BODY),
        ),
    }
    built.update(fan_out_attacks(target))
    return built


async def worst_loop_lag_s(http_port: int) -> float:
    """The sink's worst event loop lag since the previous call (``/metrics`` resets it each scrape)."""
    answer = await attacks.http_exchange(http_port, attacks.http_request("GET", "/metrics", []), TIMEOUT_S)
    for family in text_string_to_metric_families(answer.body.decode()):
        if family.name == LOOP_LAG_MAX:
            return float(family.samples[0].value)
    raise RuntimeError(f"the sink's /metrics has no {LOOP_LAG_MAX}")


class AttackerProcess:
    """One attack run in a Python process of its own (this script with ``--attacker``), as the
    ``/healthz`` prober is: what the attacker's own sending costs stays out of the fleet's process
    (where it would delay the fleet's pacing on the fleet's event loop, which a real attacker on
    another machine cannot do); only what it costs the sink is measured."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self._process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--attacker",
                name,
                "--attacker-ports",
                f"{args.http_port},{args.kafka_port}",
                "--slow-sockets",
                str(args.slow_sockets),
                "--stalled-bodies",
                str(args.stalled_bodies),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    async def started(self) -> None:
        """Once the attack is built and sending (the process says ``ready``)."""
        assert self._process.stdout is not None
        line = await asyncio.to_thread(self._process.stdout.readline)
        if line != b"ready\n":
            raise RuntimeError(f"the attacker process did not start: {line!r}")

    async def stop(self) -> Counter[str]:
        """Stop the attack (closing the process's stdin); what it was answered."""
        out, _ = await asyncio.to_thread(self._process.communicate)
        if self._process.returncode != 0:
            raise RuntimeError(f"the attacker process exited {self._process.returncode}")
        return Counter(json.loads(out))


async def attack_until_stdin_closes(name: str, target: Target, args: argparse.Namespace) -> None:
    """The attacker process: build ``name``, say ``ready``, attack until stdin reaches its end, then
    print what the attack was answered."""
    _, attack = build_attacks(target, args)[name]
    answers: Counter[str] = Counter()
    attacking = asyncio.create_task(attack(answers))
    print("ready", flush=True)
    try:
        await asyncio.to_thread(sys.stdin.buffer.read)
    finally:
        attacking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await attacking
    print(json.dumps(answers), flush=True)


async def run_phase(
    fleet: TelemetryFleet, sink: Server, args: argparse.Namespace, attack: str | None
) -> dict[str, Any]:
    """The fleet for warm-up + measure, the attack back to back beside it."""
    fleet.stats = Stats()
    attacker = None if attack is None else AttackerProcess(attack, args)
    if attacker is not None:
        await attacker.started()
    await asyncio.sleep(MIN_INTERVAL_MS / 1000 * 2)  # every instance's push interval has passed
    attacks.reset_peak_rss(sink.process.pid)
    await worst_loop_lag_s(args.http_port)  # reset: from here on, this phase's
    prober = attacks.HealthProber(args.http_port).start()
    answers: Counter[str] = Counter()
    try:
        if args.saturated:
            await fleet.run_saturated(args.concurrency, args.warmup_s, args.phase_s)
        else:
            await fleet.run_paced(args.rate, args.warmup_s + args.phase_s, args.warmup_s)
    finally:
        if attacker is not None:
            answers = await attacker.stop()
        probes = prober.stop()
    loop_lag_s = await worst_loop_lag_s(args.http_port)
    stats = fleet.stats
    latencies = sorted(stats.window_latencies_s)
    return {
        "accepted_per_s": stats.window_accepted / args.phase_s,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "errors": {str(k): v for k, v in stats.errors.items()} | dict(stats.rpc_failures),
        "accepted_by_instance": stats.accepted_by_instance,
        "worst_healthz_ms": max(p.seconds for p in probes) * 1000,
        "failed_probes": sum(p.status != 200 for p in probes),
        "worst_loop_lag_ms": loop_lag_s * 1000,
        "peak_rss_mib": attacks.peak_rss_bytes(sink.process.pid) / 2**20,
        "attacker": dict(answers.most_common()),
    }


async def drive(sink: Server, target: Target, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    built = build_attacks(target, args)
    chosen = args.attacks.split(",") if args.attacks else list(built)
    unknown = [name for name in chosen if name not in built]
    if unknown:
        raise SystemExit(f"unknown attacks {unknown}; choose from {', '.join(built)}")
    fleet = TelemetryFleet(sink.target, load_payloads(), args.instances, args.channels)
    results: dict[str, dict[str, Any]] = {}
    try:
        await fleet.subscribe()
        results["clean"] = await run_phase(fleet, sink, args, None)
        report_phase("clean", "the fleet alone", results["clean"], results["clean"])
        for name in chosen:
            what, _ = built[name]
            results[name] = await run_phase(fleet, sink, args, name)
            goal = T3_GOAL_RATIO if name in T3_GOAL_PHASES else GOAL_RATIO
            report_phase(name, what, results[name], results["clean"], goal)
    finally:
        await fleet.close()
    return results


def report_phase(
    name: str, what: str, r: dict[str, Any], clean: dict[str, Any], goal_ratio: float = GOAL_RATIO
) -> None:
    ratio = r["accepted_per_s"] / clean["accepted_per_s"] if clean["accepted_per_s"] else float("nan")
    errors = sum(r["errors"].values()) + r["failed_probes"]
    met = ratio >= goal_ratio and errors == 0 and r["worst_healthz_ms"] < GOAL_STALL_MS
    r["ratio"] = ratio
    r["goal_met"] = met
    print(
        f"  {name:<16} {r['accepted_per_s']:>7,.0f} pushes/s  ratio {ratio:5.2f}  errors {errors:>4}  "
        f"p99 {r['p99_ms']:>7.1f} ms  worst /healthz {r['worst_healthz_ms']:>8.1f} ms  "
        f"loop lag {r['worst_loop_lag_ms']:>8.1f} ms  "
        f"peak RSS {r['peak_rss_mib']:>6.0f} MiB  {'meets' if met else 'MISSES'} the goal",
        flush=True,
    )
    print(f"  {'':<16} {what}; attacker answered {r['attacker'] or '-'}", flush=True)
    if r["errors"]:
        print(f"  {'':<16} fleet errors {r['errors']}", flush=True)


def verify_table(table_uri: str, acked: Counter[bytes]) -> tuple[int, int]:
    """Acknowledged fleet pushes missing from the table, and fleet rows never acknowledged."""
    column = DeltaTable(table_uri).to_pyarrow_table(columns=["client_instance_id"]).column(0)
    fleet = {kafka_uuid_string(uuid.UUID(bytes=k)) for k in acked}  # the table's form
    rows = Counter(v for v in column.to_pylist() if v in fleet)
    expected = Counter({kafka_uuid_string(uuid.UUID(bytes=k)): v for k, v in acked.items()})
    return (expected - rows).total(), (rows - expected).total()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--instances", type=int, default=4000, help="simulated client instances")
    parser.add_argument("--channels", type=int, default=16, help="gRPC channels (connections)")
    parser.add_argument("--rate", type=float, default=1000.0, help="fleet pushes/s (open loop)")
    parser.add_argument(
        "--saturated", action="store_true", help="closed loop at --concurrency instead of --rate"
    )
    parser.add_argument("--concurrency", type=int, default=1000, help="pushes in flight (--saturated)")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="per phase, before the window")
    parser.add_argument("--phase-s", type=float, default=15.0, help="measured window per phase")
    parser.add_argument("--slow-sockets", type=int, default=500, help="sockets the slow-client attack holds")
    parser.add_argument(
        "--stalled-bodies", type=int, default=600, help="uploads the stalled-bodies attack holds"
    )
    parser.add_argument("--attacks", help="comma-separated attack names (default: all)")
    parser.add_argument("--attacker", help=argparse.SUPPRESS)  # the attacker process: this attack
    parser.add_argument("--attacker-ports", help=argparse.SUPPRESS)  # and the sink's HTTP,Kafka ports
    args = parser.parse_args()
    if args.attacker:
        http_port, kafka_port = map(int, args.attacker_ports.split(","))
        asyncio.run(attack_until_stdin_closes(args.attacker, Target(http_port, kafka_port), args))
        return
    workdir = Path(tempfile.mkdtemp(prefix="hostile-bench-"))
    args.http_port = free_port()
    os.environ["TELEMETRY_SINK_SERVER__HTTP_PORT"] = str(args.http_port)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load = (
        f"{args.concurrency:,} pushes in flight" if args.saturated else f"{args.rate:,.0f} pushes/s offered"
    )
    print(
        f"hostile: {args.instances:,} instances over {args.channels} channels, "
        f"{load}, interval.ms {MIN_INTERVAL_MS}, "
        f"phases of {args.warmup_s:g} + {args.phase_s:g} s, "
        f"started {started}; goal: ratio >= {GOAL_RATIO}, 0 errors, worst /healthz < {GOAL_STALL_MS:g} ms",
        flush=True,
    )
    try:
        rotating_ids_environment(workdir)
        sink = start_sink(workdir, MIN_INTERVAL_MS, max_in_flight=2 * args.concurrency)
        assert sink.kafka_port is not None
        assert sink.table_uri is not None
        args.kafka_port = sink.kafka_port
        try:
            results = asyncio.run(drive(sink, Target(args.http_port, sink.kafka_port), args))
        finally:
            code = sink.stop()
        if code != 0:
            raise SystemExit(f"the sink exited {code}; log:\n{sink.log_tail()}")
        acked: Counter[bytes] = Counter()
        for r in results.values():
            acked.update(r.pop("accepted_by_instance"))
        missing, extra = verify_table(sink.table_uri, acked)
        print(
            f"  Delta table: {acked.total():,} acknowledged fleet pushes, missing {missing}, extra {extra}",
            flush=True,
        )
        met = [name for name, r in results.items() if r["goal_met"]]
        missed = [name for name, r in results.items() if not r["goal_met"]]
        print(f"  goal met: {', '.join(met) or '-'}; missed: {', '.join(missed) or '-'}")
        print(json.dumps({"benchmark": "hostile", "python": platform.python_version(), **results}))
        if missing or extra:
            raise SystemExit("the Delta table does not match the acknowledged pushes")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
