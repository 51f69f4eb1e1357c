"""Each package's ``__init__.py`` is its public facade, with an explicit ``__all__``: every name
listed exists, and every name another package (or a test, or a benchmark) takes from the facade is
listed."""

from __future__ import annotations

import ast
import functools
import importlib
import subprocess
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
ROOT_PACKAGES = ("ingest", "quotas", "subscriptions", "exporters", "spark_jobs", "loadgen", "telemetry_sink")
GENERATED = ("ingest.proto",)
"""Generated protobuf modules: a package without a facade."""


def _tracked_python() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def _packages() -> list[str]:
    found = []
    for path in _tracked_python():
        relative = path.relative_to(ROOT)
        if relative.name == "__init__.py" and relative.parts[0] in ROOT_PACKAGES:
            name = ".".join(relative.parts[:-1])
            if name not in GENERATED:
                found.append(name)
    return sorted(found)


PACKAGES = _packages()


@functools.cache
def _imports_from() -> list[tuple[Path, str, str]]:
    """``(importing file, module, name)`` for every absolute ``from <module> import <name>``."""
    found: list[tuple[Path, str, str]] = []
    for path in _tracked_python():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.extend((path, node.module, alias.name) for alias in node.names)
    return found


def _facade_imports(package: str) -> Iterator[tuple[str, str]]:
    """``(importing file, name)`` for every ``from <package> import <name>`` outside the package."""
    folder = ROOT.joinpath(*package.split("."))
    for path, module, name in _imports_from():
        if module == package and not path.is_relative_to(folder):
            yield str(path.relative_to(ROOT)), name


def _is_submodule(package: types.ModuleType, name: str) -> bool:
    return isinstance(getattr(package, name, None), types.ModuleType) or (
        importlib.util.find_spec(f"{package.__name__}.{name}") is not None
    )


def test_every_package_is_checked() -> None:
    assert set(ROOT_PACKAGES) <= set(PACKAGES)
    assert {"quotas", "ingest.transports.kafka", "exporters.delta", "spark_jobs.dashboards"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_exists(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__doc__, f"{package} needs a docstring saying what it owns"
    assert isinstance(getattr(module, "__all__", None), list), f"{package} declares no __all__"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ lists names it does not have: {missing}"
    assert len(set(module.__all__)) == len(module.__all__), f"{package}.__all__ repeats a name"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_other_packages_take_from_the_facade_is_in_all(package: str) -> None:
    module = importlib.import_module(package)
    unlisted = sorted(
        f"{importer}: {name}"
        for importer, name in _facade_imports(package)
        if name not in module.__all__ and not _is_submodule(module, name)
    )
    assert not unlisted, f"imported from {package} but not in its __all__: {unlisted}"
