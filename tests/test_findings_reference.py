"""The findings reference is complete: every review finding and audit row cited is defined.

Code, tests and docs cite the findings of the security reviews (F9, T3-2) and the rows of the
Kafka-fidelity audits (AUD-D8, KF3-C-6) by id; docs/findings.md defines each one in an entry starting
with the bold id, as docs/rules.md does for rule ids (``test_rules_reference``, whose file listing
this reuses). Every file of the checkout is held to that: each id it uses, alone, in a range
(``F1..F21``, ``T3-1..T3-11``) or in a test name (``test_F9_...``, ``test_AUD_C14_...``,
``test_T3_2_...``, ``test_KF3_C_6_...``), is defined, once; no finding id is a rule id; and no row of
the first audit is cited by its bare name (a section letter and a number), which reads like a rule id
with its hyphen dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_rules_reference import FAMILIES as RULE_FAMILIES
from tests.test_rules_reference import ROOT, TEST_NAME, _repository_files, _text
from tests.test_rules_reference import _defined as _rules_defined
from tests.test_rules_reference import _ids_used as _rule_ids_used

FINDINGS = ROOT / "docs" / "findings.md"
PREFIXES = {"F", "AUD", "T3", "KF3"}

# Prose: F9 (not the F of a hex byte or of an audit row such as AUD-F9), T3-2, AUD-C14, KF3-C-6, KF3-U2.
SECURITY = re.compile(r"(?<![-\w%#\\])F(\d{1,2})\b")
SECURITY_3 = re.compile(r"(?<![-\w])T3-(\d{1,2})\b")
AUDIT = re.compile(r"(?<![-\w])AUD-([A-Z]\d{1,2})\b")
AUDIT_3 = re.compile(r"(?<![-\w])KF3-([A-Z]-?\d{1,2})\b")
# F1..F21, T3-1..T3-11, T3-1..11
RANGE = re.compile(r"(?<![-\w%#\\])(F|T3-)(\d{1,2})\.\.(?:\1)?(\d{1,2})\b")
# Test names: test_F9_..., test_F3_F4_..., test_T3_2_..., test_AUD_C14_..., test_QUO_3_AUD_C5_...,
# test_KF3_C_6_... (KF3-C-6), test_KF3_U2_... (KF3-U2).
NAME_SECURITY = re.compile(r"(?<=_)(?<!AUD_)(?<!KF3_)F(\d{1,2})(?=_|$)")
NAME_SECURITY_3 = re.compile(r"(?<=_)T3_(\d{1,2})(?=_|$)")
NAME_AUDIT = re.compile(r"(?<=_)AUD_([A-Z]\d{1,2})(?=_|$)")
NAME_AUDIT_3 = re.compile(r"(?<=_)KF3_([A-Z])(_?)(\d{1,2})(?=_|$)")
DEFINITION = re.compile(r"^\*\*(F\d+|T3-\d+|AUD-[A-Z]\d+|KF3-[A-Z]-?\d+)\b", re.MULTILINE)

# A first-audit row named bare (its sections are A to K; F is left out, since bare F ids are the
# security findings): not after a hyphen (AUD-D8, KF3-D8, the worked examples Q-E1, TB-E5), a range
# or a slash (Q-E1..E5, TB-E4/E5), nor in an escape or percent-encoding of a byte (\C3, %C3).
BARE_ROW = re.compile(r"(?<![-\w%\\./])([A-EG-K]\d{1,2})\b")
BARE_ROW_IN_NAME = re.compile(r"(?<=_)(?<!AUD_)(?<!KF3_)(?<!Q_)(?<!TB_)(?<!CONN_)([A-EG-K]\d{1,2})(?=_|$)")
# Names of that shape that are not audit rows: control-character sets (C0, C1), the JVM's JIT
# compilers (C1, C2) and garbage collector (G1), ruff rule sets (C4, C90).
NOT_AUDIT_ROWS = frozenset({"C0", "C1", "C2", "C4", "C90", "G1"})


def _text_files() -> list[Path]:
    """The repository's files (``test_rules_reference``'s listing) but binary ones (captured
    payloads, images), which cite nothing, and this one, whose samples are not citations."""
    this_file = Path(__file__).resolve()
    return [
        path for path in _repository_files() if path.resolve() != this_file and b"\0" not in path.read_bytes()
    ]


def _ids_used(text: str) -> set[str]:
    used = {f"F{n}" for n in SECURITY.findall(text)}
    used |= {f"T3-{n}" for n in SECURITY_3.findall(text)}
    used |= {f"AUD-{row}" for row in AUDIT.findall(text)}
    used |= {f"KF3-{row}" for row in AUDIT_3.findall(text)}
    for prefix, first, last in RANGE.findall(text):
        used |= {f"{prefix}{n}" for n in range(int(first), int(last) + 1)}
    for name in TEST_NAME.findall(text):
        used |= {f"F{n}" for n in NAME_SECURITY.findall(name)}
        used |= {f"T3-{n}" for n in NAME_SECURITY_3.findall(name)}
        used |= {f"AUD-{row}" for row in NAME_AUDIT.findall(name)}
        used |= {f"KF3-{letter}{'-' if dash else ''}{n}" for letter, dash, n in NAME_AUDIT_3.findall(name)}
    return used


def _bare_rows(text: str) -> set[str]:
    bare = set(BARE_ROW.findall(text))
    for name in TEST_NAME.findall(text):
        bare |= set(BARE_ROW_IN_NAME.findall(name))
    return bare - NOT_AUDIT_ROWS


def _defined() -> list[str]:
    return DEFINITION.findall(FINDINGS.read_text())


def _prefix(identifier: str) -> str:
    return "F" if re.fullmatch(r"F\d+", identifier) else identifier.split("-", 1)[0]


def test_every_finding_id_used_in_the_repository_is_defined_in_docs_findings() -> None:
    defined = set(_defined())
    undefined = {
        f"{path.relative_to(ROOT)}: {finding}"
        for path in _text_files()
        for finding in _ids_used(_text(path))
        if finding not in defined
    }
    assert not undefined, sorted(undefined)


def test_each_finding_is_defined_once_and_both_reviews_whole() -> None:
    defined = _defined()
    assert sorted(finding for finding in set(defined) if defined.count(finding) > 1) == []
    assert {_prefix(finding) for finding in defined} == PREFIXES
    assert {f"F{n}" for n in range(1, 22)} | {f"T3-{n}" for n in range(1, 12)} <= set(defined)


def test_finding_ids_are_never_rule_ids() -> None:
    findings = set(_defined())
    rules = set(_rules_defined())
    assert findings & rules == set()
    rule_prefixes = {rule.split("-", 1)[0] for rule in rules} | set(RULE_FAMILIES.split("|"))
    assert {_prefix(finding) for finding in findings} & rule_prefixes == set()
    # nor does the rules' id finder read a rule out of one, in prose or in a test name (KF3-C-6 ends
    # in the shape of a rule id)
    read_as_rules = {
        finding: rules
        for finding in findings
        if (rules := _rule_ids_used(f"{finding}\ndef test_{finding.replace('-', '_')}_x():"))
    }
    assert read_as_rules == {}


def test_the_finding_id_finder_reads_ranges_prefixes_and_test_names() -> None:
    text = (
        "F1..F3, (F8), F16: T3-2..T3-4, T3-9..10, AUD-C14 and AUD-D8, KF3-C-6, KF3-U2; not 0xF3, %F0,\n"
        "nor D13, a bare row\n"
        "def test_F6_F16_x():\ndef test_T3_11_x():\ndef test_AUD_B3_x():\ndef test_QUO_3_AUD_C5_x():\n"
        "def test_KF3_C_11_x():\ndef test_KF3_S5_x():\ndef test_AUD_F9_x():"
    )
    assert _ids_used(text) == {
        "F1", "F2", "F3", "F8", "F16", "T3-2", "T3-3", "T3-4", "T3-9", "T3-10", "AUD-C14", "AUD-D8",
        "KF3-C-6", "KF3-U2", "F6", "T3-11", "AUD-B3", "AUD-C5", "KF3-C-11", "KF3-S5", "AUD-F9",
    }  # fmt: skip


def test_the_bare_row_finder_reads_rows_but_not_prefixed_ids_rules_or_other_names() -> None:
    text = (
        "audit row D8, (C14), rows B3, D4; not AUD-D24, KF3-H5, Q-E1..E5, TB-E4/E5, CONN-E1, C-5,\n"
        "C1 and C2 (JIT), G1 (GC), C0 controls, 'M\\C3\\BCnchen', '%C3%A9', 0xC3, select C4 and C90\n"
        "def test_H11_x():\ndef test_QUO_3_AUD_C5_x():\ndef test_Q_E1_x():\ndef test_TB_E5_CONN_E1_x():"
    )
    assert _bare_rows(text) == {"D8", "C14", "B3", "D4", "H11"}


def test_no_audit_row_is_cited_bare() -> None:
    bare = {f"{path.relative_to(ROOT)}: {row}" for path in _text_files() for row in _bare_rows(_text(path))}
    assert not bare, sorted(bare)


def test_every_path_named_in_docs_findings_exists() -> None:
    folders = "ingest|subscriptions|exporters|quotas|spark_jobs|telemetry_sink|helm|benchmarks|tests|docs"
    named = set(re.findall(rf"`((?:{folders})/[\w./-]+)`", FINDINGS.read_text()))
    assert named
    assert sorted(path for path in named if not (ROOT / path).exists()) == []
