"""The leak guard (``tests.support.leaks``) fails a run that leaves a thread or a child process running
past the scope of the test or fixture that started it, naming that test or fixture; and the per-test
timeout names a hung test. Each case is a small test file run by a pytest of its own."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

GUARDED = ("-p", "tests.support.leaks", "-p", "no:randomly", "-p", "no:cacheprovider")


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_case=source)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", str(REPO))
        return pytester.runpytest_subprocess(*GUARDED, *args, timeout=120)


def test_a_thread_left_running_by_a_test_fails_that_test_by_name(pytester: pytest.Pytester) -> None:
    ran = _run(
        pytester,
        """
import threading
stop = threading.Event()

def test_leaves_a_thread():
    threading.Thread(target=stop.wait, name="left-behind", daemon=True).start()

def test_after_it():
    stop.set()
""",
    )
    ran.assert_outcomes(passed=2, errors=1)
    ran.stdout.fnmatch_lines(
        ["*test test_case.py::test_leaves_a_thread left running after its teardown: thread 'left-behind'*"]
    )


def test_a_child_process_left_by_a_module_fixture_fails_when_the_module_ends(
    pytester: pytest.Pytester,
) -> None:
    ran = _run(
        pytester,
        """
import subprocess, sys
import pytest

@pytest.fixture(scope="module")
def child():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process  # and never stopped

def test_uses_it(child):
    assert child.poll() is None

def test_uses_it_again(child):
    assert child.poll() is None
""",
    )
    ran.assert_outcomes(passed=2, errors=1)
    ran.stdout.fnmatch_lines(["*module fixture 'child' left running after its teardown: child process *"])


def test_what_a_test_closes_passes(pytester: pytest.Pytester) -> None:
    ran = _run(
        pytester,
        """
import threading
from concurrent.futures import ProcessPoolExecutor

def test_closes_its_pool_and_thread():
    with ProcessPoolExecutor(1) as pool:
        assert pool.submit(abs, -1).result() == 1
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    done.set()
    thread.join()
""",
    )
    ran.assert_outcomes(passed=1)


def test_a_hung_test_fails_by_name_after_the_timeout_and_the_run_goes_on(pytester: pytest.Pytester) -> None:
    ran = _run(
        pytester,
        """
import threading

def test_hangs():
    threading.Event().wait()

def test_runs_after_it():
    pass
""",
        "-o",
        "timeout=2",
    )
    ran.assert_outcomes(passed=1, failed=1)
    said = "FAILED test_case.py::test_hangs - Failed: Timeout (>2.0s) from pytest-timeout*"
    ran.stdout.fnmatch_lines([said])
