"""The Kafka listener's wire format: header versions, lenient bodies, and the length check that runs
before kio reads a body (kio's native reader reserves memory for a declared array length first, so a
tiny frame declaring 2**32 items would abort the process)."""

from __future__ import annotations

import datetime
import struct
from dataclasses import fields

import pytest
from kio.index import load_request_schema
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.push_telemetry.v0.response import PushTelemetryResponse
from kio.static.primitive import i32Timedelta

from ingest.kafka.protocol import (
    SUPPORTED_VERSIONS,
    FrameError,
    check_lengths,
    encode_response,
    parse_request,
    peek_header,
)
from tests.support.kafka import encode_request


def _header(api_key: int, api_version: int, flexible: bool) -> bytes:
    header = struct.pack(">hhih", api_key, api_version, 1, -1)
    return header + (b"\x00" if flexible else b"")  # header v2: no tagged fields


HUGE_LENGTHS = {
    "Metadata v12, 2**32 - 2 topics (compact array)": (3, 12, _header(3, 12, True) + b"\xff\xff\xff\xff\x0f"),
    "Metadata v0, 2**31 - 1 topics": (3, 0, _header(3, 0, False) + struct.pack(">i", 2**31 - 1)),
    "DescribeClientQuotas v0, 2**31 - 1 components": (
        48,
        0,
        _header(48, 0, False) + struct.pack(">i", 2**31 - 1),
    ),
    "AlterClientQuotas v0, 2**31 - 1 entries": (49, 0, _header(49, 0, False) + struct.pack(">i", 2**31 - 1)),
    "AlterClientQuotas v1, a huge entity array inside an entry": (
        49,
        1,
        _header(49, 1, True) + b"\x02" + b"\xff\xff\xff\x7f",
    ),
    "PushTelemetry v0, 2**28 metric bytes": (
        72,
        0,
        _header(72, 0, True) + bytes(16) + struct.pack(">i?b", 1, False, 0) + b"\xff\xff\xff\x7f",
    ),
    "ApiVersions v3, a 2**28-byte software name": (18, 3, _header(18, 3, True) + b"\xff\xff\xff\x7f"),
    "GetTelemetrySubscriptions v0, a 2**28-byte tagged field": (
        71,
        0,
        _header(71, 0, True) + bytes(16) + b"\x01\x00\xff\xff\xff\x7f",
    ),
}


@pytest.mark.parametrize("case", list(HUGE_LENGTHS))
def test_a_declared_length_beyond_the_frame_is_refused_before_kio_reads_it(case: str) -> None:
    api_key, api_version, frame = HUGE_LENGTHS[case]
    with pytest.raises(FrameError, match=r"length|varint|ends inside"):
        parse_request(frame, api_key, api_version)


def test_every_supported_request_schema_is_walked_by_the_length_check() -> None:
    """Every API and version the listener advertises is walked without the check meeting a field type
    it does not know: an empty body is refused with FrameError (or passes, for a body with no fields)."""
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        for version in range(low, high + 1):
            schema = load_request_schema(api_key, version)
            if not fields(schema):  # ApiVersions v0-v2
                check_lengths(schema, b"", 0)
                continue
            with pytest.raises(FrameError, match=r"length|varint|ends inside|left"):
                check_lengths(schema, b"", 0)


def test_trailing_bytes_after_the_body_are_ignored() -> None:
    frame = encode_request(MetadataRequest(topics=None, include_topic_authorized_operations=False), 9)[4:]
    header, body = parse_request(frame + b"\x00\x01\x02", 3, 12)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        9,
        "kio-test",
    )
    assert body.topics is None


def test_peek_header_refuses_a_frame_shorter_than_a_header() -> None:
    assert peek_header(struct.pack(">hhih", 18, 3, 5, -1)) == (18, 3, 5)
    with pytest.raises(FrameError):
        peek_header(b"\x00\x12\x00")


def test_api_versions_answers_with_response_header_v0_and_telemetry_with_v1() -> None:
    zero = i32Timedelta.parse(datetime.timedelta(0))
    api_versions = encode_response(
        18, 3, 77, ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=zero)
    )
    push = encode_response(72, 0, 77, PushTelemetryResponse(throttle_time=zero, error_code=ErrorCode.none))
    assert api_versions[4:8] == push[4:8] == struct.pack(">i", 77)
    assert push[8] == 0  # header v1: its (empty) tagged fields
    assert struct.unpack(">h", api_versions[8:10]) == (0,)  # header v0: the body's error code at once


@pytest.mark.parametrize(
    ("api_key", "frame"),
    [
        (49, _header(49, 1, True) + b"\x00\x00\x00"),  # AlterClientQuotas v1: entries null (found by fuzzing)
        (48, _header(48, 1, True) + b"\x00\x00\x00"),  # DescribeClientQuotas v1: components null
    ],
)
def test_a_null_where_the_schema_has_none_is_refused(api_key: int, frame: bytes) -> None:
    with pytest.raises(FrameError, match="null"):
        parse_request(frame, api_key, 1)
    assert parse_request(_header(3, 12, True) + b"\x00\x00\x00\x00", 3, 12)[1].topics is None  # nullable
