"""Test-wide settings: the leak guard (``tests.support.leaks``), the Kafka oracle
(``tests.support.kafka_broker``) and Spark (``tests.support.spark``) sessions, hypothesis's profile,
the open-file limit, and the test pipelines closed after each test."""

from __future__ import annotations

import resource
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

pytest_plugins = ["tests.support.leaks", "tests.support.kafka_broker", "tests.support.spark", "pytester"]

# No per-example deadline: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("telemetry-sink", deadline=None, print_blob=True)
settings.load_profile("telemetry-sink")

# The soft open-file limit raised to the hard one once, as `serve` does for itself: tests that hold
# a thousand sockets to a sink need no process-wide change of their own while other threads run.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != _hard:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))


@pytest.fixture(autouse=True)
def _pipelines_closed() -> Iterator[None]:
    """After each test, the pipelines ``tests.support.pipeline`` made for it are closed (a test that
    never imported it, a Spark test say, imports nothing for this)."""
    yield
    made = sys.modules.get("tests.support.pipeline")
    if made is not None:
        made.close_made_pipelines()
