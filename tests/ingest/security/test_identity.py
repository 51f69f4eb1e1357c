"""Who is asking: principal, client id and software, source address (TEL-6); one principal for a
certificate on every transport, as Kafka writes it (F11); client text checked at the edge (F3, F4,
F21)."""

from __future__ import annotations

import uuid
from pathlib import Path
from uuid import UUID

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters import PushContext
from ingest.limits import RequestLimits
from ingest.security.attribution import NO_LABELS, Labels
from ingest.security.authentication import Authenticator
from ingest.security.identity import (
    ANONYMOUS,
    ClientTextError,
    check_client_text,
    grpc_client_context,
    http_client_context,
    otlp_instance_id,
    parse_grpc_peer,
    principal_from_auth_context,
)
from ingest.security.principals import certificate_principal, rfc2253_name, x500_name
from ingest.wire import CLIENT_ID_HEADER, SOFTWARE_NAME_HEADER, SOFTWARE_VERSION_HEADER, parse_instance_id
from subscriptions import ClientContext
from tests.support.certificates import CertificateAuthority

client_context = grpc_client_context


@pytest.mark.parametrize(
    ("peer", "parsed"),
    [
        ("ipv4:127.0.0.1:54321", ("127.0.0.1", 54321)),
        ("ipv6:[::1]:4317", ("0:0:0:0:0:0:0:1", 4317)),  # written out as Java writes it
        ("ipv6:[2001:db8::ff00:42:8329]:1", ("2001:db8:0:0:0:ff00:42:8329", 1)),
        ("unix:/tmp/socket", (None, None)),
        ("ipv4:nonsense:1", (None, None)),
    ],
)
def test_TEL_6_source_address_and_port_come_from_the_peer(
    peer: str, parsed: tuple[str | None, int | None]
) -> None:
    assert parse_grpc_peer(peer) == parsed


def test_client_id_and_software_come_from_metadata() -> None:
    context = client_context(
        [
            ("x-kafka-client-id", "p1"),
            ("X-Kafka-Client-Software-Name", b"librdkafka"),
            ("x-kafka-client-software-version", "2.16.0"),
        ],
        "ipv4:10.0.0.7:50312",
    )
    assert (context.client_id, context.client_software_name, context.client_software_version) == (
        "p1",
        "librdkafka",
        "2.16.0",
    )
    assert (context.client_source_address, context.client_source_port) == ("10.0.0.7", 50312)
    assert context.principal == ANONYMOUS


def test_TEL_6_software_is_unknown_when_the_client_does_not_say() -> None:
    context = client_context([], "ipv4:10.0.0.7:1")
    assert (context.client_id, context.client_software_name, context.client_software_version) == (
        None,
        "unknown",
        "unknown",
    )


def test_the_principal_comes_from_the_certificate_never_from_a_header(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, _ = ca.issue("producer", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "producer-7"))
    # what grpc-core hands over: the PEM (its own x509_subject string is not read)
    auth_context = {"x509_pem_cert": [cert.read_bytes()], "x509_subject": [b"O=Acme,CN=producer-7"]}
    assert principal_from_auth_context(auth_context) == "User:CN=producer-7,O=Acme"
    assert principal_from_auth_context({}) == ANONYMOUS
    forged = client_context(
        [("x-kafka-principal", "User:admin"), ("principal", "User:admin")], "ipv4:1.2.3.4:5"
    )
    assert forged.principal == ANONYMOUS


def test_F11_http_identity_from_headers_socket_and_the_certificate_s_der(tmp_path: Path) -> None:
    context = http_client_context({"X-Kafka-Client-Id": "c1"}, ("::1", 4318, 0, 0), None)
    assert (context.client_id, context.client_source_address, context.client_source_port) == (
        "c1",
        "0:0:0:0:0:0:0:1",
        4318,
    )
    ca = CertificateAuthority(tmp_path)
    cert, _ = ca.issue("producer", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "producer-7"))
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(Encoding.DER)
    # the same string as over gRPC (and as Kafka's principal builder): most specific RDN first
    assert http_client_context({}, ("::1", 1), der).principal == "User:CN=producer-7,O=Acme"
    assert http_client_context({}, None).principal == ANONYMOUS
    assert certificate_principal(None) == ANONYMOUS


_N = x509.NameAttribute


