"""The architecture page tells the truth about the tree.

docs/architecture.md is the page a newcomer reads first, so a path or a function it names must exist,
and every module must have its line. These tests hold the page to three rules:

- every repository path it names in backticks (a path under one of the repository's top-level folders
  or files: ``ingest/...``, ``tests/...``, ``docs/...``, ``helm/...``, ``Makefile``) exists;
- every ``path.py:Qualified.name`` in backticks names a function, class or method defined in that file
  (a nested function through the function that defines it), read with ``ast``, never imported;
- every module of the product packages is named, so a new module without a line fails with its name
  (generated ``*_pb2*`` files and empty ``__init__.py`` files aside).

Fenced code blocks are left out: they hold commands, not references.
"""

from __future__ import annotations

import ast
import re

from tests.support.paths import REPO

PAGE = REPO / "docs" / "architecture.md"
PRODUCT_PACKAGES = (
    "ingest",
    "quotas",
    "subscriptions",
    "exporters",
    "spark_jobs",
    "loadgen",
    "telemetry_sink",
    "artifacts",
)

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# ingest/push/pipeline.py, helm/, Makefile, spark_jobs/dashboards/queries/*.sql; then :Qualified.name
REFERENCE = re.compile(r"(?P<path>[\w.-]+(?:/[\w.*-]+)*/?)(?::(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?")


def _top_level() -> frozenset[str]:
    """The names a repository path starts with: the root's folders and files (hidden ones aside)."""
    return frozenset(entry.name for entry in REPO.iterdir() if not entry.name.startswith("."))


def _references(text: str, top_level: frozenset[str]) -> set[tuple[str, str | None]]:
    """The (path, qualified name or None) of every code span outside fenced blocks that is a path
    under one of ``top_level``."""
    found = set()
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        match = REFERENCE.fullmatch(span)
        if match is not None and match["path"].split("/", 1)[0] in top_level:
            found.add((match["path"], match["name"]))
    return found


def _page_references() -> set[tuple[str, str | None]]:
    return _references(PAGE.read_text(encoding="utf-8"), _top_level())


def _exists(path: str) -> bool:
    return any(REPO.glob(path)) if "*" in path else (REPO / path).exists()


def _defines(body: list[ast.stmt], qualified: list[str]) -> bool:
    """Whether ``body`` defines ``qualified`` (a function or class, then what its body defines)."""
    name, *inner = qualified
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.name == name
        and (not inner or _defines(node.body, inner))
        for node in body
    )


def _product_modules() -> list[str]:
    """Every module of the product packages, as a repository path: generated protobuf and empty
    ``__init__.py`` files aside."""
    modules = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            generated = "_pb2" in path.name
            empty = path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip()
            if not (generated or empty):
                modules.append(path.relative_to(REPO).as_posix())
    return modules


def test_the_reference_finder_reads_paths_and_qualified_names_outside_fenced_blocks() -> None:
    text = (
        "See `ingest/push/pipeline.py:TelemetryPipeline.push`, `helm/`, `Makefile` and `docs/rules.md`;\n"
        "not `make lint`, `TelemetryPipeline`, `a -> b`, `telemetry-sink serve` nor `nowhere/x.py`.\n"
        "```sh\n.venv/bin/pytest tests/ingest/test_config.py `tests/fenced.py`\n```\n"
        "`spark_jobs/dashboards/queries/*.sql` and `tests/support/clock.py:eventually`\n"
    )
    top_level = frozenset({"ingest", "helm", "Makefile", "docs", "spark_jobs", "tests"})
    assert _references(text, top_level) == {
        ("ingest/push/pipeline.py", "TelemetryPipeline.push"),
        ("helm/", None),
        ("Makefile", None),
        ("docs/rules.md", None),
        ("spark_jobs/dashboards/queries/*.sql", None),
        ("tests/support/clock.py", "eventually"),
    }


def test_every_repository_path_named_in_the_page_exists() -> None:
    paths = {path for path, _ in _page_references()}
    assert len(paths) > 100
    assert sorted(path for path in paths if not _exists(path)) == []


def test_every_function_class_or_method_named_in_the_page_is_defined_in_its_file() -> None:
    named = {(path, name) for path, name in _page_references() if name is not None}
    assert len(named) > 50
    missing = []
    for path, name in sorted(named):
        file = REPO / path
        if not (path.endswith(".py") and file.is_file()):
            missing.append(f"{path}:{name} (not a Python file of the repository)")
        elif not _defines(ast.parse(file.read_text(encoding="utf-8")).body, name.split(".")):
            missing.append(f"{path}:{name}")
    assert missing == []


def test_every_product_module_is_named_in_the_page() -> None:
    modules = _product_modules()
    assert len(modules) > 100
    named = {path for path, _ in _page_references()}
    assert [module for module in modules if module not in named] == [], (
        "give each new module its line in docs/architecture.md, 'Where each concept lives'"
    )
