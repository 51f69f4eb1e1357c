"""The principal of a TLS client certificate, as Kafka names it, on every transport (F11).

Kafka's default principal builder (``ssl.principal.mapping.rules=DEFAULT``) names a client certificate
``User:`` + ``X500Principal.getName()``: the subject in RFC 2253 form as Java writes it. The sink
writes the same string from the certificate's DER (gRPC, HTTP and the Kafka port alike), and from the
``Subject`` a trusted proxy forwards (Envoy writes it in RFC 2253 form), so one certificate is one
principal for quotas, super users and the landed rows wherever it connects. Java's form:

- RDNs in reverse order of the certificate's DER (the most specific first), separated by ``,``; the
  attributes of a multi-valued RDN in DER order, separated by ``+``;
- the keywords ``CN``, ``C``, ``L``, ``ST``, ``O``, ``OU``, ``STREET``, ``DC``, ``UID``, any other
  attribute type as its dotted OID with the value as ``#`` + the hex of its DER encoding
  (``emailAddress=a@b.c`` is ``1.2.840.113549.1.9.1=#1605614062...``);
- in values, each of ``, = + < > # ; " \\`` is escaped with ``\\``, and so is every leading and
  trailing space. An ``O`` value ``Acme,CN=ops-admin`` is ``O=Acme\\,CN\\=ops-admin``, which no
  subject with a real ``CN=ops-admin`` can equal.

This differs from ``cryptography``'s ``Name.rfc4514_string()`` (RFC 4514) in escaping (it escapes
``#`` and spaces only at the ends, never ``=``) and in other attribute types (their value as text), so
the sink writes it itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID, ObjectIdentifier

__all__ = [
    "ANONYMOUS",
    "certificate_principal",
    "pem_certificate_principal",
    "rfc2253_name",
    "x500_name",
]

ANONYMOUS: Final = "User:ANONYMOUS"

Ava = tuple[str, str | bytes]
"""One attribute: its RFC 2253 keyword or dotted OID, and its text (a directory string) or the DER
of its value (anything else)."""

_KEYWORDS: Final = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
"""The keywords Java's ``getName()`` writes (RFC 2253's); any other type is written as its OID."""
_KEYWORD_OIDS: Final = {keyword: oid for oid, keyword in _KEYWORDS.items()}
_OTHER_NAMES: Final = {
    "emailaddress": x509.ObjectIdentifier("1.2.840.113549.1.9.1"),
    "e": x509.ObjectIdentifier("1.2.840.113549.1.9.1"),
    "serialnumber": NameOID.SERIAL_NUMBER,
    "title": NameOID.TITLE,
    "gn": NameOID.GIVEN_NAME,
    "givenname": NameOID.GIVEN_NAME,
    "sn": NameOID.SURNAME,
    "surname": NameOID.SURNAME,
    "dnqualifier": NameOID.DN_QUALIFIER,
    "pseudonym": NameOID.PSEUDONYM,
    "businesscategory": NameOID.BUSINESS_CATEGORY,
    "postalcode": NameOID.POSTAL_CODE,
}
"""Names OpenSSL (and so Envoy's XFCC ``Subject``) writes for types RFC 2253 has no keyword for."""
_UTF8, _PRINTABLE, _IA5 = 0x0C, 0x13, 0x16
_TEXT_TAGS: Final = {
    _UTF8: "utf-8",
    _PRINTABLE: "latin-1",
    0x14: "latin-1",  # T61String
    _IA5: "latin-1",
    0x1B: "latin-1",  # GeneralString
    0x1E: "utf-16-be",  # BMPString
    0x1C: "utf-32-be",  # UniversalString
}
"""The string types Java writes as text (``AVA.isDerString``); any other is written as ``#`` + hex."""
_DEFAULT_TAGS: Final = {
    "1.2.840.113549.1.9.1": _IA5,  # emailAddress
    NameOID.SERIAL_NUMBER.dotted_string: _PRINTABLE,
    NameOID.DN_QUALIFIER.dotted_string: _PRINTABLE,
}
"""The string type of a forwarded value of an OID-named type (as certificates encode them)."""
_ESCAPED: Final = frozenset(',=+<>#;"\\')


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    size = (length.bit_length() + 7) // 8
    return bytes([0x80 | size]) + length.to_bytes(size, "big")


def _encode(tag: int, value: str | bytes) -> bytes:
    """The DER of a value: a string of type ``tag``, or the contents of a bit or octet string."""
    data = value.encode(_TEXT_TAGS.get(tag, "utf-8")) if isinstance(value, str) else value
    return bytes([tag]) + _der_length(len(data)) + data


def _escape(text: str) -> str:
    """A value as Java's ``AVA.toRFC2253String`` escapes it."""
    chars = "".join("\\" + char if char in _ESCAPED else char for char in text)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + char if i < lead or i >= trail else char for i, char in enumerate(chars))


def _ava_text(ava: Ava) -> str:
    kind, value = ava
    if isinstance(value, str) and not kind[0].isdigit():
        return f"{kind}={_escape(value)}"
    if isinstance(value, str):  # a forwarded value of an OID-named type: as a certificate encodes it
        value = _encode(_DEFAULT_TAGS.get(kind, _UTF8), value)
    return f"{kind}=#{value.hex()}"


