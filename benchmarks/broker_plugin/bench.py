"""What the broker plugin costs a real Kafka 4.4 broker's producers, and how many pushes it forwards per
broker core, in one run.

**Produce impact.** Interleaved runs, each on a fresh single-node KRaft broker
(``tests/support/kafka_broker.py``) with a client-metrics subscription of every Java client metric at
``--interval-ms`` (500 by default), made with ``kafka-client-metrics.sh``:

- (a) the broker's client-telemetry reporter exports nothing (``NoopTelemetryReporter``);
- (b) the broker plugin (``broker_plugin``) forwards every push to a running sink, which lands it in
  Delta (the sink trusts the plugin's token as a forwarder);
- (c) the plugin forwards to a null receiver (below): the plugin's own cost, without the sink's CPU
  on the same machine.

In each run a ``TelemetryFleet`` driver JVM holds ``--fleet`` Java producers (200) that send no records
and push their telemetry every interval, and Kafka's own ``kafka-producer-perf-test.sh``
(``ProducerPerformance``) sends ``--rate`` records a second (5,000, 512 bytes, ``acks=1``) for
``--seconds`` (20) and reports its throughput and latency percentiles; its own telemetry is pushed
too. The order is a b c a b c a. Goals (issue 35): (b)'s mean throughput at least 0.97 of (a)'s, and
(b)'s p99 produce latency within the spread of the (a) runs' (at most their largest); the spread is
printed, with (c)'s figures and each run's broker and sink CPU (the sink's decoder processes included).
The brokers run with ``kafka-server-start.sh``'s collector flags (G1), not the test fixture's serial
collector.

**Forwarding capacity.** A broker whose plugin forwards to a null receiver (an asyncio HTTP server
that reads each request and answers 200), a fleet grown along ``--ladder``: per step, the pushes the
plugin forwarded per second (its ``forwarded-total`` from the broker's JMX, read with
``kafka-jmx.sh``), what it dropped, and the broker's CPU, so pushes per broker core-second. The
driver's own limit (about a thousand producers at 500 ms on this machine) bounds the ladder.

All on one machine: the driver, the producer, the broker and (b)'s sink share its cores, so (b)'s
sink takes CPU the broker would otherwise have. In production the sink runs on machines of its own;
here it runs at the lowest CPU priority (``--sink-nice 19``), so that it takes the time the others
leave: (b) still forwards to a real sink that lands every push (its CPU is printed), and what (b)
adds to the broker is the plugin's. ``--sink-nice 0`` measures the two competing.

Run: ``.venv/bin/python benchmarks/broker_plugin/bench.py [--fleet 200 --rate 5000 --seconds 20
--ladder 200,500,1000]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

from benchmarks.kafka_listener.java_fleet import _broker_pid, driven
from benchmarks.push_path.harness import cpu_seconds, start_sink
from broker_plugin import CLASS, build
from tests.support.kafka_broker import (
    KafkaBroker,
    KafkaTools,
    build_helpers,
    java_command,
    jmx_options,
    kafka_broker,
)
from tests.support.process import free_port

ORDER: Final = ("noop", "plugin", "null", "noop", "plugin", "null", "noop")
"""(a) no-op reporter, (b) the plugin and a sink, (c) the plugin and a null receiver, interleaved."""
KAFKA_JVM: Final = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35")
"""The collector flags ``kafka-server-start.sh`` gives a broker (``KAFKA_JVM_PERFORMANCE_OPTS``), not the
test fixture's serial collector: the produce latency depends on them."""
TOKEN: Final = "bench-forwarder"
FORWARDER: Final = "User:bench-forwarder"
_PERF: Final = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec .*?, (?P<avg>[\d.]+) ms avg latency, "
    r"(?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th"
)


