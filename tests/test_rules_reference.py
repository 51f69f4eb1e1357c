"""The rules reference is complete and the repository is self-contained.

Code, tests and docs cite behaviours by rule id (TEL-9, QUO-3, PD-12, CONN-E1, ...); docs/rules.md
defines each one in an entry starting with the bold id. These tests hold every file of the checkout
(tracked, or new and not ignored) to that: each id it uses, alone, in a range (``QUO-3..QUO-10``,
``TEL-2..4``), shortened (``QUO-4/5``) or in a test name (``test_G_5_TEL_16_...``), is defined; and
no file points at a path outside the repository. The findings of the reviews and the rows of the audits
(F9, AUD-D8, T3-2, KF3-C-6) are defined in docs/findings.md instead (``test_findings_reference``): a
row of the third audit such as KF3-C-6 is never read as the rule it contains.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
RULES = ROOT / "docs" / "rules.md"

FAMILIES = "C|RPC|TEL|G|STAT|R|TB|QUO|Q|CONN|DIV|PD"
# a rule id, not the tail of a third-audit row (KF3-C-6, test_KF3_C_6_...: docs/findings.md)
RULE_ID = re.compile(rf"(?<!KF3-)\b({FAMILIES})-(E?)(\d+)\b")
# TEL-11..TEL-22, TEL-2..4, QUO-4/5, TB-4/TB-5
RULE_RANGE = re.compile(rf"(?<!KF3-)\b({FAMILIES})-(E?)(\d+)(?:\.\.|/)(?:\1-)?\2(\d+)\b")
TEST_NAME = re.compile(r"\bdef (test_\w+)")
TEST_NAME_ID = re.compile(rf"(?<=_)(?<!KF3_)({FAMILIES})_(E?\d+)(?=_|$)")
DEFINITION = re.compile(rf"^\*\*(({FAMILIES})-E?\d+)\b", re.MULTILINE)

# Where the project's reference material lived before it was written down in docs/rules.md.
OUTSIDE_PATHS = re.compile(
    r"\.\./shared|\bshared/(?:spec|review|repro|reference|design)|/work/shared"
    r"|kip714-quota-spec|security-findings\.md|code-structure-review\.md|kafka-fidelity-audit\.md"
    r"|[\w-]+-t3\.md|telemetry-forwarders\.md"
)


def _repository_files() -> list[Path]:
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [ROOT / name for name in listing if (ROOT / name).is_file()]


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="ignore")


def _ids_used(text: str) -> set[str]:
    used = {f"{family}-{e}{number}" for family, e, number in RULE_ID.findall(text)}
    for family, e, first, last in RULE_RANGE.findall(text):
        used.update(f"{family}-{e}{n}" for n in range(int(first), int(last) + 1))
    for name in TEST_NAME.findall(text):
        used.update(f"{family}-{number}" for family, number in TEST_NAME_ID.findall(name))
    return used


def _defined() -> list[str]:
    return [match[0] for match in DEFINITION.findall(RULES.read_text())]


def test_every_rule_id_used_in_the_repository_is_defined_in_docs_rules() -> None:
    defined = set(_defined())
    undefined = {
        f"{path.relative_to(ROOT)}: {rule}"
        for path in _repository_files()
        for rule in _ids_used(_text(path))
        if rule not in defined
    }
    assert not undefined, sorted(undefined)


def test_each_rule_is_defined_once() -> None:
    defined = _defined()
    assert len(defined) > 100
    assert sorted(rule for rule in set(defined) if defined.count(rule) > 1) == []


def test_the_id_finder_reads_ranges_short_forms_and_test_names() -> None:
    text = (
        "QUO-3..QUO-5, TEL-2..4, TB-4/TB-5, QUO-7/8, CONN-E1..CONN-E2, KF3-C-6, KF3-C-3..5\n"
        "def test_G_5_TEL_16_x_R_1():\ndef test_KF3_C_6_x():"
    )
    assert _ids_used(text) == {
        "QUO-3", "QUO-4", "QUO-5", "TEL-2", "TEL-3", "TEL-4", "TB-4", "TB-5", "QUO-7", "QUO-8",
        "CONN-E1", "CONN-E2", "G-5", "TEL-16", "R-1",
    }  # fmt: skip


def test_no_file_points_outside_the_repository() -> None:
    this_file = Path(__file__).resolve()
    pointers = {
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _repository_files()
        if path.resolve() != this_file
        for number, line in enumerate(_text(path).splitlines(), start=1)
        if OUTSIDE_PATHS.search(line)
    }
    assert not pointers, sorted(pointers)


def test_every_path_named_in_docs_rules_exists() -> None:
    named = set(
        re.findall(r"`((?:ingest|subscriptions|exporters|spark_jobs|tests|docs)/[\w./]+)`", RULES.read_text())
    )
    assert named
    assert sorted(path for path in named if not (ROOT / path).exists()) == []
