"""The leak guard: a thread or child process that outlives the test or fixture that started it fails the
run, naming that test or fixture.

A thread left running by one test frees and allocates objects while later tests run: it turned a test
of a process-wide counter into a failure one run in many, far from the test that left it. So every test
closes what it starts, and this plugin holds them to it:

- what a test's body starts must be gone once the test's teardown is over;
- what a fixture's setup starts must be gone once that fixture is torn down, whatever its scope (a
  module or session fixture is checked when its module or the session ends);
- what nobody owns (started during a teardown, say) must be gone when the session ends.

"Gone" is polled for up to ``GRACE_S``, with the garbage collector run now and then: a pool's
workers end a moment after their owner closes them, and a closed gRPC channel's poller only once the
collector has freed it. A zombie child (exited, not yet reaped) counts as gone: it holds no CPU and no
descriptors. The named exceptions are the fixtures in ``LONG_LIVED``, which live as long as the test
process by design (what they start is not checked), and the ``PROCESS_SINGLETONS`` a library starts
once per process.

Loaded for every test run by ``tests/conftest.py``; ``pytest -p no:tests.support.leaks`` turns it off
for a run where a debugger's own threads would trip it.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

GRACE_S = 10.0
"""How long a thread or process may take to end after its owner closed it."""

LONG_LIVED = {
    "spark": "one local Spark session (a JVM and its Py4J gateway) for every Spark test of the process",
}
"""Fixtures whose threads and processes live as long as the test process, and why."""

PROCESS_SINGLETONS = {
    "multiprocessing.resource_tracker": "multiprocessing's resource tracker: one per process, started by"
    " the first pool and kept until the process exits",
}
"""Child processes that a library starts once and keeps for the whole process (by their command line),
and why: not a test's to stop."""


@dataclass(frozen=True)
class Running:
    """The threads (by ident) and child processes (by pid) alive at one moment, with their names."""

    threads: dict[int, str] = field(default_factory=dict)
    children: dict[int, str] = field(default_factory=dict)

    @classmethod
    def now(cls) -> Running:
        threads = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
        return cls(threads, _children())

    def __sub__(self, before: Running) -> Running:
        return Running(
            {k: v for k, v in self.threads.items() if k not in before.threads},
            {k: v for k, v in self.children.items() if k not in before.children},
        )

    def __bool__(self) -> bool:
        return bool(self.threads or self.children)

    def still_running(self) -> Running:
        """Those of these that are running now, after waiting up to ``GRACE_S`` for them to end.

        While waiting, the garbage collector runs now and then: a closed gRPC channel or server stops
        its library's poller thread only once the collector has freed it."""
        deadline = time.monotonic() + GRACE_S
        collected = 0.0
        while True:
            left = Running(
                {k: v for k, v in self.threads.items() if _thread_alive(k)},
                {k: v for k, v in self.children.items() if _process_running(k)},
            )
            if not left or time.monotonic() > deadline:
                return left
            if time.monotonic() - collected > 1:
                gc.collect()
                collected = time.monotonic()
            time.sleep(0.05)  # a poll for the end, not a wait for time

    def describe(self) -> str:
        threads = [f"thread {name!r}" for name in sorted(self.threads.values())]
        children = [f"child process {pid} ({name})" for pid, name in sorted(self.children.items())]
        return ", ".join(threads + children)


def _children() -> dict[int, str]:
    """This process's running children, by pid, named by their command line (zombies left out)."""
    pids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids.update(int(pid) for pid in (task / "children").read_text().split())
        except OSError:  # the thread ended while we looked
            continue
    commands = {pid: _command(pid) for pid in pids if _process_running(pid)}
    return {pid: command for pid, command in commands.items() if not _singleton(command)}


def _singleton(command: str) -> bool:
    return any(name in command for name in PROCESS_SINGLETONS)


def _command(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(word.decode(errors="replace") for word in words if word)[:160]


def _process_running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in {"Z", "X"}


def _thread_alive(ident: int) -> bool:
    return any(t.ident == ident and t.is_alive() for t in threading.enumerate())


class LeakGuard:
    """The pytest hooks: who started what, and whether it is gone when its owner's scope ends."""

    def __init__(self) -> None:
        self.at_start = Running.now()
        self.owned_by_fixture: dict[int, tuple[str, Running]] = {}
        self.exempt = Running()
        self.started_by_test = Running()
        self.failures: list[str] = []
        self.pending: list[str] = []
        self.torn_down: list[tuple[str, Running]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
    ) -> Generator[None, object, object]:
        before = Running.now()
        try:
            return (yield)
        finally:
            started = Running.now() - before
            if fixturedef.argname in LONG_LIVED:
                self.exempt = Running(
                    self.exempt.threads | started.threads, self.exempt.children | started.children
                )
            elif started:
                self.owned_by_fixture[id(fixturedef)] = (
                    f"{fixturedef.scope} fixture {fixturedef.argname!r}",
                    started,
                )

    @pytest.hookimpl(trylast=True)
    def pytest_fixture_post_finalizer(
        self, fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
    ) -> None:
        owner = self.owned_by_fixture.pop(id(fixturedef), None)
        if owner is not None:  # checked once the whole teardown is over: the event loop closes last
            self.torn_down.append(owner)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        before = Running.now()
        try:
            return (yield)
        finally:
            self.started_by_test = Running.now() - before

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # the outermost: the others' teardowns are over
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if isinstance(item, pytest.Function):  # the torn-down fixtures' values, freed as pytest
                item.funcargs.clear()  # does next: what they hold can be collected while we wait
            for failure in ("last_exc", "last_type", "last_value", "last_traceback"):
                if hasattr(sys, failure):  # a failed test's traceback, kept for post-mortems, keeps
                    delattr(sys, failure)  # its frames' objects (its servers, say) alive
            started, self.started_by_test = self.started_by_test, Running()
            self._check(f"test {item.nodeid}", started, "its teardown")
            torn_down, self.torn_down = self.torn_down, []
            for owner, owned in torn_down:
                self._check(owner, owned, "its teardown")
            said, self.pending = self.pending, []
            if said:
                pytest.fail("leak guard: " + "; ".join(said), pytrace=False)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        left = Running.now() - self.at_start
        self._check(
            "the test session",
            Running(
                {k: v for k, v in left.threads.items() if k not in self.exempt.threads},
                {k: v for k, v in left.children.items() if k not in self.exempt.children},
            ),
            "its end (started by a teardown, or by no test or fixture)",
        )
        if self.failures:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.failures:
            terminalreporter.section("leak guard", red=True)
            for failure in self.failures:
                terminalreporter.line(failure)

    def _check(self, owner: str, started: Running, when: str) -> None:
        left = started.still_running()
        if left:
            said = f"{owner} left running after {when}: {left.describe()}"
            self.failures.append(said)
            self.pending.append(said)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LeakGuard(), "leak-guard")
