"""Payload decompression and validation, on payloads captured from librdkafka (TEL-16, TEL-19, PD-12)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard

from ingest.codec import (
    InvalidPayloadError,
    PayloadTooLargeError,
    decode_payload,
    decompress,
    parse_metrics_data,
)
from subscriptions import Errors
from tests.support.otlp import metrics_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "librdkafka"
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
MIB = 1024 * 1024


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.bin"))


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_TEL_19_every_librdkafka_capture_decodes_to_kafka_client_metrics(path: Path) -> None:
    codec = CODECS[path.stem.split("-")[3]]
    payload = decode_payload(path.read_bytes(), codec, 64 * MIB)
    data = parse_metrics_data(payload)
    names = [m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    assert names
    assert all(name.startswith("org.apache.kafka.") for name in names)
    assert len(names) == (15 if "consumer" in path.stem else 10)


def test_fixtures_cover_every_codec() -> None:
    assert {p.stem.split("-")[3] for p in _fixtures()} == set(CODECS)


def _xerial(raw: bytes, block: int = 4096) -> bytes:
    """Kafka's Java client frames snappy the xerial way: magic, versions, then [length][block]."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(raw), block):
        compressed = bytes(cramjam.snappy.compress_raw(raw[i : i + block]))
        out += struct.pack(">i", len(compressed)) + compressed
    return out


def _gzip(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=1)


def _snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def _lz4(raw: bytes) -> bytes:
    compressed: bytes = lz4.frame.compress(raw)
    return compressed


def _zstd(raw: bytes) -> bytes:
    compressed: bytes = zstandard.ZstdCompressor(level=1).compress(raw)
    return compressed


COMPRESS = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_TEL_19_round_trip(codec: int) -> None:
    raw = metrics_data(points=50)
    data = COMPRESS[codec](raw) if codec else raw
    assert decode_payload(data, codec, MIB) == raw


def test_TEL_19_java_client_xerial_snappy() -> None:
    raw = metrics_data(points=500)
    assert decode_payload(_xerial(raw), 2, MIB) == raw


def test_TEL_19_concatenated_gzip_members_and_lz4_frames() -> None:
    raw = metrics_data(points=20)
    half = len(raw) // 2
    assert decompress(gzip.compress(raw[:half]) + gzip.compress(raw[half:]), 1, MIB) == raw
    assert decompress(_lz4(raw[:half]) + _lz4(raw[half:]), 3, MIB) == raw
    assert decompress(_zstd(raw[:half]) + _zstd(raw[half:]), 4, MIB) == raw


@pytest.mark.parametrize("codec", [1, 2, 3, 4, "xerial"])
def test_PD_12_a_zip_bomb_is_too_large_not_invalid(codec: int | str) -> None:
    bomb_raw = bytes(200 * MIB)
    data = _xerial(bomb_raw, 64 * 1024) if codec == "xerial" else COMPRESS[int(codec)](bomb_raw)
    assert len(data) < 20 * MIB
    with pytest.raises(PayloadTooLargeError) as info:
        decompress(data, 2 if codec == "xerial" else int(codec), MIB)
    assert info.value.error == Errors.TELEMETRY_TOO_LARGE


def test_PD_12_the_cap_is_exact() -> None:
    raw = bytes(1000)
    for codec, compress in COMPRESS.items():
        assert len(decompress(compress(raw), codec, 1000)) == 1000
        with pytest.raises(PayloadTooLargeError):
            decompress(compress(raw), codec, 999)
    with pytest.raises(PayloadTooLargeError):
        decompress(raw, 0, 999)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_PD_12_corrupt_and_truncated_data_is_invalid_record(codec: int) -> None:
    good = COMPRESS[codec](metrics_data(points=100))
    corrupt = good[:10] + bytes(b ^ 0xFF for b in good[10:30]) + good[30:]
    for data in (corrupt, good[: len(good) // 2], b"definitely not compressed"):
        with pytest.raises(InvalidPayloadError) as info:
            decode_payload(data, codec, MIB)
        assert info.value.error == Errors.INVALID_RECORD


def test_PD_12_a_failed_zstd_payload_leaves_nothing_behind_for_the_next() -> None:
    """The zstd decompressor is reused across pushes: a bomb or a truncated frame stopped mid-way must
    not leak state into the next push decompressed on the same thread."""
    raw = metrics_data(points=50)
    good = _zstd(raw)
    for bad in (_zstd(bytes(4 * MIB)), good[: len(good) // 2], good[:10] + bytes(20) + good[30:]):
        with pytest.raises((PayloadTooLargeError, InvalidPayloadError)):
            decompress(bad, 4, MIB)
        assert decompress(good, 4, MIB) == raw


def test_PD_12_bytes_that_are_not_otlp_are_invalid_record() -> None:
    with pytest.raises(InvalidPayloadError, match="not OTLP MetricsData"):
        decode_payload(b"\xff\xff\xff\xff\xff", 0, MIB)


def test_TEL_19_unknown_compression_is_invalid() -> None:
    with pytest.raises(InvalidPayloadError, match="unknown compression type 9"):
        decompress(b"x", 9, MIB)