def _join(rdns: Iterable[Sequence[Ava]]) -> str:
    """RDNs in DER order, written most specific first."""
    return ",".join("+".join(_ava_text(ava) for ava in rdn) for rdn in reversed(list(rdns)))


def _attribute(attribute: x509.NameAttribute[str | bytes]) -> Ava:
    keyword = _KEYWORDS.get(attribute.oid)
    tag = int(attribute._type.value)
    value = attribute.value
    if keyword is not None and isinstance(value, str) and tag in _TEXT_TAGS:
        return keyword, value
    return keyword or attribute.oid.dotted_string, _encode(tag, value)


def x500_name(name: x509.Name) -> str:
    """``name`` as Java's ``X500Principal.getName()`` writes it (RFC 2253; module docstring)."""
    return _join([_attribute(attribute) for attribute in rdn] for rdn in name.rdns)


@lru_cache(maxsize=1024)  # one certificate per client, asked on each of its requests
def certificate_principal(der: bytes | None) -> str:
    """``User:`` + the subject of a (verified) DER certificate; ``User:ANONYMOUS`` without one, or
    for a certificate with an empty subject."""
    if not der:
        return ANONYMOUS
    subject = x500_name(x509.load_der_x509_certificate(der).subject)
    return "User:" + subject if subject else ANONYMOUS


@lru_cache(maxsize=1024)
def pem_certificate_principal(pem: bytes) -> str:
    """``certificate_principal`` of a PEM certificate (what grpc-core hands over)."""
    return certificate_principal(x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER))


# -- reading an RFC 2253 string (a forwarded Subject) ---------------------------------------------


def _type_name(text: str) -> str:
    """A type as written (keyword, OpenSSL name, dotted OID, ``OID.`` prefix) -> Java's keyword or OID."""
    name = text.strip()
    if name.upper().startswith("OID."):
        name = name[4:]
    if name[:1].isdigit():
        oid = ObjectIdentifier(name)  # ValueError for a bad one
        return _KEYWORDS.get(oid, oid.dotted_string)
    if name.upper() in _KEYWORD_OIDS:
        return name.upper()
    known = _OTHER_NAMES.get(name.lower())
    if known is None:
        raise ValueError(f"unknown attribute type {name[:32]!r}")
    return known.dotted_string


def _hex_value(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError("a #-value that is not hex") from None


def _read_value(text: str, start: int) -> tuple[str | bytes, int]:
    """The value starting at ``start`` (RFC 4514: ``#hex``, or a string with ``\\`` escapes and
    ``\\XX`` UTF-8 bytes) and the index of the separator after it."""
    if text.startswith("#", start):
        end = start + 1
        while end < len(text) and text[end] not in ",+;":
            end += 1
        return _hex_value(text[start + 1 : end].strip()), end
    out = bytearray()
    i, last_escaped = start, start
    while i < len(text) and text[i] not in ",+;":
        char = text[i]
        if char == "\\":
            pair = text[i + 1 : i + 3]
            if len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair):
                out += bytes.fromhex(pair)
                i += 3
            elif i + 1 < len(text):
                out += text[i + 1].encode("utf-8", "surrogatepass")
                i += 2
            else:
                raise ValueError("a value ends in a lone backslash")
            last_escaped = len(out)
            continue
        if char in '"<>':
            raise ValueError(f"an unescaped {char!r} in a value")
        out += char.encode("utf-8", "surrogatepass")
        i += 1
    value = bytes(out[:last_escaped]) + bytes(out[last_escaped:]).rstrip(b" ")  # unescaped trailing spaces
    try:
        return value.decode("utf-8", "surrogatepass"), i  # text that is not valid: the caller's to judge
    except UnicodeDecodeError:
        raise ValueError("a value that is not UTF-8") from None


def _text_of(der: bytes) -> str | bytes:
    """The text of a DER string value Java writes as text (``CN=#0c03...``), else the DER itself."""
    if len(der) >= 2 and der[0] in _TEXT_TAGS and der[1] == len(der) - 2:
        try:
            return der[2:].decode(_TEXT_TAGS[der[0]])
        except UnicodeDecodeError:
            pass
    return der


def rfc2253_name(text: str) -> str:
    """An RFC 2253 / 4514 distinguished name (``CN=producer-7,O=Acme``, as OpenSSL and Envoy write
    a certificate's subject) rewritten as Java's ``getName()`` writes the same name; ValueError for a
    string that is not a distinguished name. Escapes are read, never folded: ``O=Acme\\,CN=x`` is one
    attribute."""
    rdns: list[list[Ava]] = []  # in the order written (most specific first)
    rdn: list[Ava] = []
    i = 0
    while True:
        equals = text.find("=", i)
        if equals < 0:
            raise ValueError("an attribute without '='")
        kind = _type_name(text[i:equals])
        start = equals + 1
        while start < len(text) and text[start] == " ":
            start += 1
        value, i = _read_value(text, start)
        if isinstance(value, bytes) and not kind[0].isdigit():
            value = _text_of(value)
        rdn.append((kind, value))
        if i >= len(text):
            break
        if text[i] != "+":
            rdns.append(rdn)
            rdn = []
        i += 1
        while i < len(text) and text[i] == " ":
            i += 1
    rdns.append(rdn)
    return _join(reversed(rdns))  # _join takes DER order
