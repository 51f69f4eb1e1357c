"""The most of Kafka's Java producers the sink's Kafka listener keeps up with, against a real Kafka 4.4
broker with the same driver and push interval, in one run.

One driver JVM (``TelemetryFleet``, kafka-clients 4.4.0, ``tests/support/java``) runs producers that
send no records and push their telemetry: ``enable.metrics.push`` is Kafka's default, each fetches its
subscription (``org.apache.kafka.``, every metric a Java client has, ``interval.ms`` ``--interval-ms``,
1,000 by default) and pushes its real metrics, zstd-compressed as both targets accept, every interval.
The same ladder of fleet sizes (``--ladder``) runs against each target in turn, the broker first and
then the sink, each alone on the machine with the driver (a fresh driver per target):

- **broker**: a single-node KRaft Kafka 4.4 broker (``tests/support/kafka_broker.py``), its subscription
  set with Kafka's own ``kafka-client-metrics.sh``; its client-telemetry reporter exports nothing and
  counts the pushes the broker hands it, the pushes it accepted (``NoopTelemetryReporter``, which
  writes the count to a file ten times a second).
- **sink**: ``telemetry-sink serve`` with the same subscription in its configuration, its Delta
  exporter at its defaults, no limit on connections per address (``SINK_EXTRA``: the whole fleet
  connects from one address) and ``server.max_concurrent_requests`` twice the largest step, so that
  admission control never sheds the load (``--admission``; as ``bench.py`` does): a push is in flight
  until it is durable, about a quarter of a second, so a fleet pushing every second holds about a
  quarter of its size in flight, and at the default (500, as Kafka's ``queued.max.requests``) the
  sink would answer the excess THROTTLING_QUOTA_EXCEEDED. Its accepted and refused requests come from
  ``/metrics`` (``telemetry_sink_requests_total``, Kafka transport).

At each step the driver adds producers until the fleet has that many (each has its instance id, so
its subscription), two push intervals pass, then the accepted pushes are counted over ``--window-s``.
A Java client pushes an interval after the answer to its previous push, so each client's cycle is
the interval plus the answer's wait: on the broker, whose plugin here returns at once, about the
interval; on the sink, which answers once the push is durable in Delta (a group commit, about 0.2-0.3
s), longer. A target that falls behind answers later and later, and its clients push less often. The
step's mean wait is what the accepted pushes say: instances / accepted pushes per second - interval
(the driver's own delay in it, the same on both targets). A step is sustained when that wait is at
most ``MAX_WAIT_SHARE`` of the interval (the clients keep two thirds of their cadence or more) and,
on the sink, no Get or push was answered with an error (the broker does not count its refusals where
a plugin can read them; a refused push is missing from its count instead, and lengthens the wait).
A target's figure is its largest sustained step; its ladder stops at the first step it does not
sustain. The ratio is the sink's figure over the broker's (issue 34's goal: at least 0.5: the broker
drops the payloads, the sink lands each durably). After its ladder the sink is stopped (SIGTERM: it
lands what it accepted) and its Delta table must hold exactly one row per push it accepted.

Run: ``.venv/bin/python benchmarks/kafka_listener/java_fleet.py [--ladder 250,500,1000,...
--interval-ms 1000 --window-s 10]``. It needs the jars setup fetched (``artifacts``) and a JDK.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Final

from deltalake import DeltaTable

from benchmarks.push_path.harness import Server, cpu_seconds, start_sink
from tests.support.kafka_broker import KafkaTools, build_helpers, java_command, kafka_broker
from tests.support.process import free_port

MAX_WAIT_SHARE: Final = 0.5
"""The longest mean wait for an answer, as a share of the push interval, of a sustained step."""
READY_TIMEOUT_S: Final = 300.0
"""How long the driver may take to add a step's producers (each fetches its subscription)."""
DRIVER_HEAP: Final = "4g"
SINK_EXTRA: Final = "\nquotas:\n  max.connections.per.ip: 2147483647"
"""No limit on connections per address (Kafka's default; the sink's is 1,000, docs/quotas.md), as for
a fleet behind one NAT address."""
EXPORTS_FILE_KEY: Final = "telemetry.sink.oracle.exports.file"
_ACCEPTED: Final = re.compile(
    r"^telemetry_sink_requests_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$", re.MULTILINE
)


@dataclass
class Counts:
    """What a target has answered so far: pushes accepted, and Gets or pushes refused (-1: unknown)."""

    accepted: int
    refused: int


