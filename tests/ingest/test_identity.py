"""Who is asking: principal, client id and software, source address (TEL-6); client text checked at
the edge (F3, F4, F21)."""

from __future__ import annotations

import uuid
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters import PushContext
from ingest.identity import (
    ANONYMOUS,
    CLIENT_ID_HEADER,
    SOFTWARE_NAME_HEADER,
    SOFTWARE_VERSION_HEADER,
    ClientTextError,
    check_client_text,
    grpc_client_context,
    http_client_context,
    otlp_instance_id,
    parse_grpc_peer,
    parse_instance_id,
    principal_from_auth_context,
    principal_from_peercert,
)
from ingest.limits import RequestLimits
from ingest.security import Authenticator
from subscriptions import ClientContext

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


def test_the_principal_comes_from_the_certificate_never_from_a_header() -> None:
    assert (
        principal_from_auth_context({"x509_subject": [b"CN=producer-7,O=Acme"]})
        == "User:CN=producer-7,O=Acme"
    )
    assert principal_from_auth_context({}) == ANONYMOUS
    forged = client_context(
        [("x-kafka-principal", "User:admin"), ("principal", "User:admin")], "ipv4:1.2.3.4:5"
    )
    assert forged.principal == ANONYMOUS


def test_http_identity_from_headers_socket_and_certificate() -> None:
    context = http_client_context({"X-Kafka-Client-Id": "c1"}, ("::1", 4318, 0, 0), None)
    assert (context.client_id, context.client_source_address, context.client_source_port) == (
        "c1",
        "0:0:0:0:0:0:0:1",
        4318,
    )
    cert = {"subject": ((("organizationName", "Acme"),), (("commonName", "producer-7"),))}
    assert principal_from_peercert(cert) == "User:O=Acme,CN=producer-7"
    assert http_client_context({}, None).principal == ANONYMOUS


def test_the_derived_instance_is_stable_and_differs_by_client() -> None:
    a = ClientContext(client_id="a", client_source_address="10.0.0.1")
    b = ClientContext(client_id="b", client_source_address="10.0.0.1")
    attrs = {"service.name": "svc"}
    assert otlp_instance_id(None, attrs, a) == otlp_instance_id(None, attrs, a)
    assert otlp_instance_id(None, attrs, a) != otlp_instance_id(None, attrs, b)
    assert isinstance(otlp_instance_id(None, {"client_instance_id": "junk"}, a), UUID)


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
    proxy = Authenticator(trusted_proxies=["10.0.0.0/8"])
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
    PushContext(
        uuid.UUID(int=5),
        0,
        0,
        principal=client.principal,
        client_id=client.client_id,
        client_software_name=client.client_software_name,
        client_software_version=client.client_software_version,
        quota_tags={"client-id": client.client_id or ""},
    )
