"""Decompressing and validating a PushTelemetry payload (docs/rules.md TEL-16 step 9, TEL-19, PD-12).

``decompress(data, compression_type, max_bytes)`` returns what a push's or an export's payload holds
once decompressed, and ``parse_metrics_data`` the OTLP ``MetricsData`` (``decoding`` runs them, with
the structural scan between); each raises a ``PayloadError`` carrying the Kafka error code to answer:

- more than ``max_decompressed_bytes`` after decompression (a zip bomb, or just too much):
  TELEMETRY_TOO_LARGE (118), which clients retry at their next interval; never INVALID_RECORD, which
  would stop their telemetry for good (PD-12);
- more than ``max_compressed_frames`` gzip members, lz4 frames or zstd frames in one payload
  (``limits.max_compressed_frames``, 64 by default; a Kafka client sends one): TELEMETRY_TOO_LARGE;
- corrupt or truncated compressed data, or bytes that are not OTLP ``MetricsData``: INVALID_RECORD (87).

Decompression is streaming and bounded: no codec ever produces more than the cap plus one byte, and
the work is linear in the input. Gzip members and lz4 and zstd frames are walked with offsets into
one ``memoryview``: each frame's decoder is fed chunks that start small and double up to 1 MiB, and
the input it did not use is taken from the original at the next offset, never handed on as a copy of
the rest (so a payload of many tiny frames costs at most three times its size plus 256 bytes per
frame, not the size times the frames). Codecs: 0 none, 1 gzip (every member), 2 snappy (a raw block
as librdkafka sends it, or the xerial framing of Kafka's Java client, block by block), 3 lz4
(frames), 4 zstd (frames).

``declared_size(data, compression_type)`` is the decompressed size a zstd frame's header states (a
Kafka client's zstd frames state it), 0 when it states none: a hint, never trusted as a bound.

``sniff_compression(body)`` names the codec whose magic bytes start a body that came without one:
raw forwarders (the PoC broker plugins of Kafka 3.7, whose brokers do not decompress) post a
client's compressed payload as is. A raw snappy block (librdkafka's) has no magic and is not sniffed.
"""

from __future__ import annotations

import io
import struct
import threading
import zlib
from collections.abc import Callable
from typing import ClassVar, Final, Protocol

import cramjam
import lz4.frame
import zstandard
from google.protobuf.message import DecodeError
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from ingest.limits import DEFAULT_LIMITS
from subscriptions import CompressionType, Errors
from subscriptions.errors import ApiError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "InvalidPayloadError",
    "PayloadError",
    "PayloadTooLargeError",
    "decompress",
    "parse_metrics_data",
    "sniff_compression",
]

DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 20 * 1024 * 1024  # the OTel Collector's default
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_MAGIC: Final = (
    (b"\x1f\x8b", CompressionType.GZIP),  # RFC 1952 member header
    (b"\x28\xb5\x2f\xfd", CompressionType.ZSTD),  # zstd frame magic 0xFD2FB528, little-endian
    (b"\x04\x22\x4d\x18", CompressionType.LZ4),  # lz4 frame magic 0x184D2204, little-endian
    (_XERIAL_MAGIC, CompressionType.SNAPPY),  # Kafka's Java client (what _unsnappy reads as xerial)
)
_CHUNK: Final = 1 << 20
_FIRST_FEED: Final = 256
"""The first chunk fed to a frame's decoder: about the header and a small frame (each next one doubles)."""
_ZSTD = threading.local()  # a ZstdDecompressor per thread: creating one costs ten decompressions of a push


class PayloadError(ApiError):
    """The payload cannot be exported; ``error`` is the Kafka code to answer with."""

    error: ClassVar[Errors] = Errors.INVALID_RECORD


class InvalidPayloadError(PayloadError):
    """Corrupt compressed data, or not OTLP MetricsData: INVALID_RECORD (87)."""

    error = Errors.INVALID_RECORD


class PayloadTooLargeError(PayloadError):
    """Bigger than the configured cap once decompressed, or too many frames: TELEMETRY_TOO_LARGE (118)."""

    error = Errors.TELEMETRY_TOO_LARGE


def parse_metrics_data(payload: bytes) -> MetricsData:
    try:
        return MetricsData.FromString(payload)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise InvalidPayloadError(f"the payload is not OTLP MetricsData: {exc}") from exc


def declared_size(data: bytes, compression_type: int) -> int:
    """The decompressed size the first zstd frame of ``data`` declares; 0 for any other codec, a frame
    without one, or a header that is not zstd's."""
    if compression_type != CompressionType.ZSTD:
        return 0
    try:
        return max(zstandard.frame_content_size(data), 0)
    except zstandard.ZstdError:
        return 0


def sniff_compression(body: bytes) -> CompressionType | None:
    """The Kafka compression type whose magic bytes start ``body`` (gzip, zstd, lz4 frame or xerial
    snappy), or None: uncompressed, raw snappy, or not compressed data at all."""
    for magic, kind in _MAGIC:
        if body.startswith(magic):
            return kind
    return None


