"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
