r"""Client matching patterns of a subscription: parsing, Java-compatible validation, safe matching.

A ``match`` entry is ``attribute=regex`` (docs/rules.md TEL-4) over one of the six client attributes of TEL-6;
a client matches when every entry's regex matches the whole attribute value (TEL-7, Java
``Matcher.matches()``). Kafka compiles the regex with ``java.util.regex``; this module accepts the
common subset of Java and Python/RE2 syntax and rejects what Java rejects where the dialects are known
to differ (PD-10, DIV-10):

- a ``{`` that does not start a valid ``{n}``, ``{n,}`` or ``{n,m}`` quantifier after an atom (Java:
  "Illegal repetition"; RE2 reads ``a{1`` as a literal, and ``{,n}`` as ``{0,n}``);
- groups Java does not have or names differently: ``(?P<..>``, ``(?P=..)``, ``(?#..)``, ``(?(..)..)``,
  group names that are not ``[A-Za-z][A-Za-z0-9]*``; inline flags other than ``i``, ``m``, ``s``, ``x``
  (Java's ``U`` and ``u`` mean something else in RE2);
- Java's nested character classes (``[a[b]]``, which includes ``[[:digit:]]``) and intersections
  (``[a&&b]``), and escapes whose meaning differs (``\0nn`` octal, ``\v``, ``\C``).

Patterns are compiled once, with RE2 only: matching runs in linear time on client-supplied strings, so
constructs RE2 cannot run in linear time (back-references, lookaround, possessive quantifiers, atomic
groups) are rejected rather than risk a catastrophic backtrack on the request path.
"""

from __future__ import annotations

import re
from typing import Final, Protocol

import re2

__all__ = [
    "CLIENT_ATTRIBUTES",
    "DEFAULT_MAX_PATTERN_LENGTH",
    "MatchPattern",
    "PatternError",
    "compile_pattern",
    "java_dialect_problem",
    "java_trim",
    "parse_match_entry",
]

CLIENT_INSTANCE_ID: Final = "client_instance_id"
CLIENT_ID: Final = "client_id"
CLIENT_SOFTWARE_NAME: Final = "client_software_name"
CLIENT_SOFTWARE_VERSION: Final = "client_software_version"
CLIENT_SOURCE_ADDRESS: Final = "client_source_address"
CLIENT_SOURCE_PORT: Final = "client_source_port"
CLIENT_ATTRIBUTES: Final = (
    CLIENT_INSTANCE_ID,
    CLIENT_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
)

DEFAULT_MAX_PATTERN_LENGTH: Final = 1024

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_QUANTIFIER = re.compile(r"\{[0-9]+(,[0-9]*)?\}")
_BRACED_ESCAPES = frozenset("pPxNk")
_JAVA_INLINE_FLAGS = frozenset("imsx-")  # Java's d, u, U are not RE2's (U is "ungreedy" there)
_DIFFERENT_ESCAPES = {"0": "octal escapes (\\0nn)", "v": "\\v", "C": "\\C"}
_JAVA_GROUP_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*>")


class PatternError(ValueError):
    """The match entry cannot be used; the message says why."""


class _Matcher(Protocol):
    def fullmatch(self, value: str) -> object: ...


class MatchPattern:
    """One compiled ``match`` entry: full-match of ``regex`` against the named attribute."""

    __slots__ = ("_matcher", "attribute", "regex")

    def __init__(self, attribute: str, regex: str) -> None:
        self.attribute = attribute
        self.regex = regex
        self._matcher = compile_pattern(regex)

    def matches(self, value: str | None) -> bool:
        """TEL-7: a null attribute never matches; otherwise the regex must match all of it."""
        return value is not None and self._matcher.fullmatch(value) is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MatchPattern):
            return NotImplemented
        return (self.attribute, self.regex) == (other.attribute, other.regex)

    def __hash__(self) -> int:
        return hash((self.attribute, self.regex))

    def __repr__(self) -> str:
        return f"MatchPattern({self.attribute}={self.regex})"


def compile_pattern(regex: str) -> _Matcher:
    """Compile with RE2 after checking the Java dialect; raise PatternError."""
    problem = java_dialect_problem(regex)
    if problem is not None:
        raise PatternError(problem)
    try:
        matcher: _Matcher = re2.compile(regex, options=_RE2_OPTIONS)
    except re2.error as exc:
        detail = (
            exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        )
        raise PatternError(
            f"{detail} (back-references, lookaround, possessive quantifiers and atomic groups are "
            "not supported: client attributes are matched in linear time)"
        ) from exc
    return matcher


