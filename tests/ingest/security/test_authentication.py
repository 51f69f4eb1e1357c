"""Authentication: bearer tokens, trusted proxies (F7), required authentication (F8), and that no header
lets a client pick its principal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest.security.authentication import (
    ANONYMOUS,
    AuthenticationError,
    Authenticator,
    BearerTokens,
    bearer_token,
    forwarded_address,
    forwarded_client_subject,
    load_tokens,
    parse_proxy_addresses,
)

SECRET = "s3cr3t-4f1c"


def tokens_file(tmp_path: Path, text: str = f'"{SECRET}": "User:alice"\n"other": "User:bob"\n') -> str:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    return str(path)


def test_a_tokens_file_maps_tokens_to_principals(tmp_path: Path) -> None:
    assert load_tokens(tokens_file(tmp_path)) == {SECRET: "User:alice", "other": "User:bob"}
    tokens = BearerTokens(load_tokens(tokens_file(tmp_path)))
    assert tokens.principal(SECRET) == "User:alice"
    assert tokens.principal(SECRET + "x") is None
    assert tokens.principal("") is None


def test_a_bad_tokens_file_names_every_problem_but_never_a_token(tmp_path: Path) -> None:
    path = tokens_file(tmp_path, f'"{SECRET}": alice\n12345: "User:bob"\n"": "User:carol"\n')
    with pytest.raises(ValueError, match="entry 1") as info:
        load_tokens(path)
    message = str(info.value)
    assert "'alice' is not a principal" in message
    assert "entry 2: the token must be a non-empty string (quote it)" in message
    assert "entry 3" in message
    assert SECRET not in message
    with pytest.raises(ValueError, match="expected a mapping"):
        load_tokens(tokens_file(tmp_path, "- a\n- b\n"))


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("Basic dXNlcjpwYXNz", None),  # another scheme is not ours to judge
    ],
)
def test_the_bearer_token_of_an_authorization_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_bearer_without_a_token_is_an_authentication_error() -> None:
    with pytest.raises(AuthenticationError):
        bearer_token("Bearer ")


@pytest.mark.parametrize(
    ("xfcc", "subject"),
    [
        (
            'By=spiffe://sink;Hash=ab12;Subject="CN=producer-7,O=Acme";URI=spiffe://app',
            "CN=producer-7,O=Acme",
        ),
        ("Hash=ab12;Subject=CN=solo", "CN=solo"),
        # the last element is the one the trusted proxy wrote; a client can only add elements before it
        ('Subject="CN=ops-admin";Hash=1,Subject="CN=second";Hash=2', "CN=second"),
        ('Subject="CN=a \\"quoted\\" name,O=x"', 'CN=a \\"quoted\\" name,O=x'),  # Envoy quotes verbatim
        ("Hash=ab12;URI=spiffe://app", None),
        ("", None),
    ],
)
def test_the_client_subject_of_an_envoy_xfcc_header(xfcc: str, subject: str | None) -> None:
    assert forwarded_client_subject(xfcc) == subject


@pytest.mark.parametrize(
    ("xfcc", "subject"),
    [
        ('Subject="O=Acme\\,CN=ops-admin"', "O=Acme\\,CN\\=ops-admin"),  # one attribute, not two
        ('Subject="CN=producer-7, O=Acme"', "CN=producer-7,O=Acme"),
        ('Subject="emailAddress=a@b.c,CN=x"', "1.2.840.113549.1.9.1=#16056140622e63,CN=x"),
    ],
)
def test_F7_F11_a_forwarded_subject_is_read_into_kafka_s_form_without_folding_escapes(
    xfcc: str, subject: str
) -> None:
    assert forwarded_client_subject(xfcc) == subject


def test_F7_a_forwarded_subject_that_is_not_a_name_is_an_authentication_error() -> None:
    with pytest.raises(AuthenticationError, match="the Subject is not a distinguished name"):
        forwarded_client_subject('Subject="nonsense"')


PROXIES = parse_proxy_addresses(["10.1.1.1", "10.9.9.9", "fd00::1"])


@pytest.mark.parametrize(
    ("xff", "address"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("198.51.100.1, 203.0.113.7, 10.1.1.1", "203.0.113.7"),  # rightmost untrusted: 198.. is hearsay
        ("10.9.9.9, 10.1.1.1", "10.9.9.9"),  # every hop trusted: the leftmost
        ("junk, 203.0.113.7", "203.0.113.7"),
        ("203.0.113.7, junk", None),  # the proxy's own entry is unreadable: nothing to believe
        (None, None),
    ],
)
def test_the_client_address_of_x_forwarded_for(xff: str | None, address: str | None) -> None:
    assert forwarded_address(xff, PROXIES) == address


FORWARDED = {
    "x-forwarded-client-cert": 'Hash=1;Subject="CN=producer-7"',
    "x-forwarded-for": "203.0.113.7",
}


def test_forwarded_identity_is_ignored_from_an_untrusted_peer() -> None:
    authenticator = Authenticator(trusted_proxies=["10.2.3.4"])
    assert authenticator.authenticate(FORWARDED, "192.0.2.5", 5000, ANONYMOUS) == (
        ANONYMOUS,
        "192.0.2.5",
        5000,
    )
    assert authenticator.authenticate(FORWARDED, "192.0.2.5", 5000, "User:CN=me") == (
        "User:CN=me",
        "192.0.2.5",
        5000,
    )


def test_a_trusted_proxy_forwards_the_principal_and_address_but_not_its_own_certificate() -> None:
    authenticator = Authenticator(trusted_proxies=["10.2.3.4/32"])
    assert authenticator.authenticate(FORWARDED, "10.2.3.4", 443, "User:CN=envoy") == (
        "User:CN=producer-7",
        "203.0.113.7",
        None,  # no header carries the client's port
    )
    # a proxied client without a certificate is anonymous, not the proxy
    assert authenticator.authenticate({}, "10.2.3.4", 443, "User:CN=envoy") == (ANONYMOUS, "10.2.3.4", 443)
    # an IPv4 peer seen through a dual-stack socket is still that address
    assert authenticator.is_trusted_proxy("0:0:0:0:0:ffff:a02:304", ANONYMOUS)


@pytest.mark.parametrize("network", ["10.0.0.0/8", "127.0.0.0/8", "fd00::/8", "10.1.2.0/31"])
def test_F7_a_trusted_proxy_is_one_address_never_a_network(network: str) -> None:
    with pytest.raises(ValueError, match=r"is a network of \d+ addresses: list each proxy.s own address"):
        Authenticator(trusted_proxies=[network])
    assert [str(n) for n in parse_proxy_addresses(["127.0.0.1", "10.1.2.3/32", "::1/128"])] == [
        "127.0.0.1/32",
        "10.1.2.3/32",
        "::1/128",
    ]


EDGE = "User:CN=edge-proxy,O=Acme"
FORGED = {"x-forwarded-client-cert": 'Subject="CN=ops-admin"'}


def test_F7_a_proxy_known_by_its_certificate_is_believed_and_any_other_peer_is_not() -> None:
    authenticator = Authenticator(trusted_proxy_principals=[EDGE])
    assert authenticator.authenticate(FORGED, "10.9.9.9", 1, EDGE)[0] == "User:CN=ops-admin"
    # another pod with a valid certificate of the same CA, or none, in the same network
    assert authenticator.authenticate(FORGED, "10.9.9.9", 1, "User:CN=some-app")[0] == "User:CN=some-app"
    assert authenticator.authenticate(FORGED, "10.9.9.9", 1, ANONYMOUS)[0] == ANONYMOUS


def test_F7_with_both_settings_a_proxy_must_match_its_address_and_its_certificate() -> None:
    authenticator = Authenticator(trusted_proxies=["127.0.0.1"], trusted_proxy_principals=[EDGE])
    assert authenticator.authenticate(FORGED, "127.0.0.1", 1, EDGE)[0] == "User:CN=ops-admin"
    assert authenticator.authenticate(FORGED, "10.9.9.9", 1, EDGE)[0] == EDGE
    assert authenticator.authenticate(FORGED, "127.0.0.1", 1, ANONYMOUS)[0] == ANONYMOUS


def test_F8_required_authentication_refuses_anonymous_requests_and_connections(tmp_path: Path) -> None:
    authenticator = Authenticator(tokens_file(tmp_path), require_authentication=True)
    with pytest.raises(AuthenticationError, match="authentication is required"):
        authenticator.authenticate({}, "192.0.2.5", 1, ANONYMOUS)
    assert authenticator.authenticate({}, "192.0.2.5", 1, "User:CN=me")[0] == "User:CN=me"
    headers = {"authorization": f"Bearer {SECRET}"}
    assert authenticator.authenticate(headers, "192.0.2.5", 1, ANONYMOUS)[0] == "User:alice"
    # a trusted proxy forwarding no certificate does not make its client someone
    proxied = Authenticator(trusted_proxies=["127.0.0.1"], require_authentication=True)
    with pytest.raises(AuthenticationError):
        proxied.authenticate({}, "127.0.0.1", 1, ANONYMOUS)
    with pytest.raises(AuthenticationError, match="no client certificate"):
        authenticator.connection_principal(ANONYMOUS)
    assert authenticator.connection_principal("User:CN=me") == "User:CN=me"
    assert Authenticator().connection_principal(ANONYMOUS) == ANONYMOUS  # the default: not required
    assert Authenticator().authenticate({}, None, None, ANONYMOUS)[0] == ANONYMOUS


def test_a_known_token_names_the_principal_and_wins_over_the_certificate(tmp_path: Path) -> None:
    authenticator = Authenticator(tokens_file(tmp_path))
    headers = {"authorization": f"Bearer {SECRET}"}
    assert authenticator.authenticate(headers, "192.0.2.5", 1, "User:CN=cert")[0] == "User:alice"
    assert authenticator.authenticate({}, "192.0.2.5", 1, "User:CN=cert")[0] == "User:CN=cert"
    with pytest.raises(AuthenticationError, match="unknown bearer token"):
        authenticator.authenticate({"authorization": "Bearer guess"}, "192.0.2.5", 1, ANONYMOUS)


def test_without_a_tokens_file_bearer_tokens_are_not_checked() -> None:
    assert (
        Authenticator().authenticate({"authorization": "Bearer anything"}, None, None, ANONYMOUS)[0]
        == ANONYMOUS
    )


def test_a_changed_tokens_file_is_reloaded_and_a_broken_one_is_not(tmp_path: Path) -> None:
    path = tokens_file(tmp_path)
    authenticator = Authenticator(path)
    assert not authenticator.refresh_tokens()  # unchanged
    Path(path).write_text('"rotated": "User:alice"\n')
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse file systems
    assert authenticator.refresh_tokens()
    assert (
        authenticator.authenticate({"authorization": "Bearer rotated"}, None, None, ANONYMOUS)[0]
        == "User:alice"
    )
    with pytest.raises(AuthenticationError):
        authenticator.authenticate({"authorization": f"Bearer {SECRET}"}, None, None, ANONYMOUS)
    Path(path).write_text("- not a mapping\n")
    os.utime(path, ns=(2, 2))
    assert not authenticator.refresh_tokens()
    assert (
        authenticator.authenticate({"authorization": "Bearer rotated"}, None, None, ANONYMOUS)[0]
        == "User:alice"
    )
