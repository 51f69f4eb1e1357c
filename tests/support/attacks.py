"""What a hostile client sends (issue 17), and the means to send it where no client library would.

Shared by the hostile-client suite (``tests/ingest/test_hostile_clients.py``) and the hostile
benchmark (``benchmarks/hostile/bench.py``). Every builder takes its size from the caller, so the
suite sends small attacks and the benchmark the largest the sink's limits allow:

- OTLP protobuf, hand-encoded (``alternating_points``: valid points alternating with invalid ones,
  which the sink drops one by one; ``empty_resource_metrics``: the cheapest element flood, ``0a 00``
  per ``ResourceMetrics``; ``fan_out_points``: one export naming a client instance per point, T3-7)
  and OTLP JSON (``json_object_flood``, ``json_nesting``);
- compression: ``gzip_bomb``/``zstd_bomb`` (a small body that inflates to ``size`` bytes), and
  ``gzip_members``/``zstd_frames`` (thousands of empty members or frames in one payload);
- Kafka frames: ``metadata_flood_frame`` (one Metadata v0 request naming millions of topics) and
  ``declared_frame`` (a size prefix larger than the listener takes);
- raw HTTP/1.1 (``http_request``, ``http_exchange``): header bytes exactly as given (``\\xff`` in a
  client id), bodies sent all at once or not at all;
- ``HealthProber``: a process of its own that asks ``GET /healthz`` over and over on fresh
  connections and records each answer and how long it took, so a stalled event loop shows as a slow
  or failed probe (and the load of the process that started it does not);
  ``reset_peak_rss`` and ``peak_rss_bytes``: the sink's peak resident memory over an attack.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import select
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import zstandard

__all__ = [
    "HealthProber",
    "HttpAnswer",
    "Probe",
    "alternating_points",
    "declared_frame",
    "empty_resource_metrics",
    "fan_out_ids",
    "fan_out_points",
    "gzip_bomb",
    "gzip_members",
    "http_exchange",
    "http_request",
    "json_nesting",
    "json_object_flood",
    "metadata_flood_frame",
    "peak_rss_bytes",
    "reset_peak_rss",
    "varint",
    "zstd_bomb",
    "zstd_frames",
]


REPO_ROOT: Final = Path(__file__).resolve().parents[2]


def varint(n: int) -> bytes:
    """An unsigned varint, as protobuf and Kafka's compact lengths write it."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


_VALID_POINT_FIELDS: Final = b"\x19" + (1).to_bytes(8, "little") + b"\x40\x01"
VALID_POINT: Final = _field(1, _VALID_POINT_FIELDS)
"""``Gauge.data_points`` entry: ``NumberDataPoint{time_unix_nano: 1, flags: NO_RECORDED_VALUE}``."""
INVALID_POINT: Final = _field(1, b"")
"""``NumberDataPoint{}``: no ``time_unix_nano``, so the sink drops it (a partial success)."""
EMPTY_RESOURCE_METRICS: Final = b"\x0a\x00"
"""``MetricsData.resource_metrics`` entry holding nothing: two bytes per parsed message."""


def alternating_points(pairs: int, metric_name: bytes = b"hostile.gauge") -> bytes:
    """An ``ExportMetricsServiceRequest`` (the same wire format as ``MetricsData``) with one gauge of
    ``pairs`` valid points, each followed by an invalid one: ``2 * pairs`` points in all."""
    metric = _field(1, metric_name) + _field(5, (VALID_POINT + INVALID_POINT) * pairs)
    return _field(1, _field(2, _field(2, metric)))  # resource_metrics { scope_metrics { metrics } }


def empty_resource_metrics(count: int) -> bytes:
    """``MetricsData`` of ``count`` empty ``ResourceMetrics``: ``2 * count`` bytes."""
    return EMPTY_RESOURCE_METRICS * count


def fan_out_ids(clients: int, seed: int = 0xFA2) -> list[uuid.UUID]:
    """The client instance ids ``fan_out_points(clients, seed)`` names: distinct for each ``seed``."""
    return [uuid.UUID(int=seed << 64 | n + 1) for n in range(clients)]


def fan_out_points(clients: int, seed: int = 0xFA2) -> bytes:
    """An ``ExportMetricsServiceRequest`` of one resource naming no client and one gauge of ``clients``
    valid points, each naming a client instance of its own (``fan_out_ids``) in a ``client_instance_id``
    point attribute, as a Collector forwards Prometheus labels: ``clients`` clients in one export
    (T3-7): 75 bytes a client, about 3 gzipped."""
    key = _field(1, b"client_instance_id")
    points = b"".join(
        _field(1, _VALID_POINT_FIELDS + _field(7, key + _field(2, _field(1, str(instance_id).encode()))))
        for instance_id in fan_out_ids(clients, seed)
    )
    metric = _field(1, b"fan.out.gauge") + _field(5, points)
    return _field(1, _field(2, _field(2, metric)))


def json_object_flood(count: int) -> bytes:
    """OTLP JSON with ``count`` empty objects in ``resourceMetrics``: about ``3 * count`` bytes."""
    return b'{"resourceMetrics":[' + b"{}," * (count - 1) + b"{}]}"


def json_nesting(depth: int) -> bytes:
    """OTLP JSON whose ``resourceMetrics`` is ``depth`` nested arrays: ``2 * depth`` bytes."""
    return b'{"resourceMetrics":' + b"[" * depth + b"]" * depth + b"}"


def gzip_bomb(raw: bytes) -> bytes:
    """``raw`` gzip-compressed at the highest level (a flood of equal elements shrinks ~1000x)."""
    return gzip.compress(raw, 9, mtime=0)


