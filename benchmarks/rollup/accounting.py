"""Where the rollup benchmark's time goes: CPU seconds by process and JVM thread, and Spark's own
stage timings.

- ``CpuTracker``: samples ``/proc`` in a background thread (every ``period_s``) and keeps the last CPU
  time seen of every process and JVM thread it ever saw, so work done by processes or threads that
  exited meanwhile still counts (PySpark's daemon ignores SIGCHLD: its workers' times never reach its
  children's times). ``snapshot()`` sums: this process (the driver), its Spark JVM (by thread kind,
  ``JVM_THREAD_KINDS``), the JVM's Python workers (``pyspark.daemon`` and its forks), and the whole
  machine (``/proc/stat``); ``CpuSnapshot.minus`` gives what each used over a phase and what other
  processes took meanwhile (contention).
- ``stage_profile``: Spark's event log read back after the session stopped: per stage, its operators,
  tasks, wall time, the executor run, CPU and GC times of its tasks and its SQL metrics, with the job
  description that was set when its job started.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["JVM_THREAD_KINDS", "CpuSnapshot", "CpuTracker", "StageTiming", "stage_profile"]

_TICKS = os.sysconf("SC_CLK_TCK")

JVM_THREAD_KINDS: dict[str, tuple[str, ...]] = {
    "tasks": ("Executor task",),
    "jit": ("C1 CompilerThre", "C2 CompilerThre"),
    "gc": ("GC Thread", "G1 "),
    "driver": (
        "Thread-",  # py4j: the Python driver's calls (analysis, optimization, planning)
        "ResultQueryStag",  # adaptive execution: the driver side of query stages
        "QueryStageCreat",
        "shuffle-exchang",
        "dag-scheduler",
        "spark-listener",
        "main",
    ),
    "other": ("",),
}
"""JVM thread names (``/proc/<pid>/task/<tid>/comm``, 15 characters) by kind, first match wins."""


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds (user + system) used so far."""

    driver: float
    jvm: float
    python_workers: float
    machine_busy: float
    """Every process of the machine (``/proc/stat``: all but idle and iowait)."""
    jvm_threads: dict[str, float]
    """The JVM's threads by kind (``JVM_THREAD_KINDS``), as last seen."""

    def minus(self, before: CpuSnapshot) -> dict[str, float]:
        used = {
            "driver": self.driver - before.driver,
            "jvm": self.jvm - before.jvm,
            "python_workers": self.python_workers - before.python_workers,
        }
        used["others"] = max(0.0, self.machine_busy - before.machine_busy - sum(used.values()))
        return used

    def jvm_minus(self, before: CpuSnapshot) -> dict[str, float]:
        """The JVM's CPU seconds by thread kind; ``unseen``: threads that came and went between two
        samples (the JVM's total less every thread's)."""
        kinds = {k: self.jvm_threads.get(k, 0.0) - before.jvm_threads.get(k, 0.0) for k in JVM_THREAD_KINDS}
        kinds["unseen"] = max(0.0, self.jvm - before.jvm - sum(kinds.values()))
        return kinds


def _thread_kind(name: str) -> str:
    return next(kind for kind, prefixes in JVM_THREAD_KINDS.items() if name.startswith(prefixes))


def _stat(path: str) -> tuple[str, list[str]] | None:
    """(command name, the fields after it) of a ``/proc`` stat file; None if it is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    close = text.rindex(")")
    return text[text.index("(") + 1 : close], text[close + 2 :].split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _processes() -> Iterator[tuple[int, int, str, float]]:
    """(pid, parent pid, command name, CPU s) of every process."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(f"/proc/{entry}/stat")) is not None:
            yield int(entry), int(stat[1][1]), stat[0], _cpu(stat[1])


def _machine_busy() -> float:
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / _TICKS


