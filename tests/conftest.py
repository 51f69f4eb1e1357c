"""Test-wide settings."""

from __future__ import annotations

from hypothesis import settings

# No per-example deadline: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("telemetry-sink", deadline=None, print_blob=True)
settings.load_profile("telemetry-sink")
