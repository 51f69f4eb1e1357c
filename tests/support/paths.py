"""Where things are in the repository, for tests at any depth of ``tests/``."""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
"""The repository's root (``pyproject.toml``, ``setup.py``, ``docs/``, ``helm/``)."""
LIBRDKAFKA_FIXTURES: Final = REPO / "tests" / "fixtures" / "librdkafka"
"""Payloads captured from librdkafka's pushes."""