def zstd_bomb(raw: bytes) -> bytes:
    """``raw`` in one zstd frame at level 19."""
    return zstandard.ZstdCompressor(level=19).compress(raw)


def gzip_members(size: int) -> bytes:
    """As many empty gzip members (20 bytes each) as fit in ``size`` bytes."""
    member = gzip.compress(b"", mtime=0)
    return member * (size // len(member))


def zstd_frames(size: int) -> bytes:
    """As many empty zstd frames (9 bytes each) as fit in ``size`` bytes."""
    frame = zstandard.ZstdCompressor().compress(b"")
    return frame * (size // len(frame))


def metadata_flood_frame(size: int) -> bytes:
    """A Kafka Metadata v0 request frame of ``size`` bytes (after its 4-byte size) naming as many empty
    topics as fit: about ``size / 2`` topics."""
    header = struct.pack(">hhih", 3, 0, 1, -1)  # api key, version, correlation id, null client id
    topics = (size - len(header) - 4) // 2
    body = header + struct.pack(">i", topics) + b"\x00\x00" * topics
    return struct.pack(">i", len(body)) + body


def declared_frame(size: int) -> bytes:
    """A Kafka frame's size prefix declaring ``size`` bytes, and the first bytes of a header."""
    return struct.pack(">i", size) + struct.pack(">hhi", 18, 3, 1)


def http_request(
    method: str,
    path: str,
    headers: Sequence[tuple[str, bytes]],
    body: bytes = b"",
    *,
    length: int | None = None,
) -> bytes:
    """An HTTP/1.1 request as bytes, header values exactly as given; ``Content-Length`` is
    ``length`` (default: the body's) and the connection closes after the answer."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: sink", b"Connection: close"]
    lines += [name.encode() + b": " + value for name, value in headers]
    lines.append(b"Content-Length: %d" % (len(body) if length is None else length))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


async def http_exchange(
    port: int, request: bytes, timeout_s: float = 30.0, *, source: str | None = None
) -> HttpAnswer:
    """Send ``request`` (``http_request``) to 127.0.0.1:``port`` from the address ``source`` (any
    127.x.y.z: another client IP on loopback) and read the whole answer; a ``TimeoutError`` after
    ``timeout_s`` (a hang guard: the sink must answer long before)."""
    async with asyncio.timeout(timeout_s):
        local = None if source is None else (source, 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
        try:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            else:
                body = await reader.read()
        finally:
            writer.close()
    return HttpAnswer(int(status_line.split()[1]), headers, body)


@dataclass(frozen=True)
class Probe:
    status: int
    """The HTTP status, or 0 when the probe failed or timed out."""
    seconds: float


@dataclass
class HealthProber:
    """``GET /healthz`` on a fresh connection every ``pause_s``, until ``stop``; each probe gives up
    after ``timeout_s``. The probes run in a Python process of their own (this module run with ``-m``),
    so that their latency is the sink's and not that of a busy process beside it (a client fleet
    sharing the GIL); ``probes`` holds them once stopped."""

    port: int
    pause_s: float = 0.02
    timeout_s: float = 10.0
    probes: list[Probe] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = None

    def start(self) -> HealthProber:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(self.port), str(self.pause_s), str(self.timeout_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        return self

    def stop(self) -> list[Probe]:
        """Stop probing (closing the prober's stdin) and collect every probe it made."""
        if self._process is not None:
            out, _ = self._process.communicate()
            if self._process.returncode != 0:
                raise RuntimeError(f"the /healthz prober exited {self._process.returncode}")
            self.probes = [Probe(status, seconds) for status, seconds in json.loads(out)]
            self._process = None
        return self.probes


def _probe_until_stdin_closes(port: int, pause_s: float, timeout_s: float) -> list[tuple[int, float]]:
    """The prober process: (status, seconds) of each probe until its stdin reaches its end."""
    probes: list[tuple[int, float]] = []
    while True:
        started = time.perf_counter()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
            try:
                connection.request("GET", "/healthz")
                status = connection.getresponse().status
            finally:
                connection.close()
        except (OSError, http.client.HTTPException):
            status = 0
        probes.append((status, time.perf_counter() - started))
        if select.select([sys.stdin], [], [], pause_s)[0]:  # readable: closed by ``stop``
            return probes


def reset_peak_rss(pid: int) -> int:
    """Start measuring the peak resident memory of a process and its descendants (the sink's decoder
    processes) afresh (Linux: ``VmHWM`` back to the current RSS, by writing 5 to
    ``/proc/<pid>/clear_refs``); their current RSS in bytes, summed."""
    tree = _process_tree(pid)
    for member in tree:
        with open(f"/proc/{member}/clear_refs", "w") as clear:
            clear.write("5")
    return sum(_status_bytes(member, "VmRSS") for member in tree)


def peak_rss_bytes(pid: int) -> int:
    """The peak resident memory of a process and its descendants since ``reset_peak_rss`` (or since
    each started), summed: an upper bound of what they held at once."""
    return sum(_status_bytes(member, "VmHWM") for member in _process_tree(pid))


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process it started, and they started (``/proc/<pid>/task/*/children``)."""
    tree, pending = [], [pid]
    while pending:
        member = pending.pop()
        tree.append(member)
        for task in Path(f"/proc/{member}/task").iterdir():
            pending += [int(child) for child in (task / "children").read_text().split()]
    return tree


def _status_bytes(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} for pid {pid}")


if __name__ == "__main__":  # ``HealthProber``'s process
    port, pause_s, timeout_s = sys.argv[1:]
    json.dump(_probe_until_stdin_closes(int(port), float(pause_s), float(timeout_s)), sys.stdout)