def _skip_escape(regex: str, i: int) -> int:
    """Index just after the escape sequence starting at ``regex[i] == '\\'``."""
    if i + 1 >= len(regex):
        return i + 1
    nxt = regex[i + 1]
    if nxt == "Q":  # \Q ... \E quotes everything in between (Java, RE2)
        end = regex.find("\\E", i + 2)
        return len(regex) if end < 0 else end + 2
    if nxt in _BRACED_ESCAPES and i + 2 < len(regex) and regex[i + 2] in "{<":
        close = regex.find("}" if regex[i + 2] == "{" else ">", i + 3)
        return len(regex) if close < 0 else close + 1
    return i + 2


def _escape_problem(regex: str, i: int) -> str | None:
    escaped = regex[i + 1 : i + 2]
    if escaped in _DIFFERENT_ESCAPES:
        return f"{_DIFFERENT_ESCAPES[escaped]} means something else in Java; not supported"
    return None


def _class_problem(regex: str, i: int) -> tuple[str | None, int]:
    """Scan a character class starting at ``regex[i] == '['``; return (problem, index after it)."""
    j = i + 1
    if j < len(regex) and regex[j] == "^":
        j += 1
    if j < len(regex) and regex[j] == "]":  # a leading ']' is a literal in both dialects
        j += 1
    while j < len(regex):
        c = regex[j]
        if c == "\\":
            problem = _escape_problem(regex, j)
            if problem is not None:
                return problem, j
            j = _skip_escape(regex, j)
            continue
        if c == "]":
            return None, j + 1
        if c == "[":
            return "nested character classes ([a[b]], [[:digit:]]) read differently in Java; not supported", j
        if regex.startswith("&&", j):
            return "character class intersection (&&) is Java-only and not supported", j
        j += 1
    return "Unclosed character class", j


def _group_problem(regex: str, i: int) -> str | None:
    """Check the ``(?`` construct starting at ``regex[i] == '('``."""
    rest = regex[i + 2 :]
    if rest.startswith(("P<", "P=", "P>")):
        return "Python named groups (?P...) are not Java syntax; use (?<name>...)"
    if rest.startswith("#"):
        return "inline comments (?#...) are not Java syntax"
    if rest.startswith("("):
        return "conditional groups (?(...)...) are not Java syntax"
    if rest.startswith((":", "=", "!", ">", "<=", "<!")):
        return None
    if rest.startswith("<"):
        if _JAVA_GROUP_NAME.match(rest, 1) is None:
            return "a named group needs a name of ASCII letters and digits, starting with a letter"
        return None
    flags = []
    for c in rest:
        if c in ":)":
            break
        flags.append(c)
    unknown = [c for c in flags if c not in _JAVA_INLINE_FLAGS]
    if unknown:
        return f"Unknown inline modifier: {unknown[0]}"
    return None


def java_dialect_problem(regex: str) -> str | None:
    """Why Java would read ``regex`` differently from Python/RE2, or None (PD-10)."""
    i = 0
    prev_is_atom = False
    n = len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            problem = _escape_problem(regex, i)
            if problem is not None:
                return problem
            i = _skip_escape(regex, i)
            prev_is_atom = True
            continue
        if c == "[":
            problem, i = _class_problem(regex, i)
            if problem is not None:
                return problem
            prev_is_atom = True
            continue
        if c == "{":
            quantifier = _QUANTIFIER.match(regex, i)
            if quantifier is None or not prev_is_atom:
                return f"Illegal repetition near index {i}: {regex}"
            i = quantifier.end()
            prev_is_atom = False
            continue
        if c == "(" and regex.startswith("(?", i):
            problem = _group_problem(regex, i)
            if problem is not None:
                return problem
        prev_is_atom = c not in "(|"
        i += 1
    return None


def _java_split_equals(entry: str) -> list[str]:
    """Java ``String.split("=")``: split everywhere, then drop trailing empty strings."""
    parts = entry.split("=")
    while parts and not parts[-1]:
        parts.pop()
    return parts


def java_trim(s: str) -> str:
    """Java ``String.trim()``: strip every char <= U+0020 from both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def parse_match_entry(entry: str, *, max_pattern_length: int = DEFAULT_MAX_PATTERN_LENGTH) -> MatchPattern:
    """Parse one ``name=regex`` entry (TEL-4); raise PatternError when Kafka would reject it."""
    parts = _java_split_equals(entry)
    if len(parts) != 2:
        raise PatternError("expected exactly one '=' between an attribute name and a pattern")
    attribute, regex = java_trim(parts[0]), java_trim(parts[1])
    if attribute not in CLIENT_ATTRIBUTES:
        raise PatternError(f"unknown client attribute {attribute!r}")
    if len(regex) > max_pattern_length:
        raise PatternError(f"pattern longer than {max_pattern_length} characters")
    return MatchPattern(attribute, regex)
