"""Who is asking: principal, client id and software, source address (TEL-6)."""

from __future__ import annotations

from uuid import UUID

import pytest

from ingest.identity import (
    ANONYMOUS,
    grpc_client_context,
    http_client_context,
    otlp_instance_id,
    parse_grpc_peer,
    parse_instance_id,
    principal_from_auth_context,
    principal_from_peercert,
)
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
