"""TEL-4, TEL-6, TEL-7 and PD-10: match entries, Java-compatible validation, full-match semantics."""

from __future__ import annotations

from uuid import UUID

import pytest

from subscriptions import ClientContext, Errors, InvalidConfigError, Subscription
from subscriptions.instance import client_attributes
from subscriptions.patterns import PatternError, java_dialect_problem, parse_match_entry


@pytest.mark.parametrize(
    ("entry", "attribute", "regex"),
    [
        ("client_software_name=apache-kafka-java", "client_software_name", "apache-kafka-java"),
        (" client_id = producer.* ", "client_id", "producer.*"),
        ("client_id=abc=", "client_id", "abc"),  # trailing empty part dropped by Java's split
        ("client_source_port=\t8080 ", "client_source_port", "8080"),
    ],
)
def test_TEL_4_valid_entries(entry: str, attribute: str, regex: str) -> None:
    pattern = parse_match_entry(entry)
    assert (pattern.attribute, pattern.regex) == (attribute, regex)


@pytest.mark.parametrize(
    "entry",
    ["client_id=", "=x", "foo=bar", "client_id=a=b", "client_id=[", "client_id", "="],
)
def test_TEL_4_invalid_entries(entry: str) -> None:
    with pytest.raises(PatternError):
        parse_match_entry(entry)


def test_TEL_4_comma_in_quantifier_cannot_be_expressed() -> None:
    with pytest.raises(InvalidConfigError) as info:
        Subscription.from_properties("s", {"match": "client_id=a{1,2}"})
    assert info.value.error == Errors.INVALID_CONFIG
    assert info.value.message == "Illegal client matching pattern: client_id=a{1"


def test_TEL_4_repeated_attribute_keeps_last_entry() -> None:
    s = Subscription.from_properties("s", {"match": "client_id=a.*, client_id=b.*"})
    assert [(p.attribute, p.regex) for p in s.match] == [("client_id", "b.*")]


def test_TEL_4_uuid_text_pattern_validates_but_never_matches_base64_attribute() -> None:
    instance_id = UUID("b69cc35a-7a54-4790-aa69-cc2bd4ee4538")
    s = Subscription.from_properties("s", {"match": f"client_instance_id={instance_id}"})
    assert not s.matches(client_attributes(instance_id, ClientContext()))


def test_TEL_6_attributes_of_a_client() -> None:
    context = ClientContext(
        client_id="producer-1",
        client_software_name="apache-kafka-java",
        client_software_version="3.5.2",
        client_source_address="0:0:0:0:0:0:0:1",
        client_source_port=56078,
    )
    attributes = client_attributes(UUID("3f2504e0-4f89-41d3-9a0c-0305e82c3301"), context)
    assert attributes == {
        "client_instance_id": "PyUE4E-JQdOaDAMF6CwzAQ",
        "client_id": "producer-1",
        "client_software_name": "apache-kafka-java",
        "client_software_version": "3.5.2",
        "client_source_address": "0:0:0:0:0:0:0:1",
        "client_source_port": "56078",
    }
    assert client_attributes(UUID(int=5), ClientContext())["client_source_port"] is None


KAFKA_CLIENT = client_attributes(
    UUID(int=7),
    ClientContext(
        client_id="producer-1",
        client_software_name="apache-kafka-java",
        client_software_version="3.5.2",
        client_source_address="127.0.0.1",
        client_source_port=56078,
    ),
)


@pytest.mark.parametrize(
    ("match", "matches"),
    [
        ("", True),  # no entries match every client
        ("client_id=.*", True),
        ("client_id=producer-1", True),
        ("client_id=producer.*", True),
        ("client_software_version=3.5.2", True),
        ("client_id=producer-1,client_software_name=apache-kafka-java", True),
        ("client_id=producer-2", False),
        ("client_software_version=3.5.x", False),
        ("client_source_port=8080", False),
        ("client_id=producer", False),  # full match, not search
        ("client_id=producer-1,client_software_name=librdkafka", False),  # AND across entries
        ("client_software_version=3.5.*", True),
    ],
)
def test_TEL_7_matching_kafka_examples(match: str, matches: bool) -> None:
    s = Subscription.from_properties("s", {"match": match})
    assert s.matches(KAFKA_CLIENT) is matches


def test_TEL_7_dot_matches_any_char() -> None:
    s = Subscription.from_properties("s", {"match": "client_software_version=3.5.*"})
    assert s.matches({"client_software_version": "3x5"})


def test_TEL_7_null_attribute_never_matches() -> None:
    s = Subscription.from_properties("s", {"match": "client_software_name=.*"})
    assert not s.matches({"client_software_name": None})
    assert not s.matches({})


@pytest.mark.parametrize(
    "regex",
    [
        "a{1",  # Java: illegal repetition (Python reads a literal)
        "{2}",
        "a{,2}",  # Python reads {0,2}
        "a{x}",
        "(?P<n>a)",
        "(?P=n)",
        "(?#comment)a",
        "(?a)x",
        "(a)(?(1)b|c)",
        "[a&&b]",
        "[a[b]]",
        "[[:digit:]]+",  # Java: a union of ':', 'd', 'i', ...; RE2: a POSIX class
        r"\0101",  # Java octal 'A'
        r"\v",  # Java: vertical whitespace class
        r"[\v]",
        r"\C",
        r"(?U)\w+",  # Java: Unicode classes; RE2: ungreedy
        "(?u)x",
        "(?<a_b>x)",  # Java group names are letters and digits
        "[abc",
    ],
)
def test_PD_10_rejects_what_java_would_read_differently(regex: str) -> None:
    assert java_dialect_problem(regex) is not None or regex == "[abc"
    with pytest.raises(PatternError):
        parse_match_entry(f"client_id={regex}")


@pytest.mark.parametrize(
    ("regex", "value", "matches"),
    [
        (r"\p{L}+", "ünïcode", True),  # Java syntax Python lacks, run by RE2
        (r"\Qa.b\E", "a.b", True),
        (r"\Qa.b\E", "axb", False),
        (r"a{2}", "aa", True),
        (r"a{2,}", "aaa", True),
        (r"(?i)PRODUCER-1", "producer-1", True),
        (r"(?<name>p)roducer-1", "producer-1", True),
        (r"\p{Greek}+", "αβγ", True),
        (r"[\]a]+", "]a", True),
        (r"\d+", "٣", False),  # Java's \d is ASCII
    ],
)
def test_PD_10_common_java_syntax_works(regex: str, value: str, matches: bool) -> None:
    assert parse_match_entry(f"client_id={regex}").matches(value) is matches


def test_PD_10_pattern_length_is_capped() -> None:
    parse_match_entry("client_id=" + "a" * 1024)
    with pytest.raises(PatternError):
        parse_match_entry("client_id=" + "a" * 1025)
    with pytest.raises(PatternError):
        parse_match_entry("client_id=" + "a" * 11, max_pattern_length=10)


def test_PD_10_catastrophic_pattern_runs_in_linear_time() -> None:
    pattern = parse_match_entry("client_id=(a+)+$")
    assert not pattern.matches("a" * 100_000 + "!")  # would never finish with backtracking


@pytest.mark.parametrize("regex", [r"(\w)\1", "(?!a)b", "(?<!a)b", "a*+", "(?>a)", r"(a+)+\1b"])
def test_PD_10_constructs_without_a_linear_time_match_are_rejected(regex: str) -> None:
    """Java accepts these; the sink refuses them rather than backtrack on client-supplied strings."""
    with pytest.raises(PatternError, match="linear time"):
        parse_match_entry(f"client_id={regex}")
