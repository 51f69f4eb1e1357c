"""The quota package's public facade and module docstrings."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import ingest.quotas
from ingest.quotas import combine_throttle_ms

MODULES = [m.name for m in pkgutil.iter_modules(ingest.quotas.__path__)]


def test_facade_exports_exist() -> None:
    for name in ingest.quotas.__all__:
        assert hasattr(ingest.quotas, name), name


@pytest.mark.parametrize("module", MODULES)
def test_every_module_says_what_it_owns(module: str) -> None:
    mod = importlib.import_module(f"ingest.quotas.{module}")
    assert mod.__doc__
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), f"ingest.quotas.{module}.{name}"


def test_QUO_9_combining_quotas_takes_the_largest_throttle() -> None:
    assert combine_throttle_ms(0, 120, 30) == 120
    assert combine_throttle_ms(0, 0) == 0
    assert combine_throttle_ms(-5) == 0