# Java 17's X500Principal.getName() of each name (what Kafka's DefaultKafkaPrincipalBuilder makes of
# it), as printed by a JVM for these exact DER names.
JAVA_NAMES = [
    (
        [_N(NameOID.ORGANIZATION_NAME, "Acme"), _N(NameOID.COMMON_NAME, "producer-7")],
        "CN=producer-7,O=Acme",
    ),
    ([_N(NameOID.ORGANIZATION_NAME, "Acme,CN=ops-admin")], "O=Acme\\,CN\\=ops-admin"),
    (
        [_N(NameOID.COMMON_NAME, ' #a=b+c"d\\e<f>g;h, ')],
        'CN=\\ \\#a\\=b\\+c\\"d\\\\e\\<f\\>g\\;h\\,\\ ',
    ),
    (
        [
            _N(NameOID.COMMON_NAME, "#x"),
            _N(NameOID.EMAIL_ADDRESS, "a@b.c"),
            _N(NameOID.COUNTRY_NAME, "DE"),
            _N(NameOID.STATE_OR_PROVINCE_NAME, "Bayern"),
            _N(NameOID.LOCALITY_NAME, "München"),
            _N(NameOID.ORGANIZATIONAL_UNIT_NAME, "  x  "),
        ],
        "OU=\\ \\ x\\ \\ ,L=München,ST=Bayern,C=DE,1.2.840.113549.1.9.1=#16056140622e63,CN=\\#x",
    ),
    (
        [
            x509.RelativeDistinguishedName(
                [_N(NameOID.COMMON_NAME, "b"), _N(NameOID.ORGANIZATION_NAME, "a")]
            ),
            x509.RelativeDistinguishedName([_N(NameOID.SERIAL_NUMBER, "123")]),
            x509.RelativeDistinguishedName([_N(NameOID.DOMAIN_COMPONENT, "com")]),
            x509.RelativeDistinguishedName([_N(NameOID.USER_ID, "u1")]),
            x509.RelativeDistinguishedName([_N(NameOID.TITLE, "boss")]),
        ],
        "2.5.4.12=#0c04626f7373,UID=u1,DC=com,2.5.4.5=#1303313233,CN=b+O=a",
    ),
]


@pytest.mark.parametrize(("attributes", "java"), JAVA_NAMES)
def test_F11_a_certificate_subject_is_written_as_java_s_x500principal_getname(
    attributes: list[x509.NameAttribute[str]] | list[x509.RelativeDistinguishedName], java: str
) -> None:
    name = x509.Name(attributes)
    assert x500_name(x509.Name.from_bytes(name.public_bytes())) == java
    assert rfc2253_name(java) == java  # read back (a forwarded Subject) it is the same principal


def test_F11_a_comma_inside_a_value_never_equals_a_real_second_attribute(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    real, _ = ca.issue("admin", (NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "ops-admin"))
    evil, _ = ca.issue("evil", (NameOID.ORGANIZATION_NAME, "Acme,CN=ops-admin"))
    principals = {
        path: principal_from_auth_context({"x509_pem_cert": [path.read_bytes()]}) for path in (real, evil)
    }
    assert principals == {real: "User:CN=ops-admin,O=Acme", evil: "User:O=Acme\\,CN\\=ops-admin"}


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("CN=producer-7, O=Acme", "CN=producer-7,O=Acme"),  # spaces after separators
        ("O=Acme\\,CN=ops-admin", "O=Acme\\,CN\\=ops-admin"),  # OpenSSL does not escape '='
        ("L=M\\C3\\BCnchen,cn=x", "L=München,CN=x"),  # OpenSSL's UTF-8 bytes; keywords any case
        ("emailAddress=a@b.c,CN=x", "1.2.840.113549.1.9.1=#16056140622e63,CN=x"),  # OpenSSL's name
        ("CN=a,OU=#0c0378797a", "CN=a,OU=xyz"),
    ],
)
def test_F11_an_rfc2253_string_is_read_into_the_same_form(written: str, canonical: str) -> None:
    assert rfc2253_name(written) == canonical


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("garbage", "without '='"),
        ("CN=a,,O=b", "unknown attribute type"),
        ('CN=a"b', "unescaped"),
        ("CN=#zz", "not hex"),
        ("CN=a\\", "lone backslash"),
    ],
)
def test_F11_a_string_that_is_not_a_distinguished_name_is_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        rfc2253_name(text)


def test_the_derived_instance_is_stable_and_differs_by_client() -> None:
    a = ClientContext(client_id="a", client_source_address="10.0.0.1")
    b = ClientContext(client_id="b", client_source_address="10.0.0.1")
    labels = Labels(service_name="svc")
    assert otlp_instance_id(None, labels, a) == otlp_instance_id(None, labels, a)
    assert otlp_instance_id(None, labels, a) != otlp_instance_id(None, labels, b)
    assert isinstance(otlp_instance_id(None, Labels(client_instance_id="junk"), a), UUID)
    zero = otlp_instance_id(None, Labels(client_instance_id="AAAAAAAAAAAAAAAAAAAAAA"), a)
    assert zero == otlp_instance_id(None, NO_LABELS, a)  # the reserved zero id: derived instead


def test_instance_ids_are_read_as_uuids_or_kafka_base64() -> None:
    value = UUID("3f2504e0-4f89-11d3-9a0c-0305e82c3301")
    assert parse_instance_id(str(value)) == parse_instance_id(value.hex) == value
    assert parse_instance_id("PyUE4E-JEdOaDAMF6CwzAQ") == value
    assert parse_instance_id("") is None
    with pytest.raises(ValueError, match="not a UUID"):
        parse_instance_id("nope")


