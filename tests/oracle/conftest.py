"""The sink the differential suites compare with the session's Kafka broker (``kafka_oracle``): one per
test module, started as users start it, its PLAINTEXT principal a super user as the broker's is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.process import Running, running_sink

SUPER_ANONYMOUS = "security:\n  super_users: 'User:ANONYMOUS'\n"


@pytest.fixture(scope="module")
def sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    workdir = tmp_path_factory.mktemp("oracle-sink")
    with running_sink(workdir, workdir / "data", extra=SUPER_ANONYMOUS) as running:
        yield running
