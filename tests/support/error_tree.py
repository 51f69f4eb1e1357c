"""The exception classes a package defines, read from its source with ``ast`` (nothing is imported,
so a Spark module needs no Spark), held to the package's one error tree: each derives from the
tree's root and is named in the tree its errors module draws."""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict

from tests.support.paths import REPO

_BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


def exception_classes(package: str) -> dict[str, set[str]]:
    """``{"path:line: Name": the names of its ancestors}`` for every exception class ``package``
    defines (a class with a built-in exception among its ancestors). A base is known by the last part
    of its name, and a name two modules define stands for both: enough for a package's errors."""
    defined: list[tuple[str, str]] = []
    bases: defaultdict[str, set[str]] = defaultdict(set)
    for path in sorted(REPO.joinpath(*package.split(".")).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                defined.append((f"{path.relative_to(REPO)}:{node.lineno}: {node.name}", node.name))
                bases[node.name] |= {ast.unparse(base).rpartition(".")[2] for base in node.bases}
    found = {}
    for where, name in defined:
        ancestors: set[str] = set()
        todo = [name]
        while todo:
            new = bases.get(todo.pop(), set()) - ancestors
            ancestors |= new
            todo.extend(new)
        if ancestors & _BUILTIN_EXCEPTIONS:
            found[where] = ancestors
    return found


def outside_the_tree(package: str, root: type[BaseException], drawing: str | None) -> list[str]:
    """The exception classes of ``package`` that do not derive from ``root`` or that the tree
    (``drawing``, the errors module's docstring) does not name, each saying which."""
    problems = []
    for where, ancestors in exception_classes(package).items():
        name = where.rpartition(" ")[2]
        if root.__name__ not in {name, *ancestors}:
            problems.append(f"{where} does not derive from {root.__name__}")
        if name not in (drawing or ""):
            problems.append(f"{where} is not in the tree drawn in the errors module")
    return sorted(problems)
