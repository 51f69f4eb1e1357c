"""A self-signed certificate for 127.0.0.1, made with the openssl command (Debian's base system)."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
