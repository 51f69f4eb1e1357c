"""Decompressing and validating a PushTelemetry payload (spec TEL-16 step 9, TEL-19, PD-12).

``decode_payload(data, compression_type, max_decompressed_bytes)`` returns the OTLP ``MetricsData``
bytes a push carries, or raises a ``PayloadError`` carrying the Kafka error code to answer:

- more than ``max_decompressed_bytes`` after decompression (a zip bomb, or just too much):
  TELEMETRY_TOO_LARGE (118), which clients retry at their next interval; never INVALID_RECORD, which
  would stop their telemetry for good (PD-12);
- corrupt or truncated compressed data, or bytes that are not OTLP ``MetricsData``: INVALID_RECORD (87).

Decompression is streaming and bounded: no codec ever produces more than the cap plus one byte.
Codecs: 0 none, 1 gzip (every member), 2 snappy (a raw block as librdkafka sends it, or the xerial
framing of Kafka's Java client), 3 lz4 (frames), 4 zstd (frames).
"""

from __future__ import annotations

import io
import struct
import threading
import zlib
from typing import Final

import cramjam
import lz4.frame
import zstandard
from google.protobuf.message import DecodeError
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

from subscriptions import CompressionType, Errors

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "InvalidPayloadError",
    "PayloadError",
    "PayloadTooLargeError",
    "decode_payload",
    "decompress",
    "parse_metrics_data",
]

DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 64 * 1024 * 1024
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_CHUNK: Final = 1 << 20
_ZSTD = threading.local()  # a ZstdDecompressor per thread: creating one costs ten decompressions of a push


class PayloadError(Exception):
    """The payload cannot be exported; ``error`` is the Kafka code to answer with."""

    error: Errors = Errors.INVALID_RECORD


class InvalidPayloadError(PayloadError):
    """Corrupt compressed data, or not OTLP MetricsData: INVALID_RECORD (87)."""

    error = Errors.INVALID_RECORD


class PayloadTooLargeError(PayloadError):
    """Bigger than the configured cap once decompressed: TELEMETRY_TOO_LARGE (118)."""

    error = Errors.TELEMETRY_TOO_LARGE


def decode_payload(data: bytes, compression_type: int, max_decompressed_bytes: int) -> bytes:
    """Decompress and validate: the OTLP ``MetricsData`` bytes to hand to the exporter."""
    payload = decompress(data, compression_type, max_decompressed_bytes)
    parse_metrics_data(payload)
    return payload


def parse_metrics_data(payload: bytes) -> MetricsData:
    try:
        return MetricsData.FromString(payload)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise InvalidPayloadError(f"the payload is not OTLP MetricsData: {exc}") from exc


def decompress(data: bytes, compression_type: int, max_bytes: int) -> bytes:
    """Decompress ``data`` per Kafka's ``compression_type``, producing at most ``max_bytes``."""
    try:
        kind = CompressionType(compression_type)
    except ValueError:
        raise InvalidPayloadError(f"unknown compression type {compression_type}") from None
    try:
        if kind is CompressionType.NONE:
            out = data
        elif kind is CompressionType.GZIP:
            out = _gunzip(data, max_bytes)
        elif kind is CompressionType.SNAPPY:
            out = _unsnappy(data, max_bytes)
        elif kind is CompressionType.LZ4:
            out = _unlz4(data, max_bytes)
        else:
            out = _unzstd(data, max_bytes)
    except PayloadError:
        raise
    except Exception as exc:  # every codec's own error type for corrupt input
        raise InvalidPayloadError(f"corrupt {kind.name.lower()} data: {exc}") from exc
    if len(out) > max_bytes:
        raise PayloadTooLargeError(f"more than {max_bytes} bytes once decompressed")
    return out


def _too_large(max_bytes: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"more than {max_bytes} bytes once decompressed")


def _gunzip(data: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:  # a gzip stream may hold several members
        member = zlib.decompressobj(wbits=31)
        out += member.decompress(rest, max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not member.eof:
            if member.unconsumed_tail:
                raise _too_large(max_bytes)
            raise InvalidPayloadError("truncated gzip data")
        rest = member.unused_data
    return bytes(out)


def _unlz4(data: bytes, max_bytes: int) -> bytes:
    out = bytearray()
    rest = data
    while rest:  # one or more frames
        frame = lz4.frame.LZ4FrameDecompressor()
        out += frame.decompress(rest, max_length=max_bytes + 1 - len(out))
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not frame.eof:
            if frame.needs_input:
                raise InvalidPayloadError("truncated lz4 frame")
            raise _too_large(max_bytes)
        rest = frame.unused_data
    return bytes(out)


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_ZSTD, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _unzstd(data: bytes, max_bytes: int) -> bytes:
    decompressor = _zstd_decompressor()  # each operation below resets it, so a failed one leaves no state
    # first a bounded read, which stops a bomb but says nothing about a truncated frame...
    reader = decompressor.stream_reader(io.BytesIO(data), read_across_frames=True)
    size = 0
    while chunk := reader.read(min(_CHUNK, max_bytes + 1 - size)):
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
    # ...then the same bytes frame by frame (no bigger than the first pass), each frame complete
    out = bytearray()
    rest = data
    while rest:
        frame = decompressor.decompressobj()
        out += frame.decompress(rest)
        if not frame.eof:
            raise InvalidPayloadError("truncated zstd frame")
        rest = frame.unused_data
    return bytes(out)


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
