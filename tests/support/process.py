"""``telemetry-sink serve`` as a real child process, with the ports it picked read from its banner; what
every test of a child process needs: a free port to give it, and the line it says when ready; and
``run_isolated``, for a measurement of process-wide state in a fresh interpreter."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support.paths import REPO

BANNER = re.compile(
    r"serving gRPC on [\d.]+:(\d+), HTTP on [\d.]+:(\d+), Kafka on [\d.]+:(\d+), landing in (\S+)"
)
BASE_CONFIG = """\
data_root: {root}
replica_id: {replica}
server:
  host: 127.0.0.1
  grpc_port: 0
  http_port: 0
  shutdown_grace_s: 5
kafka_listener:
  port: 0
"""
CLI = str(Path(sys.executable).with_name("telemetry-sink"))


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PICKS = random.Random()


def free_port() -> int:
    """A loopback port nothing listens on now, for a process that cannot say which port 0 gave it.

    Picked below the kernel's ephemeral range: a port the kernel hands out for port 0 (as Spark's
    executor, block manager and RPC endpoints ask for theirs) could be taken by such a socket between
    this pick and the late bind of a server that starts slowly (the sql-server binds after Spark and its
    executor JVM are up), and it was."""
    low = _ephemeral_low()
    for _ in range(100):
        port = _PICKS.randrange(max(1024, low - 12_000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # a crowded range: the kernel's choice
        probe.bind(("127.0.0.1", 0))
        chosen: int = probe.getsockname()[1]
        return chosen


def line_matching(stream: IO[str], pattern: str, seen: list[str] | None = None) -> re.Match[str]:
    """Read ``stream`` up to a line matching ``pattern`` (a JVM writes its own lines too), keeping the
    lines read in ``seen``."""
    for line in stream:
        if seen is not None:
            seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    said = "".join(seen or ())[-3000:]
    raise AssertionError(f"the process ended without a line matching {pattern!r}: {said}")


def run_isolated(measure: Callable[[], object], timeout_s: float = 300) -> object:
    """``measure()`` run in a fresh interpreter, its JSON result returned.

    For a measurement of process-wide state (garbage-collector counts, the freeze count, tracemalloc,
    rlimits, threads): in the test process, threads left by libraries and earlier tests allocate and
    free objects between two readings. ``measure`` is a module-level function of an importable module
    (a test module's own helper); the fresh interpreter imports that module, so nothing but the main
    thread runs while it measures, and its import-time objects are the module's own.
    """
    module, name = measure.__module__, measure.__qualname__
    if "." in name or "<" in name:
        raise ValueError(f"{name} must be a module-level function to run in another interpreter")
    script = f"import json, {module} as m; print(json.dumps(m.{name}()))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"{module}.{name} failed in its own interpreter:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


@dataclass
class Running:
    process: subprocess.Popen[str]
    grpc_port: int
    http_port: int
    table_uri: str
    log: Path
    kafka_port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@contextmanager
def running_sink(
    workdir: Path,
    data_root: Path | str,
    replica: str = "sink-test",
    extra: str = "",
    *,
    open_files: int | tuple[int, int] | None = None,
) -> Iterator[Running]:
    """Start a sink with ``BASE_CONFIG`` plus ``extra`` YAML (and, given ``open_files``, that open-file
    limit: one number for both the soft and the hard one, or ``(soft, hard)``); kill it if the test
    leaves it running."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / f"{replica}.yaml"
    config.write_text(BASE_CONFIG.format(root=data_root, replica=replica) + extra)
    log = workdir / f"{replica}.log"
    # util-linux's prlimit sets the limit and execs the sink: the process is the sink's
    soft, hard = (open_files, open_files) if isinstance(open_files, int) else open_files or (0, 0)
    limited = [] if open_files is None else ["prlimit", f"--nofile={soft}:{hard}", "--"]
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            [*limited, CLI, "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        ) as process,
    ):
        assert process.stdout is not None
        match = BANNER.search(banner := process.stdout.readline())
        try:
            if match is None:
                pytest.fail(f"no banner from serve: {banner!r}; log: {log.read_text()}")
            yield Running(process, int(match[1]), int(match[2]), match[4], log, int(match[3]))
        finally:
            if process.poll() is None:
                process.kill()


@contextmanager
def line_driven(command: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A client program that runs until a line arrives on its stdin and then prints ``closed`` (the tests'
    Java and librdkafka clients): started, and, when the block ends without an error, told to close
    and heard closing; killed if it is still running after that."""
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    ) as client:
        assert client.stdin is not None
        assert client.stdout is not None
        try:
            yield client
            client.stdin.write("close\n")
            client.stdin.flush()
            assert client.stdout.readline().strip() == "closed"
        finally:
            if client.poll() is None:
                client.kill()