class CpuTracker:
    """The driver's Spark JVM and Python workers, sampled every ``period_s`` (see the module
    docstring). Start it before the Spark session; ``close()`` it at the end."""

    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self._lock = threading.Lock()
        self._jvm: dict[int, float] = {}
        self._python: dict[int, float] = {}
        self._threads: dict[tuple[int, int], tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-tracker", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def _sample(self) -> None:
        driver = os.getpid()
        table = {pid: (parent, name, cpu) for pid, parent, name, cpu in _processes()}
        jvms = [pid for pid, (parent, name, _) in table.items() if parent == driver and name == "java"]
        python: dict[int, float] = {}
        frontier = set(jvms)
        while frontier:  # the JVM's descendants: the Python daemon and its workers
            frontier = {pid for pid, (parent, _, _) in table.items() if parent in frontier}
            python.update((pid, table[pid][2]) for pid in frontier)
        threads: dict[tuple[int, int], tuple[str, float]] = {}
        for pid in jvms:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                if (stat := _stat(f"/proc/{pid}/task/{tid}/stat")) is not None:
                    threads[(pid, int(tid))] = (_thread_kind(stat[0]), _cpu(stat[1]))
        with self._lock:
            self._jvm.update((pid, table[pid][2]) for pid in jvms)
            self._python.update(python)
            self._threads.update(threads)

    def snapshot(self) -> CpuSnapshot:
        self._sample()
        times = os.times()
        with self._lock:
            kinds = dict.fromkeys(JVM_THREAD_KINDS, 0.0)
            for kind, seconds in self._threads.values():
                kinds[kind] += seconds
            return CpuSnapshot(
                times.user + times.system,
                sum(self._jvm.values()),
                sum(self._python.values()),
                _machine_busy(),
                kinds,
            )

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class StageTiming:
    """One Spark stage as the event log has it."""

    stage_id: int
    name: str
    phase: str
    tasks: int
    wall_s: float
    run_s: float
    """Executor run time, summed over the stage's tasks."""
    cpu_s: float
    gc_s: float
    metrics: dict[str, float] = field(default_factory=dict)
    """Accumulables (SQL metrics and task metrics) by name, added up over the stage's operators."""
    operators: list[str] = field(default_factory=list)
    """The physical operators the stage ran, in order."""


def _value(accumulable: dict[str, Any]) -> float | None:
    value = accumulable.get("Value")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


_PLUMBING = ("WholeStageCodegen", "Project", "Filter", "InputAdapter", "ColumnarToRow", "AQEShuffleRead")


def _operators(rdds: list[dict[str, Any]]) -> list[str]:
    """The operators of a stage's RDDs (their scopes), in RDD order, without the plumbing."""
    seen: list[str] = []
    for rdd in sorted(rdds, key=lambda r: r.get("RDD ID", 0)):
        try:
            name = json.loads(rdd.get("Scope") or "{}").get("name", "").strip()
        except ValueError:
            continue
        if name and not name.startswith(_PLUMBING) and name not in seen:
            seen.append(name)
    return seen


def _event_files(event_dir: Path) -> list[Path]:
    """The event log's files in order: a rolling log's ``events_<n>_<app>`` files (Spark 4's default),
    or a single ``<app>`` file."""
    files = [p for p in event_dir.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))]

    def order(path: Path) -> tuple[int, str]:
        parts = path.name.split("_")
        rolling = len(parts) > 2 and parts[0] == "events" and parts[1].isdigit()
        return (int(parts[1]) if rolling else 0, path.name)

    return sorted(files, key=order)


def stage_profile(event_dir: Path) -> list[StageTiming]:
    """The completed stages of the one application logged under ``event_dir``."""
    phase_of_stage: dict[int, str] = {}
    stages: list[StageTiming] = []
    for path in _event_files(event_dir):
        with path.open() as events:
            lines = events.readlines()
        for line in lines:
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                description = (event.get("Properties") or {}).get("spark.job.description") or "(none)"
                for stage_id in event.get("Stage IDs", []):
                    phase_of_stage[stage_id] = description
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                metrics: dict[str, float] = {}
                for accumulable in info.get("Accumulables", []):
                    value = _value(accumulable)
                    if "Name" in accumulable and value is not None:  # one per operator: added up
                        metrics[accumulable["Name"]] = metrics.get(accumulable["Name"], 0.0) + value
                submitted, completed = info.get("Submission Time"), info.get("Completion Time")
                stages.append(
                    StageTiming(
                        stage_id=info["Stage ID"],
                        name=info.get("Stage Name", ""),
                        phase=phase_of_stage.get(info["Stage ID"], "(none)"),
                        tasks=info.get("Number of Tasks", 0),
                        wall_s=(completed - submitted) / 1000 if submitted and completed else 0.0,
                        run_s=metrics.get("internal.metrics.executorRunTime", 0.0) / 1000,
                        cpu_s=metrics.get("internal.metrics.executorCpuTime", 0.0) / 1e9,
                        gc_s=metrics.get("internal.metrics.jvmGCTime", 0.0) / 1000,
                        metrics=metrics,
                        operators=_operators(info.get("RDD Info", [])),
                    )
                )
    return stages