# -- client text, checked at the edge ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("\udcff", "invalid UTF-8 (byte 0xff) at character 0"),  # aiohttp's reading of the byte 0xff
        ("ab\udc80", "invalid UTF-8 (byte 0x80) at character 2"),
        ("\ud800", "a lone surrogate at character 0"),
        ("a\nb", "the control character U+000A at character 1"),
        ("\x00", "the control character U+0000 at character 0"),
        ("\x7f", "the control character U+007F at character 0"),
        ("\x85", "the control character U+0085 at character 0"),
    ],
)
def test_F3_client_text_that_is_not_valid_text_is_refused_naming_the_field(value: str, problem: str) -> None:
    with pytest.raises(ClientTextError, match=r"^x-kafka-client-id is not valid text: ") as refused:
        check_client_text(CLIENT_ID_HEADER, value)
    assert str(refused.value).endswith(problem)
    assert refused.value.field == CLIENT_ID_HEADER
    assert str(refused.value).isascii()  # safe in any answer or log line; the value is not echoed


def test_client_text_over_its_limit_is_refused_and_text_at_the_limit_is_kept() -> None:
    assert check_client_text("f", "é" * 8, 8) == "é" * 8  # characters, not bytes; UTF-8 is welcome
    with pytest.raises(ClientTextError, match=r"^f is 9 characters long, over the limit of 8$"):
        check_client_text("f", "a" * 9, 8)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (CLIENT_ID_HEADER, "c" * 11),
        (SOFTWARE_NAME_HEADER, "n" * 6),
        (SOFTWARE_VERSION_HEADER, "v" * 6),
        (CLIENT_ID_HEADER, "\udcff"),
        (SOFTWARE_NAME_HEADER, "librdkafka\r\n"),
        (SOFTWARE_VERSION_HEADER, "2.16\udcc3"),
    ],
)
def test_F3_F4_every_transport_refuses_bad_client_text_in_its_headers(header: str, value: str) -> None:
    limits = RequestLimits(max_client_id_chars=10, max_software_chars=5)
    with pytest.raises(ClientTextError, match=f"^{header} "):
        http_client_context({header: value}, ("10.0.0.1", 1), limits=limits)
    with pytest.raises(ClientTextError, match=f"^{header} "):
        grpc_client_context([(header, value)], "ipv4:10.0.0.1:1", limits=limits)
    at_the_limit = {
        CLIENT_ID_HEADER: "c" * 10,
        SOFTWARE_NAME_HEADER: "n" * 5,
        SOFTWARE_VERSION_HEADER: "v" * 5,
    }
    context = http_client_context(at_the_limit, ("10.0.0.1", 1), limits=limits)
    assert (context.client_id, context.client_software_name, context.client_software_version) == (
        "c" * 10,
        "n" * 5,
        "v" * 5,
    )


def test_a_forwarded_principal_that_is_not_valid_text_is_refused() -> None:
    """A trusted proxy passing on a certificate subject it did not decode as UTF-8."""
    proxy = Authenticator(trusted_proxies=["10.0.0.1"])
    headers = {"x-forwarded-client-cert": 'Subject="CN=\udcff"'}
    with pytest.raises(ClientTextError, match=r"^principal is not valid text"):
        http_client_context(headers, ("10.0.0.1", 1), authenticator=proxy)


def test_F21_binary_grpc_metadata_is_never_decoded() -> None:
    context = grpc_client_context(
        [("grpc-trace-bin", b"\xff\xfe\x00"), ("x-kafka-client-id-bin", b"\xff"), (CLIENT_ID_HEADER, "p1")],
        "ipv4:10.0.0.7:1",
    )
    assert context.client_id == "p1"
    with pytest.raises(ClientTextError, match="invalid UTF-8 \\(byte 0xff\\)"):  # not a decode crash
        grpc_client_context([(CLIENT_ID_HEADER, b"\xff")], "ipv4:10.0.0.7:1")


@settings(max_examples=200, deadline=None)
@given(client_id=st.text(), software=st.text(max_size=200))
def test_F3_what_the_edge_lets_through_always_has_a_row(client_id: str, software: str) -> None:
    """Any header text is either refused at the edge or can be stored: never a PushContext failure."""
    headers = {CLIENT_ID_HEADER: client_id, SOFTWARE_NAME_HEADER: software}
    try:
        client = http_client_context(headers, ("10.0.0.1", 1))
    except ClientTextError:
        return
    row = PushContext(
        uuid.UUID(int=5),
        0,
        0,
        principal=client.principal,
        client_id=client.client_id,
        client_software_name=client.client_software_name,
        client_software_version=client.client_software_version,
        quota_tags={"client-id": client.client_id or ""},
    )
    stored = (row.client_id, row.client_software_name, row.client_software_version)
    assert stored == (client.client_id, client.client_software_name, client.client_software_version)
    assert row.text_bytes >= sum(len(text.encode()) for text in stored if text)  # UTF-8 holds it
