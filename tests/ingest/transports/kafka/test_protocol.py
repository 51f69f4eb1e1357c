"""The Kafka listener's wire format: header versions, lenient bodies, and the length check that runs
before kio reads a body (kio's native reader reserves memory for a declared array length first, so a
tiny frame declaring 2**32 items would abort the process), with the bounds it checks on the way (F10:
per-API array counts, F4: Kafka's 32767-byte strings) as soon as each length is read."""

from __future__ import annotations

import datetime
import struct
from dataclasses import fields

import pytest
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.push_telemetry.v0.response import PushTelemetryResponse
from kio.static.primitive import i32Timedelta

from ingest.transports.kafka.protocol import (
    MAX_METADATA_TOPICS,
    MAX_STRING_BYTES,
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
    it does not know: an empty body is refused with FrameError (or passes, for a body with no fields and
    no tagged fields: ApiVersions v0-v2; a flexible one still needs its tagged-field count, e.g.
    ListConfigResources v0)."""
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        for version in range(low, high + 1):
            schema = load_request_schema(api_key, version)
            if not fields(schema) and not schema.__flexible__:
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


# -- F10 / F4: bounds checked as soon as a length is read, in a walk linear in the frame ---------


def _metadata_v0(topics: int) -> bytes:
    """A Metadata v0 request for ``topics`` empty topic names (2 bytes each)."""
    return _header(3, 0, False) + struct.pack(">i", topics) + b"\x00\x00" * topics


def test_F10_an_8_MiB_metadata_frame_of_4M_topics_is_refused_after_reading_its_array_length() -> None:
    frame = _metadata_v0((8 * 1024 * 1024 - 14) // 2)
    with pytest.raises(FrameError, match="at most 10000") as refused:
        parse_request(frame, 3, 0)
    assert refused.value.work <= 2  # the request entity and the array's length: no topic was walked


def test_F10_metadata_of_at_most_10000_topics_is_read_and_the_walk_grows_linearly() -> None:
    schema = load_request_schema(3, 0)
    header = len(_header(3, 0, False))
    work = {n: check_lengths(schema, _metadata_v0(n), header) for n in (5_000, MAX_METADATA_TOPICS)}
    assert work[MAX_METADATA_TOPICS] - 1 == 2 * (work[5_000] - 1)  # the same steps per topic
    assert len(parse_request(_metadata_v0(MAX_METADATA_TOPICS), 3, 0)[1].topics) == MAX_METADATA_TOPICS


@pytest.mark.parametrize(
    ("api_key", "version", "body", "bound"),
    [
        (48, 0, struct.pack(">i", 4) + (struct.pack(">hbh", 0, 0, -1) * 4), "at most 3"),
        (49, 0, struct.pack(">i", 1001) + struct.pack(">ii", 0, 0) * 1001, "at most 1000"),
        (49, 1, b"\x02" + b"\x05" + b"\x01\x00\x00" * 4 + b"\x01\x00" + b"\x00" + b"\x00", "at most 3"),
        (18, 3, b"\x81\x80\x02" + b"a" * 32768 + b"\x02a\x00", "at most 32767"),
        (71, 0, bytes(16) + b"\x41" + b"\x00\x00" * 65, "at most 64"),
    ],
    ids=[
        "DescribeClientQuotas: 4 components",
        "AlterClientQuotas: 1001 entries",
        "AlterClientQuotas v1: 4 entity parts in an entry",
        "ApiVersions v3: a 32768-byte software name (F4)",
        "GetTelemetrySubscriptions: 65 tagged fields",
    ],
)
def test_F10_a_request_over_a_bound_is_refused_when_its_length_is_read(
    api_key: int, version: int, body: bytes, bound: str
) -> None:
    frame = _header(api_key, version, api_key in (18, 71, 72) or version > 0) + body
    with pytest.raises(FrameError, match=bound) as refused:
        parse_request(frame, api_key, version)
    assert refused.value.work <= 8  # refused at the length, before the items behind it


def test_F4_a_string_of_32767_bytes_is_read_as_kafka_reads_it() -> None:
    name = "a" * MAX_STRING_BYTES
    frame = encode_request(ApiVersionsRequestV3(client_software_name=name, client_software_version="1"), 3)
    assert parse_request(frame[4:], 18, 3)[1].client_software_name == name
