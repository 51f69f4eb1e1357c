"""The package's public facade: every name in ``__all__`` exists, and nothing else is implied."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import subscriptions

MODULES = [m.name for m in pkgutil.iter_modules(subscriptions.__path__)]


def test_facade_exports_exist() -> None:
    for name in subscriptions.__all__:
        assert hasattr(subscriptions, name), name


@pytest.mark.parametrize("module", MODULES)
def test_every_module_declares_its_public_names(module: str) -> None:
    mod = importlib.import_module(f"subscriptions.{module}")
    assert mod.__doc__, f"{module} needs a docstring saying what it owns"
    for name in mod.__all__:
        assert hasattr(mod, name), f"subscriptions.{module}.{name}"


def test_compute_subscription_id_signature() -> None:
    params = list(inspect.signature(subscriptions.compute_subscription_id).parameters)
    assert params == ["metrics", "push_interval_ms", "client_instance_id"]
