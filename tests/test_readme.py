"""The README's example runs as written."""

from __future__ import annotations

import re

from tests.support.paths import REPO

README = REPO / "README.md"


def test_readme_python_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "the README should show how to use the subscription core"
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["get"].error_code == 0  # type: ignore[attr-defined]
    assert type(namespace["outcome"]).__name__ == "AcceptedPush"


def test_readme_quickstart_is_two_commands() -> None:
    quickstart = README.read_text().split("## Quickstart", 1)[1].split("##", 1)[0]
    commands = re.findall(r"^make \w+", quickstart, flags=re.MULTILINE)
    assert commands == ["make run", "make test"]


def _layout_folders() -> set[str]:
    layout = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_/]+)/` \|", layout, flags=re.MULTILINE))


def test_readme_layout_names_every_package_and_room_of_the_tree() -> None:
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"build"}
    rooms = {f"ingest/{p.parent.name}" for p in REPO.glob("ingest/*/__init__.py")} - {"ingest/proto"}
    folders = _layout_folders()
    assert packages | rooms <= folders, f"not in the README's layout: {sorted((packages | rooms) - folders)}"
    assert all((REPO / folder).is_dir() for folder in folders), "the layout names a folder that is gone"
