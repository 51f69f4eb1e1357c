"""Certificates for tests: a self-signed one for 127.0.0.1, made with the openssl command (Debian's
base system); and a CA that issues server and client certificates with any subject (``cryptography``).
"""

from __future__ import annotations

import datetime
import subprocess
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) in PEM for CN and IP SAN 127.0.0.1, valid for a day; it is its own CA."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class CertificateAuthority:
    """A CA in ``folder`` (``ca.pem``) issuing certificates valid for a day: ``issue`` writes
    ``<name>.pem`` and ``<name>.key`` for a subject given attribute by attribute, in DER order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
        self.certificate = self._sign(self._name, self._key.public_key(), ca=True)
        self.ca_file = folder / "ca.pem"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def _sign(
        self, subject: x509.Name, key: ec.EllipticCurvePublicKey, *, ca: bool = False
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(self._key, hashes.SHA256())

    def issue(self, name: str, *attributes: tuple[x509.ObjectIdentifier, str]) -> tuple[Path, Path]:
        """(certificate, key) in PEM for the subject made of ``attributes``, one RDN each."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])
        cert_file, key_file = self.folder / f"{name}.pem", self.folder / f"{name}.key"
        cert_file.write_bytes(self._sign(subject, key.public_key()).public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file
