"""Several sink replicas landing at once: one shared bronze table, or one table each (issue 4).

Starts 1, 2 and 4 writer processes that each land ``--pushes`` pushes through a
``DeltaLandingExporter`` with small batches (``--batch-rows``, so there are many commits to contend),
first all into one table, then each into its own; reports aggregate pushes/s, commits, and whether
every push landed exactly once. Each process is started ahead and waits for a start signal, so only
landing is timed.

Run: ``.venv/bin/python benchmarks/landing/writers.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from deltalake import DeltaTable

CHILD = """
import asyncio, sys, time
sys.path.insert(0, {bench_dir!r})
from bench import make_pushes
from exporters import DeltaLandingExporter, ExportResult

async def main(table, writer_id, count, batch_rows):
    pushes = make_pushes(count)
    for n, p in enumerate(pushes):
        object.__setattr__(p.context, "push_id", f"{{writer_id}}-{{n}}")
    exporter = DeltaLandingExporter(table, writer_id=writer_id, max_batch_rows=batch_rows)
    await exporter.start()
    sys.stdout.write("READY\\n"); sys.stdout.flush()
    sys.stdin.readline()
    start = time.perf_counter()
    results = await asyncio.gather(*(exporter.export(p) for p in pushes))
    elapsed = time.perf_counter() - start
    await exporter.shutdown()
    ok = sum(r is ExportResult.SUCCESS for r in results)
    sys.stdout.write(f"RESULT {{ok}} {{elapsed}} {{exporter.commits}}\\n"); sys.stdout.flush()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""


def run(processes: int, shared: bool, pushes: int, batch_rows: int, work: str) -> dict[str, object]:
    script = CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)))
    tables = [os.path.join(work, "shared" if shared else f"own-{k}") for k in range(processes)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, tables[k], f"w{k}", str(pushes), str(batch_rows)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(processes)
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
    start = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = [child.communicate(timeout=600)[0].split() for child in children]
    wall = time.perf_counter() - start
    landed = sum(int(r[1]) for r in results)
    rows = sum(DeltaTable(t).to_pyarrow_table(columns=["push_id"]).num_rows for t in set(tables))
    distinct = len(
        {
            i
            for t in set(tables)
            for i in DeltaTable(t).to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
        }
    )
    return {
        "processes": processes,
        "layout": "one shared table" if shared else "one table per writer",
        "pushes_per_s": landed / wall,
        "acked": landed,
        "rows": rows,
        "exactly_once": rows == distinct == processes * pushes,
        "commits": sum(int(r[3]) for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pushes", type=int, default=20_000)
    parser.add_argument("--batch-rows", type=int, default=500)
    args = parser.parse_args()
    for shared in (True, False):
        for processes in (1, 2, 4):
            work = tempfile.mkdtemp(prefix="writers-bench-")
            try:
                result = run(processes, shared, args.pushes, args.batch_rows, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(
                f"{result['layout']:<22} {processes} writer(s): {result['pushes_per_s']:>9,.0f} pushes/s, "
                f"{result['commits']} commits, exactly once: {result['exactly_once']}"
            )
            print(json.dumps({"benchmark": "landing-writers", **result}))


if __name__ == "__main__":
    main()