class Driver:
    """The ``TelemetryFleet`` JVM: ``grow`` to a fleet size, ``close`` (every producer's terminating push)."""

    def __init__(self, helpers: Path, bootstrap: str, log: IO[str]) -> None:
        command = [*java_command(helpers, DRIVER_HEAP), "telemetry.sink.oracle.TelemetryFleet",
                   f"bootstrap.servers={bootstrap}"]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        self.size = 0

    def grow(self, size: int) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"add {size - self.size}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if line.strip() != f"ready {size}":
            raise SystemExit(f"the driver answered {line!r} growing to {size} (exit {self.process.poll()})")
        self.size = size

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def broker_counts(exports_file: Path) -> Counts:
    return Counts(int(exports_file.read_text() or 0), -1)


def sink_counts(http_port: int) -> Counts:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    accepted = refused = 0
    for match in _ACCEPTED.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("transport") != "kafka":
            continue
        if labels.get("rpc") not in ("PushTelemetry", "GetTelemetrySubscriptions"):
            continue
        n = int(float(match["value"]))
        if labels["code"] != "0":
            refused += n
        elif labels["rpc"] == "PushTelemetry":
            accepted += n
    return Counts(accepted, refused)


def climb(
    name: str, driver: Driver, counts: Callable[[], Counts], pid: int, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The ladder against one target: each step's accepted pushes/s, refusals and target CPU."""
    steps: list[dict[str, Any]] = []
    interval_s = args.interval_ms / 1000
    for size in args.ladder:
        started = time.monotonic()
        driver.grow(size)
        ramp_s = time.monotonic() - started
        time.sleep(2 * interval_s)  # every new producer has pushed once: the window sees the steady state
        before, cpu_before, t0 = counts(), cpu_pair(pid, driver), time.monotonic()
        time.sleep(args.window_s)
        after, cpu_after, t1 = counts(), cpu_pair(pid, driver), time.monotonic()
        rate = (after.accepted - before.accepted) / (t1 - t0)
        refused = after.refused - before.refused if after.refused >= 0 else -1
        wait_s = size / rate - interval_s if rate else float("inf")
        sustained = wait_s <= MAX_WAIT_SHARE * interval_s and refused <= 0
        steps.append(
            {
                "instances": size,
                "accepted_per_s": rate,
                "mean_wait_ms": wait_s * 1000,
                "refused": refused,
                "target_cpu": (cpu_after[0] - cpu_before[0]) / (t1 - t0),
                "driver_cpu": (cpu_after[1] - cpu_before[1]) / (t1 - t0),
                "ramp_s": ramp_s,
                "sustained": sustained,
            }
        )
        print(
            f"  {name:<6} {size:>6,} instances  {rate:>8,.0f} pushes/s accepted  "
            f"mean wait {wait_s * 1000:>6,.0f} ms  refused {'-' if refused < 0 else refused:>5}  "
            f"CPU target {steps[-1]['target_cpu']:4.2f} driver {steps[-1]['driver_cpu']:4.2f} cores  "
            f"ramp {ramp_s:5.1f} s  {'sustained' if sustained else 'NOT sustained'}",
            flush=True,
        )
        if not sustained:
            break
    return steps


def cpu_pair(pid: int, driver: Driver) -> tuple[float, float]:
    """CPU seconds so far of the target and of the driver."""
    return cpu_seconds(pid), cpu_seconds(driver.process.pid)


def best(steps: list[dict[str, Any]]) -> int:
    return max((step["instances"] for step in steps if step["sustained"]), default=0)


@contextlib.contextmanager
def driven(helpers: Path, bootstrap: str, workdir: Path, name: str) -> Iterator[Driver]:
    with (workdir / f"driver-{name}.log").open("w") as log:
        driver = Driver(helpers, bootstrap, log)
        try:
            yield driver
        finally:
            driver.close()


def run_broker(helpers: Path, workdir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    exports = workdir / "broker-exports"
    exports.write_text("0")
    settings = {EXPORTS_FILE_KEY: str(exports)}
    with kafka_broker(workdir / "broker", helpers, settings) as broker:
        tools = KafkaTools(workdir / "tools", helpers)
        try:
            run = tools.run("kafka-client-metrics", "--bootstrap-server", broker.bootstrap, "--alter",
                            "--name", "bench", "--metrics", "org.apache.kafka.",
                            "--interval", str(args.interval_ms))  # fmt: skip
            if run.status != 0:
                raise SystemExit(f"kafka-client-metrics.sh failed: {run.stdout}{run.stderr}")
        finally:
            tools.close()
        pid = _broker_pid(broker.plaintext_port)
        with driven(helpers, broker.bootstrap, workdir, "broker") as driver:
            return climb("broker", driver, lambda: broker_counts(exports), pid, args)


def _broker_pid(port: int) -> int:
    """The broker's JVM: the process listening on its port (for its CPU time)."""
    answer = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=True)
    match = re.search(r"pid=(\d+)", answer.stdout)
    if match is None:
        raise SystemExit(f"no process listens on {port}: {answer.stdout!r}")
    return int(match[1])


def run_sink(helpers: Path, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    directory = workdir / "sink"
    directory.mkdir()
    http_port = free_port()
    os.environ["TELEMETRY_SINK_SERVER__HTTP_PORT"] = str(http_port)
    in_flight = 2 * max(args.ladder) if args.admission is None else args.admission
    server: Server = start_sink(
        directory, args.interval_ms, max_in_flight=in_flight or None, kafka_extra=SINK_EXTRA
    )
    try:
        assert server.kafka_port is not None
        with driven(helpers, f"127.0.0.1:{server.kafka_port}", workdir, "sink") as driver:
            steps = climb("sink", driver, lambda: sink_counts(http_port), server.process.pid, args)
        accepted = sink_counts(http_port).accepted  # the terminating pushes included
    finally:
        code = server.stop()
    if code != 0:
        raise SystemExit(f"the sink exited {code}; log:\n{server.log_tail()}")
    assert server.table_uri is not None
    rows = DeltaTable(server.table_uri).to_pyarrow_table(columns=["client_instance_id"]).num_rows
    return {"steps": steps, "accepted": accepted, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--ladder",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[50, 250, 500, 1000, 1500, 2000, 2500, 3000],
        help="fleet sizes, ascending (comma-separated)",
    )
    parser.add_argument("--interval-ms", type=int, default=1000, help="the subscription's interval.ms")
    parser.add_argument("--window-s", type=float, default=10.0, help="measured window per step")
    parser.add_argument(
        "--admission",
        type=int,
        help="the sink's server.max_concurrent_requests (default: twice the largest step, so that admission "
        "never sheds the load; 0: the sink's own default, 500)",
    )
    parser.add_argument("--only", choices=["broker", "sink"], help="one target only (no ratio)")
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary directory)")
    args = parser.parse_args()
    if args.ladder != sorted(set(args.ladder)):
        parser.error("--ladder must be ascending")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafka-java-fleet-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"kafka listener vs Kafka 4.4 broker, Java producers (kafka-clients 4.4.0) in one driver JVM: "
        f"interval.ms {args.interval_ms}, window {args.window_s:g} s per step, ladder "
        f"{','.join(map(str, args.ladder))}; sustained: a mean wait for the answer of at most "
        f"{MAX_WAIT_SHARE:g} interval, 0 refused "
        f"(started {time.strftime('%Y-%m-%d %H:%M:%S %Z')})",
        flush=True,
    )
    try:
        helpers = build_helpers(workdir / "classes")
        broker = run_broker(helpers, workdir, args) if args.only != "sink" else []
        no_sink: dict[str, Any] = {"steps": [], "accepted": 0, "rows": 0}
        sink = run_sink(helpers, workdir, args) if args.only != "broker" else no_sink
        ratio = best(sink["steps"]) / best(broker) if best(broker) else float("nan")
        print(
            f"  most instances sustained: broker {best(broker):,}, sink {best(sink['steps']):,}; "
            f"ratio (sink / broker) {ratio:.3f} (goal >= 0.5)",
            flush=True,
        )
        print(f"  sink Delta table: {sink['rows']:,} rows, {sink['accepted']:,} pushes accepted", flush=True)
        print(
            json.dumps(
                {
                    "benchmark": "kafka_listener_java",
                    "python": platform.python_version(),
                    "machine": platform.machine(),
                    "date": time.strftime("%Y-%m-%d"),
                    "interval_ms": args.interval_ms,
                    "window_s": args.window_s,
                    "broker": broker,
                    "sink": sink,
                    "ratio": ratio,
                }
            )
        )
        if sink["rows"] != sink["accepted"]:
            raise SystemExit("the sink's Delta table does not hold one row per accepted push")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