def decompress(
    data: bytes,
    compression_type: int,
    max_bytes: int,
    *,
    max_compressed_frames: int = DEFAULT_LIMITS.max_compressed_frames,
) -> bytes:
    """Decompress ``data`` per Kafka's ``compression_type``, producing at most ``max_bytes`` from at
    most ``max_compressed_frames`` gzip members, lz4 frames or zstd frames."""
    try:
        kind = CompressionType(compression_type)
    except ValueError:
        raise InvalidPayloadError(f"unknown compression type {compression_type}") from None
    try:
        if kind is CompressionType.NONE:
            out = data
        elif kind is CompressionType.SNAPPY:
            out = _unsnappy(data, max_bytes)
        elif kind is CompressionType.ZSTD:
            out = _unzstd(data, max_bytes, max_compressed_frames)
        else:
            out = _frames(data, kind, max_bytes, max_compressed_frames)
    except PayloadError:
        raise
    except Exception as exc:  # every codec's own error type for corrupt input
        raise InvalidPayloadError(f"corrupt {kind.name.lower()} data: {exc}") from exc
    if len(out) > max_bytes:
        raise _too_large(max_bytes)
    return out


def _too_large(max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"more than {max_bytes} bytes once decompressed")


class _FrameDecoder(Protocol):
    """The decoder of one gzip member, lz4 frame or zstd frame (what zlib, lz4 and zstandard share):
    ``unused_data`` is the input fed after the frame's end (empty or None before it)."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes | None: ...

    def decompress(self, data: memoryview, max_length: int, /) -> bytes: ...


class _ZstdFrame:
    """A zstd frame's ``decompressobj``, whose output needs no bound: ``_unzstd`` bounded it first."""

    __slots__ = ("_frame",)

    def __init__(self, frame: zstandard.ZstdDecompressionObj) -> None:
        self._frame = frame

    @property
    def eof(self) -> bool:
        return bool(self._frame.eof)

    @property
    def unused_data(self) -> bytes:
        return bytes(self._frame.unused_data)

    def decompress(self, data: memoryview, max_length: int, /) -> bytes:
        return bytes(self._frame.decompress(data))


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_ZSTD, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return decompressor


_FRAME_DECODERS: Final[dict[CompressionType, Callable[[], _FrameDecoder]]] = {
    CompressionType.GZIP: lambda: zlib.decompressobj(wbits=31),
    CompressionType.LZ4: lz4.frame.LZ4FrameDecompressor,
    CompressionType.ZSTD: lambda: _ZstdFrame(_zstd_decompressor().decompressobj()),
}


def _frames(data: bytes, kind: CompressionType, max_bytes: int, max_frames: int) -> bytes:
    """Every frame of ``data`` decompressed in turn, in linear time (the module docstring): a frame's
    decoder is fed chunks at offsets into ``data``, and what it did not use is the next frame's."""
    view = memoryview(data)
    new_decoder = _FRAME_DECODERS[kind]
    name = kind.name.lower()
    out = bytearray()
    position = frames = 0
    while position < len(view):
        frames += 1
        if frames > max_frames:
            raise PayloadTooLargeError(f"more than {max_frames} {name} frames in one payload")
        decoder = new_decoder()
        feed = _FIRST_FEED
        while not decoder.eof:
            chunk = view[position : position + feed]
            if not chunk:
                raise InvalidPayloadError(f"truncated {name} data")
            out += decoder.decompress(chunk, max_bytes + 1 - len(out))
            if len(out) > max_bytes:  # else the decoder used the whole chunk, or the frame ended in it
                raise _too_large(max_bytes)
            position += len(chunk) - len(decoder.unused_data or b"")
            feed = min(2 * feed, _CHUNK)
    return bytes(out)


def _unzstd(data: bytes, max_bytes: int, max_frames: int) -> bytes:
    decompressor = _zstd_decompressor()  # each operation below resets it, so a failed one leaves no state
    # first a bounded read, which stops a bomb but says nothing about a truncated frame...
    reader = decompressor.stream_reader(io.BytesIO(data), read_across_frames=True)
    size = 0
    while chunk := reader.read(min(_CHUNK, max_bytes + 1 - size)):
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
    # ...then the same bytes frame by frame (no bigger than the first pass), each frame complete
    return _frames(data, CompressionType.ZSTD, max_bytes, max_frames)


def _unsnappy(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, max_bytes)
    out = bytearray()  # xerial framing: magic, version, compatible version, then [length][block]...
    position = len(_XERIAL_MAGIC) + 8
    while position < len(data):
        if position + 4 > len(data):
            raise InvalidPayloadError("truncated xerial snappy block header")
        (length,) = struct.unpack_from(">i", data, position)
        block = data[position + 4 : position + 4 + length]
        if length < 0 or len(block) != length:
            raise InvalidPayloadError("truncated xerial snappy block")
        out += _snappy_block(block, max_bytes - len(out))
        position += 4 + length
    return bytes(out)


def _snappy_block(block: bytes, max_bytes: int) -> bytes:
    if cramjam.snappy.decompress_raw_len(block) > max_bytes:  # the block states its length first
        raise _too_large(max_bytes)
    return bytes(cramjam.snappy.decompress_raw(block))
