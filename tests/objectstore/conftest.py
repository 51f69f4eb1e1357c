"""One S3 server per test process, a fresh bucket per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.s3 import S3, running_s3


@pytest.fixture(scope="session")
def s3() -> Iterator[S3]:
    with running_s3() as server:
        yield server


@pytest.fixture
def s3_root(s3: S3) -> str:
    """``s3://<a new bucket>/lake``: a data root of its own."""
    return f"{s3.bucket()}/lake"
