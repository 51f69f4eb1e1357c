"""The quota package's public facade and module docstrings."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
from pathlib import Path

import pytest

import quotas
from quotas import combine_throttle_ms
from tests.support.paths import REPO

PACKAGE_DIR = Path(quotas.__file__).parent
MODULES = sorted({m.name for m in pkgutil.iter_modules(quotas.__path__)} - {"__init__"})


def test_facade_exports_exist() -> None:
    for name in quotas.__all__:
        assert hasattr(quotas, name), name


@pytest.mark.parametrize("module", MODULES)
def test_every_module_says_what_it_owns(module: str) -> None:
    source = PACKAGE_DIR / f"{module}.py"  # compiled modules have no __doc__: read the source
    assert ast.get_docstring(ast.parse(source.read_text())), f"{source} needs a docstring"
    mod = importlib.import_module(f"quotas.{module}")
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), f"quotas.{module}.{name}"


def _compiled_by_setup_py() -> list[str]:
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED":
            return [Path(path).stem for path in ast.literal_eval(node.value)]
    raise AssertionError("setup.py lists no COMPILED modules")


@pytest.mark.skipif(bool(os.environ.get("TELEMETRY_SINK_PURE_PYTHON")), reason="built without mypyc")
@pytest.mark.parametrize("module", _compiled_by_setup_py())
def test_hot_modules_are_compiled_and_up_to_date(module: str) -> None:
    """setup.py compiles these with mypyc; a stale build would test old code."""
    mod = importlib.import_module(f"quotas.{module}")
    compiled = Path(mod.__file__ or "")
    assert compiled.suffix == ".so", f"{module} runs as plain Python: run `make setup`"
    source = PACKAGE_DIR / f"{module}.py"
    stale = f"{compiled} is older than {source}: run `make setup`"
    assert compiled.stat().st_mtime >= source.stat().st_mtime, stale


def test_QUO_9_combining_quotas_takes_the_largest_throttle() -> None:
    assert combine_throttle_ms(0, 120, 30) == 120
    assert combine_throttle_ms(0, 0) == 0
    assert combine_throttle_ms(-5) == 0
