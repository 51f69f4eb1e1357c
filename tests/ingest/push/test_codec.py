"""Payload decompression and validation, on payloads captured from librdkafka (TEL-16, TEL-19, PD-12)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any
from unittest.mock import patch

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.limits import DEFAULT_LIMITS, RequestLimits
from ingest.push import codec as codec_module
from ingest.push.codec import (
    InvalidPayloadError,
    PayloadError,
    PayloadTooLargeError,
    declared_size,
    decompress,
    parse_metrics_data,
    sniff_compression,
)
from ingest.push.decoding import decode_push
from subscriptions import CompressionType, Errors
from tests.support.otlp import metrics_data
from tests.support.paths import LIBRDKAFKA_FIXTURES

FIXTURES = LIBRDKAFKA_FIXTURES
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
MIB = 1024 * 1024


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.bin"))


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_TEL_19_every_librdkafka_capture_decodes_to_kafka_client_metrics(path: Path) -> None:
    codec = CODECS[path.stem.split("-")[3]]
    payload = decode_push(path.read_bytes(), codec, 64 * MIB, DEFAULT_LIMITS)
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
    assert decode_push(data, codec, MIB, DEFAULT_LIMITS) == raw


def test_TEL_19_java_client_xerial_snappy() -> None:
    raw = metrics_data(points=500)
    assert decode_push(_xerial(raw), 2, MIB, DEFAULT_LIMITS) == raw


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
            decode_push(data, codec, MIB, DEFAULT_LIMITS)
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
        decode_push(b"\xff\xff\xff\xff\xff", 0, MIB, DEFAULT_LIMITS)


def test_TEL_19_unknown_compression_is_invalid() -> None:
    with pytest.raises(InvalidPayloadError, match="unknown compression type 9"):
        decompress(b"x", 9, MIB)


FRAMED = {1: _gzip, 3: _lz4, 4: _zstd}  # the codecs whose payload may hold several members or frames


class _CountingDecoder:
    """The real decoder of one frame, counting the input bytes handed to it."""

    def __init__(self, decoder: Any, fed: list[int]) -> None:
        self._decoder = decoder
        self._fed = fed

    @property
    def eof(self) -> bool:
        return bool(self._decoder.eof)

    @property
    def unused_data(self) -> bytes | None:
        unused: bytes | None = self._decoder.unused_data
        return unused

    def decompress(self, data: memoryview, max_length: int, /) -> bytes:
        self._fed[0] += len(data)
        out: bytes = self._decoder.decompress(data, max_length)
        return out


def _decompress_counting_fed(data: bytes, codec: int, max_bytes: int, max_frames: int) -> tuple[bytes, int]:
    """``decompress``, and how many input bytes its frame decoders were handed in all."""
    kind = CompressionType(codec)
    real = codec_module._FRAME_DECODERS[kind]
    fed = [0]
    with patch.dict(codec_module._FRAME_DECODERS, {kind: lambda: _CountingDecoder(real(), fed)}):
        out = decompress(data, codec, max_bytes, max_compressed_frames=max_frames)
    return out, fed[0]


@pytest.mark.parametrize("codec", sorted(FRAMED))
def test_F5_many_frames_cost_linear_work_not_the_rest_of_the_input_per_frame(codec: int) -> None:
    """Twice the frames, twice the bytes handed to the decoders (handing each frame the rest of the
    input, as before, was n*S/2: four times as much)."""
    raw = metrics_data(points=3)
    frame = FRAMED[codec](raw)
    fed = {}
    for n in (1_000, 2_000):
        out, fed[n] = _decompress_counting_fed(frame * n, codec, n * len(raw), max_frames=n)
        assert out == raw * n
        assert fed[n] <= 3 * n * len(frame) + 256 * n
    assert 1.9 <= fed[2_000] / fed[1_000] <= 2.1


@settings(max_examples=60)
@given(
    codec=st.sampled_from(sorted(FRAMED)),
    sizes=st.lists(st.integers(0, 3_000), min_size=1, max_size=40),
    seed=st.binary(min_size=16, max_size=16),
)
def test_F5_the_bytes_decoders_are_handed_are_bounded_by_the_input_size(
    codec: int, sizes: list[int], seed: bytes
) -> None:
    """Whatever the number and sizes of frames: at most 3 times the input plus 256 bytes a frame."""
    raws = [(seed * (size // 16 + 1))[:size] + bytes(size % 7) for size in sizes]
    data = b"".join(FRAMED[codec](raw) for raw in raws)
    out, fed = _decompress_counting_fed(data, codec, MIB, max_frames=len(raws))
    assert out == b"".join(raws)
    assert fed <= 3 * len(data) + 256 * len(raws)


@pytest.mark.parametrize("codec", sorted(FRAMED))
def test_F5_more_frames_than_max_compressed_frames_is_too_large(codec: int) -> None:
    frame = FRAMED[codec](b"x")
    frames = DEFAULT_LIMITS.max_compressed_frames
    assert decompress(frame * frames, codec, MIB) == b"x" * frames
    with pytest.raises(PayloadTooLargeError, match=f"more than {frames} ") as info:
        decompress(frame * (frames + 1), codec, MIB)
    assert info.value.error == Errors.TELEMETRY_TOO_LARGE
    with pytest.raises(PayloadTooLargeError):
        decode_push(frame * 3, codec, MIB, RequestLimits(max_compressed_frames=2))


Payload = tuple[int, bytes, bytes | None]
"""A codec, bytes for it, and what they decompress to when they are intact (else None)."""


def _compressed(codec: int, raws: list[bytes], cut: int, flip: int, tail: bytes) -> Payload:
    """``raws`` compressed one frame each, then the first ``cut`` bytes kept, a bit flipped, a tail
    added (all optional)."""
    data = bytearray(b"".join(COMPRESS[codec](raw) if codec else raw for raw in raws))
    one_snappy_block = codec != 2 or len(raws) == 1  # raw snappy blocks do not concatenate
    intact = one_snappy_block and not (cut and cut < len(data)) and not flip and not tail
    if data and flip:
        data[flip % len(data)] ^= 1 << (flip % 8)
    return codec, bytes(data[: cut or None]) + tail, b"".join(raws) if intact else None


def _payloads() -> st.SearchStrategy[Payload]:
    """Valid frames, or valid frames cut, flipped, padded, or random bytes, for any codec."""
    codec = st.sampled_from([0, 1, 2, 3, 4])
    raws = st.lists(st.binary(max_size=2_000) | st.integers(0, 5_000).map(bytes), min_size=1, max_size=4)
    valid = st.builds(_compressed, codec, raws, st.just(0), st.just(0), st.just(b""))
    mangled = st.builds(
        _compressed, codec, raws, st.integers(0, 3_000), st.integers(0, 4_096), st.binary(max_size=30)
    )
    random = st.tuples(st.integers(0, 5), st.binary(max_size=300), st.none())
    return valid | mangled | random


@settings(max_examples=400)
@given(payload=_payloads(), max_bytes=st.integers(0, 6_000))
def test_PD_12_any_bytes_decompress_within_the_cap_or_fail_as_a_payload_error(
    payload: Payload, max_bytes: int
) -> None:
    """Fuzzing every codec: the answer is the data (at most the cap) or a PayloadError, nothing else."""
    codec, data, expected = payload
    try:
        out = decompress(data, codec, max_bytes, max_compressed_frames=4)
    except PayloadTooLargeError:
        assert expected is None or len(expected) > max_bytes
        return
    except PayloadError:
        assert expected is None
        return
    assert len(out) <= max_bytes
    assert expected is None or out == expected


SNIFFED = {1: _gzip, 3: _lz4, 4: _zstd, 2: _xerial}  # snappy as Kafka's Java client frames it


@pytest.mark.parametrize("codec", sorted(SNIFFED))
def test_raw_forwarders_a_compressed_payload_is_named_by_its_magic_bytes_and_decompresses(codec: int) -> None:
    raw = metrics_data(points=20)
    body = SNIFFED[codec](raw)
    sniffed = sniff_compression(body)
    assert sniffed == codec
    assert sniffed is not None
    assert decompress(body, sniffed, MIB) == raw


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_raw_forwarders_librdkafka_pushes_sniff_as_their_codec_but_raw_snappy_and_none_sniff_as_nothing(
    path: Path,
) -> None:
    """librdkafka compresses with gzip, lz4 and zstd frames (sniffed) and with raw snappy blocks,
    which have no magic bytes; an uncompressed MetricsData starts with its field-1 tag."""
    codec = CODECS[path.stem.split("-")[3]]
    assert sniff_compression(path.read_bytes()) == (None if codec in (0, 2) else codec)


@pytest.mark.parametrize(
    "body",
    [b"", b"\x1f", b"\x28\xb5\x2f", b"\x04\x22\x4d", b"\x82SNAPPY", b"\x0a\x00", b"\x00\x1f\x8b"],
)
def test_raw_forwarders_a_body_without_a_whole_magic_at_its_start_sniffs_as_nothing(body: bytes) -> None:
    assert sniff_compression(body) is None


MAGIC = {
    CompressionType.GZIP: b"\x1f\x8b",
    CompressionType.ZSTD: b"\x28\xb5\x2f\xfd",
    CompressionType.LZ4: b"\x04\x22\x4d\x18",
    CompressionType.SNAPPY: b"\x82SNAPPY\x00",
}


@given(st.sampled_from(sorted(MAGIC)), st.binary(max_size=64), st.binary(max_size=64))
def test_raw_forwarders_a_body_sniffs_as_the_codec_whose_magic_starts_it_and_only_then(
    codec: CompressionType, tail: bytes, other: bytes
) -> None:
    assert sniff_compression(MAGIC[codec] + tail) == codec
    starts = [kind for kind, magic in MAGIC.items() if other.startswith(magic)]
    assert sniff_compression(other) == (starts[0] if starts else None)


def test_declared_size_is_what_a_zstd_frame_states_and_zero_otherwise() -> None:
    data = b"x" * 9000
    assert declared_size(zstandard.ZstdCompressor().compress(data), CompressionType.ZSTD) == 9000
    silent = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert declared_size(silent, CompressionType.ZSTD) == 0
    assert declared_size(b"not zstd at all", CompressionType.ZSTD) == 0
    assert declared_size(gzip.compress(data), CompressionType.GZIP) == 0
