"""Benchmark: acknowledged means landed, under crashes and storage faults (issue 18).

Trials against one real Delta table (a replica's shard), each a writer process
(``tests/exporters/delta/writer_process.py``: the sink's ``DeltaLandingExporter`` under load,
``--concurrency`` pushes in flight, printing ``ACK <push id>`` only once a push's commit succeeded):

- ``clean``: one writer lands ``--pushes`` pushes, no fault: the ceiling;
- ``kill`` trials: a writer is SIGKILLed at a random moment (uniform over ``--max-kill-s`` after its
  first acknowledgement), then the next trial restarts the same writer id on the same table: it waits
  for the killed holder's lease to run out (``--lease-ms``), answering RETRYABLE until then, and the
  writer exports those pushes again, as a client would;
- ``faults`` trials: every Delta write fails with probability ``--fault-rate``, half before writing
  and half after the commit landed with its answer lost; the writer runs to completion.

After every trial the table is read: an acknowledged push missing is lost, a push id found twice is
duplicated (a writer never sends the same push twice unless it was answered RETRYABLE). Goal: 0 lost
and 0 duplicated over all trials, N >= 20 of each kind. The acknowledged pushes/s of the fault trials
are printed as a ratio to the clean ceiling of the same run (what retries cost), for information.

Run: ``.venv/bin/python benchmarks/durability/bench.py [--trials 20]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: `benchmarks` importable

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import IO, Final

from deltalake import DeltaTable

REPO: Final = Path(__file__).resolve().parents[2]
WRITER_ID: Final = "durability-0"


@dataclass
class Trial:
    kind: str
    acked: list[str]
    seconds: float
    killed: bool


def run_writer(
    table: Path, pushes: int, args: argparse.Namespace, env: dict[str, str], kill_after_s: float | None
) -> Trial:
    """One writer process; SIGKILLed ``kill_after_s`` after its first acknowledgement if given."""
    started = time.monotonic()
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.exporters.delta.writer_process",
            str(table),
            WRITER_ID,
            str(pushes),
            str(args.concurrency),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the writer logs every injected fault
        text=True,
        env={**os.environ, "WRITER_RETRY": "1", "WRITER_LEASE_MS": str(args.lease_ms), **env},
    )
    assert writer.stdout is not None
    acked: list[str] = []
    first_ack = threading.Event()

    def read(stdout: IO[str]) -> None:
        for line in stdout:
            if line.startswith("ACK "):
                acked.append(line.split()[1])
                first_ack.set()

    reader = threading.Thread(target=read, args=(writer.stdout,))
    reader.start()
    if kill_after_s is not None:
        while not first_ack.wait(0.05):
            if writer.poll() is not None:
                break
        time.sleep(kill_after_s)  # a random moment under load
        writer.send_signal(signal.SIGKILL)
    writer.wait()
    reader.join()
    killed = writer.returncode == -signal.SIGKILL
    if not killed and writer.returncode != 0:
        raise SystemExit(f"writer exited {writer.returncode}")
    return Trial("", acked, time.monotonic() - started, killed)


def landed(table: Path) -> Counter[str]:
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
    return Counter(ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=20, help="trials of each kind (kill, faults)")
    parser.add_argument("--pushes", type=int, default=3000, help="pushes per writer process")
    parser.add_argument("--concurrency", type=int, default=200, help="pushes in flight per writer")
    parser.add_argument(
        "--max-kill-s", type=float, default=1.5, help="kills land within this after the first ack"
    )
    parser.add_argument("--fault-rate", type=float, default=0.3, help="share of Delta writes that fail")
    parser.add_argument("--lease-ms", type=int, default=1000, help="the writers' writer_lease_ms")
    parser.add_argument("--seed", type=int, default=714)
    args = parser.parse_args()
    chance = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="durability-bench-"))
    table = workdir / "telemetry_pushes" / WRITER_ID
    print(
        f"durability: {args.trials} kill trials and {args.trials} fault trials (rate {args.fault_rate}) of "
        f"{args.pushes:,} pushes, {args.concurrency} in flight, lease {args.lease_ms} ms, "
        f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; goal: 0 lost, 0 duplicated",
        flush=True,
    )
    acked_all: list[str] = []
    results: dict[str, dict[str, float]] = {}
    try:
        clean = run_writer(table, args.pushes, args, {}, None)
        acked_all += clean.acked
        ceiling = len(clean.acked) / clean.seconds
        print(f"  clean: {len(clean.acked):,} acknowledged in {clean.seconds:.1f} s: {ceiling:,.0f} pushes/s")
        for kind in ("kill", "faults"):
            lost_total = duplicated_total = kills = 0
            rates = []
            for n in range(args.trials):
                if kind == "kill":
                    trial = run_writer(table, args.pushes, args, {}, chance.uniform(0, args.max_kill_s))
                else:
                    env = {
                        "WRITER_FAULT_RATE": str(args.fault_rate),
                        "WRITER_SEED": str(chance.randrange(2**31)),
                    }
                    trial = run_writer(table, args.pushes, args, env, None)
                    rates.append(len(trial.acked) / trial.seconds)
                kills += trial.killed
                acked_all += trial.acked
                rows = landed(table)
                lost = sum(1 for push_id in acked_all if push_id not in rows)
                duplicated = sum(count - 1 for count in rows.values() if count > 1)
                lost_total, duplicated_total = lost, duplicated
                print(
                    f"  {kind} {n + 1:>2}: {len(trial.acked):>5,} acknowledged in {trial.seconds:5.1f} s"
                    f"{' (killed)' if trial.killed else ''}; table {rows.total():,} rows; "
                    f"lost {lost}, duplicated {duplicated}",
                    flush=True,
                )
            ratio = (sum(rates) / len(rates)) / ceiling if rates else float("nan")
            results[kind] = {
                "trials": args.trials,
                "killed": kills,
                "lost": lost_total,
                "duplicated": duplicated_total,
            }
            if rates:
                results[kind]["ratio_to_clean"] = ratio
            print(
                f"  {kind}: {args.trials} trials, {kills} killed, "
                f"lost {lost_total}, duplicated {duplicated_total}"
                + (f", acknowledged pushes/s {ratio:.2f} of the clean ceiling" if rates else ""),
                flush=True,
            )
        met = all(r["lost"] == 0 and r["duplicated"] == 0 for r in results.values())
        print(f"  goal {'met' if met else 'MISSED'}: {len(acked_all):,} acknowledged pushes in all")
        print(
            json.dumps(
                {
                    "benchmark": "durability",
                    "python": platform.python_version(),
                    "ceiling_per_s": ceiling,
                    **results,
                }
            )
        )
        if not met:
            raise SystemExit(1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