@contextlib.contextmanager
def broker_with(
    helpers: Path,
    workdir: Path,
    tools: KafkaTools,
    settings: dict[str, str],
    *,
    interval_ms: int,
    jmx_port: int,
) -> Iterator[KafkaBroker]:
    plugins = [build()] if settings.get("metric.reporters") == CLASS else []
    options = [*KAFKA_JVM, *jmx_options(jmx_port)]
    with kafka_broker(workdir, helpers, settings, plugins=plugins, options=options) as broker:
        run = tools.run(
            "kafka-client-metrics", "--bootstrap-server", broker.bootstrap, "--alter", "--name", "bench",
            "--metrics", "org.apache.kafka.", "--interval", str(interval_ms),
        )  # fmt: skip
        if run.status != 0:
            raise SystemExit(f"kafka-client-metrics.sh failed: {run.stdout}{run.stderr}")
        yield broker


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of a process and of its children (the sink's decoder processes)."""
    total = cpu_seconds(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                total += cpu_seconds(int(stat.parent.name))
    return total


def produce(helpers: Path, broker: KafkaBroker, args: argparse.Namespace) -> dict[str, float]:
    """``kafka-producer-perf-test.sh`` at ``--rate`` for ``--seconds``: its final line, parsed."""
    records = args.rate * args.seconds
    command = [
        *java_command(helpers, "512m"), "org.apache.kafka.tools.ProducerPerformance", "--topic", "bench",
        "--num-records", str(records), "--record-size", "512", "--throughput", str(args.rate),
        "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=1", "client.id=bench-perf",
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    match = _PERF.search(out.strip().splitlines()[-1])
    if match is None:
        raise SystemExit(f"kafka-producer-perf-test.sh said: {out[-2000:]}")
    return {key: float(value) for key, value in match.groupdict().items()}


def jmx(tools: KafkaTools, port: int) -> dict[str, float]:
    return tools.jmx(port, "kafka.server:type=telemetry-sink-forwarder")


def impact_run(
    helpers: Path, workdir: Path, tools: KafkaTools, kind: str, args: argparse.Namespace
) -> dict[str, Any]:
    settings: dict[str, str]
    sink = None
    workdir.mkdir(parents=True)
    if kind == "noop":
        settings = {"metric.reporters": "telemetry.sink.oracle.NoopTelemetryReporter"}
    elif kind == "null":
        settings = {
            "metric.reporters": CLASS,
            "telemetry.sink.forwarder.endpoint": f"http://127.0.0.1:{NullReceiver().port}/v1/metrics",
        }
    else:
        tokens = workdir / "tokens.yaml"
        tokens.write_text(f'"{TOKEN}": "{FORWARDER}"\n')
        http_port = free_port()
        os.environ["TELEMETRY_SINK_SERVER__HTTP_PORT"] = str(http_port)
        extra = f"\nsecurity:\n  tokens_file: {tokens}\n  trusted_forwarders: ['{FORWARDER}']"
        (workdir / "sink").mkdir()
        sink = start_sink(workdir / "sink", args.interval_ms, kafka_extra=extra, niceness=args.sink_nice)
        settings = {
            "metric.reporters": CLASS,
            "telemetry.sink.forwarder.endpoint": f"http://127.0.0.1:{http_port}/v1/metrics",
            "telemetry.sink.forwarder.bearer.token": TOKEN,
        }
    try:
        with (
            broker_with(
                helpers,
                workdir / "broker",
                tools,
                settings,
                interval_ms=args.interval_ms,
                jmx_port=free_port(),
            ) as broker,
            driven(helpers, broker.bootstrap, workdir, kind) as driver,
        ):
            driver.grow(args.fleet)
            time.sleep(2 * args.interval_ms / 1000)
            pid = _broker_pid(broker.plaintext_port)
            cpu = cpu_seconds(pid), tree_cpu_seconds(sink.process.pid) if sink else 0.0, time.monotonic()
            result = produce(helpers, broker, args)
            took = time.monotonic() - cpu[2]
            broker_cores = (cpu_seconds(pid) - cpu[0]) / took
            sink_cores = (tree_cpu_seconds(sink.process.pid) - cpu[1]) / took if sink else 0.0
            return {"kind": kind, **result, "broker_cores": broker_cores, "sink_cores": sink_cores}
    finally:
        if sink is not None:
            sink.stop()


class NullReceiver:
    """An HTTP server that reads each request and answers 200 with an empty body, in a thread."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
                    await reader.readexactly(length)
                    self.requests += 1
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        async def main() -> None:
            await asyncio.start_server(serve, "127.0.0.1", self.port)
            self._started.set()
            await asyncio.Event().wait()

        self._loop.run_until_complete(main())


def capacity(
    helpers: Path, workdir: Path, tools: KafkaTools, args: argparse.Namespace
) -> list[dict[str, Any]]:
    receiver = NullReceiver()
    jmx_port = free_port()
    settings = {
        "metric.reporters": CLASS,
        "telemetry.sink.forwarder.endpoint": f"http://127.0.0.1:{receiver.port}/v1/metrics",
    }
    steps: list[dict[str, Any]] = []
    with broker_with(
        helpers, workdir / "capacity-broker", tools, settings, interval_ms=args.interval_ms, jmx_port=jmx_port
    ) as broker:
        pid = _broker_pid(broker.plaintext_port)
        with driven(helpers, broker.bootstrap, workdir, "capacity") as driver:
            for size in args.ladder:
                driver.grow(size)
                time.sleep(2 * args.interval_ms / 1000)
                before, cpu0, t0 = jmx(tools, jmx_port), cpu_seconds(pid), time.monotonic()
                time.sleep(args.window_s)
                after, cpu1, t1 = jmx(tools, jmx_port), cpu_seconds(pid), time.monotonic()
                rate = (after["forwarded-total"] - before["forwarded-total"]) / (t1 - t0)
                cores = (cpu1 - cpu0) / (t1 - t0)
                step = {
                    "instances": size,
                    "forwarded_per_s": rate,
                    "dropped": after["dropped-total"] - before["dropped-total"],
                    "broker_cores": cores,
                    "pushes_per_core_s": rate / cores if cores else float("nan"),
                    "requests": receiver.requests,
                }
                steps.append(step)
                print(
                    f"  capacity {size:>6,} instances  {rate:>8,.0f} pushes/s forwarded  dropped "
                    f"{step['dropped']:>5,.0f}  broker {cores:4.2f} cores  "
                    f"{step['pushes_per_core_s']:>8,.0f} pushes per broker core-second",
                    flush=True,
                )
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--fleet", type=int, default=200, help="telemetry clients in the impact runs")
    parser.add_argument("--rate", type=int, default=5000, help="records/s the producer sends")
    parser.add_argument("--seconds", type=int, default=20, help="how long the producer sends")
    parser.add_argument("--interval-ms", type=int, default=500, help="the subscription's interval.ms")
    parser.add_argument(
        "--ladder", type=lambda text: [int(n) for n in text.split(",")], default=[200, 500, 1000],
        help="fleet sizes of the capacity part",
    )  # fmt: skip
    parser.add_argument("--window-s", type=float, default=10.0, help="measured window per capacity step")
    parser.add_argument(
        "--sink-nice",
        type=int,
        default=19,
        help="(b)'s sink runs under nice -n this (0: as the broker): it stands for a sink on other machines",
    )
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="broker-plugin-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"broker plugin on a Kafka 4.4 broker: {args.fleet} telemetry clients at interval.ms "
        f"{args.interval_ms}, "
        f"producer {args.rate:,} records/s x {args.seconds} s, order {' '.join(ORDER)} "
        f"(started {time.strftime('%Y-%m-%d %H:%M:%S %Z')})",
        flush=True,
    )
    try:
        helpers = build_helpers(workdir / "classes")
        tools = KafkaTools(workdir / "tools", helpers)
        try:
            runs = []
            for n, kind in enumerate(ORDER):
                run = impact_run(helpers, workdir / f"run-{n}-{kind}", tools, kind, args)
                runs.append(run)
                print(
                    f"  {kind:<6} {run['rate']:>9,.0f} records/s  latency avg {run['avg']:6.1f} ms  "
                    f"p50 {run['p50']:4.0f}  p95 {run['p95']:4.0f}  p99 {run['p99']:4.0f}  "
                    f"max {run['max']:6.0f} ms  CPU broker {run['broker_cores']:4.2f} sink "
                    f"{run['sink_cores']:4.2f} cores",
                    flush=True,
                )
            steps = capacity(helpers, workdir, tools, args)
        finally:
            tools.close()
        noop = [r for r in runs if r["kind"] == "noop"]
        spread = (min(r["p99"] for r in noop), max(r["p99"] for r in noop))
        ratios = {}
        for kind, name in (("plugin", "(b) plugin and sink"), ("null", "(c) plugin and null receiver")):
            these = [r for r in runs if r["kind"] == kind]
            ratios[kind] = statistics.mean(r["rate"] for r in these) / statistics.mean(
                r["rate"] for r in noop
            )
            worst = max(r["p99"] for r in these)
            verdict = "within" if worst <= spread[1] else "OUTSIDE"
            print(
                f"  {name}: throughput / (a) {ratios[kind]:.3f} (goal >= 0.97); p99 worst {worst:.0f} ms, "
                f"{verdict} (a)'s spread {spread[0]:.0f}-{spread[1]:.0f} ms",
                flush=True,
            )
        ratio = ratios["plugin"]
        print(json.dumps({
            "benchmark": "broker_plugin", "python": platform.python_version(), "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%d"), "args": {k: str(v) for k, v in vars(args).items()},
            "runs": runs, "ratio": ratio, "null_ratio": ratios["null"], "p99_spread": spread,
            "capacity": steps,
        }))  # fmt: skip
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
