"""Test-wide settings: the leak guard (``tests.support.leaks``), hypothesis's profile and the open-file
limit."""

from __future__ import annotations

import resource

from hypothesis import settings

pytest_plugins = ["tests.support.leaks", "pytester"]

# No per-example deadline: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("telemetry-sink", deadline=None, print_blob=True)
settings.load_profile("telemetry-sink")

# The soft open-file limit raised to the hard one once, as `serve` does for itself: tests that hold
# a thousand sockets to a sink need no process-wide change of their own while other threads run.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != _hard:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))
