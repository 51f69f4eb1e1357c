"""The open-file limit shared among the listeners' sockets (F9): all the connection limits allow when
it fits, else shares in proportion that leave the sink's own files their descriptors."""

from __future__ import annotations

from ingest.transports.descriptors import (
    RESERVED_DESCRIPTORS,
    descriptors_in_use,
    open_file_limit,
    share_descriptors,
)

DEFAULTS = {"GRPC": 10_000, "HTTP": 11_000, "KAFKA": 11_000}  # max.connections (+ 1,000 waiting at a gate)


def test_F9_a_limit_that_fits_every_listener_gives_each_all_its_limits_allow() -> None:
    shares = share_descriptors(1_048_576, 40, DEFAULTS)
    assert not shares.reduced
    assert shares.shares == DEFAULTS
    assert shares.for_sockets == 1_048_576 - 40 - RESERVED_DESCRIPTORS


def test_F9_a_limit_too_low_shares_what_the_sink_does_not_keep_in_proportion() -> None:
    shares = share_descriptors(1024, 60, DEFAULTS)
    assert shares.reduced
    assert shares.for_sockets == 1024 - 60 - 256
    assert sum(shares.shares.values()) <= shares.for_sockets
    assert shares.shares == {"GRPC": 221, "HTTP": 243, "KAFKA": 243}  # 708 x 10/32, x 11/32, x 11/32
    message = shares.message()
    assert "open-file limit (1,024) leaves 708 descriptors" in message
    assert "HTTP 243 (of 11,000)" in message
    assert "ulimit -n" in message


def test_F9_a_small_limit_keeps_at_most_a_quarter_of_it_and_every_listener_gets_a_socket() -> None:
    shares = share_descriptors(256, 30, DEFAULTS)
    assert shares.for_sockets == 256 - 30 - 64
    tiny = share_descriptors(40, 39, DEFAULTS)
    assert tiny.for_sockets == 0
    assert tiny.shares == {"GRPC": 1, "HTTP": 1, "KAFKA": 1}


def test_the_limit_and_the_descriptors_in_use_are_this_process_s() -> None:
    assert open_file_limit() > descriptors_in_use() > 2  # stdin, stdout, stderr at least
