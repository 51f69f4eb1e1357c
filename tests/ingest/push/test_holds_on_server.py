"""T3-5 on a real ``telemetry-sink serve``: a user quota holds every client id of the user.

``User:alice`` (a bearer token) has a ``<user>`` quota of ``producer_byte_rate`` 10 KiB/s and sends OTLP
exports of ~21 KB back to back, each under a client id it never used before; ``User:bob``, with the same
quota, sends small exports within it beside her. Once her user's sensor is throttled, alice is held:
over OTLP/HTTP her next request waits out the hold before its body is read (or is refused 429 with the
time to wait if it may not wait), over OTLP gRPC it is refused (RESOURCE_EXHAUSTED with the time to
wait); either way what lands of hers stays near the quota, and every export of bob lands. The bounds are
the quota's arithmetic over the time the run really took, never a timing of the sink: what a rate sensor
admits over a span is at most ``quota x (span + samples x window)`` plus its last request.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final

import grpc
import grpc.aio
import httpx
import pytest

from ingest.wire import METRICS_SERVICE, OTLP_METRICS_PATH
from tests.support.otlp import metrics_data
from tests.support.process import Running, running_sink

pytestmark = pytest.mark.integration

QUOTA: Final = 10_240
"""alice's and bob's ``producer_byte_rate`` (bytes/s)."""
QUOTA_SPAN_S: Final = 11
"""``quota.window.num`` x ``quota.window.size.seconds`` (the defaults): the most a rate averages over."""
GREEDY: Final = metrics_data(points=600)
POLITE: Final = metrics_data(points=10)
SENDING_S: Final = 6.0
"""alice sends back to back for this long (before T3-5's fix the review's sender landed 34 times its
quota: some 100 exports in that time where the quota lets about 9 through)."""
GIVE_UP_S: Final = 30.0
CONFIG: Final = """\
security:
  tokens_file: {tokens}
client_quotas:
  - entity: {{user: alice}}
    quotas: {{producer_byte_rate: {quota}}}
  - entity: {{user: bob}}
    quotas: {{producer_byte_rate: {quota}}}
exporter:
  quota_sample_period_s: 0
"""

Export = Callable[[str, str, bytes], Awaitable[str]]
"""One OTLP export as (token, client id, body): ``accepted``, ``refused`` (over quota) or what else."""


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[Running]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text('"t-alice": "User:alice"\n"t-bob": "User:bob"\n')
    extra = CONFIG.format(tokens=tokens, quota=QUOTA)
    with running_sink(tmp_path, tmp_path / "data", replica="holds", extra=extra) as running:
        yield running


async def _run(export: Export) -> None:
    """alice under a new client id per request for ``SENDING_S``; bob beside her."""
    alice: Counter[str] = Counter()
    bob: Counter[str] = Counter()
    done = asyncio.Event()

    async def greedy() -> None:
        for n in itertools.count():
            alice[await export("t-alice", f"app-{n}", GREEDY)] += 1
            if time.monotonic() - started >= SENDING_S:
                break
        done.set()

    async def polite() -> None:
        while not done.is_set():
            bob[await export("t-bob", "bob-app", POLITE)] += 1
            await asyncio.sleep(0.2)  # ~2 KB/s, a fifth of bob's quota

    started = time.monotonic()
    async with asyncio.timeout(GIVE_UP_S):
        await asyncio.gather(greedy(), polite())
    span_s = time.monotonic() - started
    assert alice["accepted"], alice
    assert set(alice) <= {"accepted", "refused"}, alice
    assert alice["accepted"] * len(GREEDY) <= QUOTA * (span_s + QUOTA_SPAN_S) + len(GREEDY), (alice, span_s)
    assert set(bob) == {"accepted"}, bob  # never held, never refused


async def test_T3_5_a_user_quota_holds_every_client_id_of_the_user_over_http(sink: Running) -> None:
    async with httpx.AsyncClient(base_url=sink.http_url, timeout=10) as client:

        async def export(token: str, client_id: str, body: bytes) -> str:
            answer = await client.post(
                OTLP_METRICS_PATH,
                content=body,
                headers={
                    "Authorization": f"Bearer {token}",
                    "x-kafka-client-id": client_id,
                    "Content-Type": "application/x-protobuf",
                },
            )
            if answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1:
                return "refused"
            return "accepted" if answer.status_code == 200 else f"HTTP {answer.status_code}"

        await _run(export)


async def test_T3_5_a_user_quota_holds_every_client_id_of_the_user_over_grpc(sink: Running) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sink.grpc_port}") as channel:
        method: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )

        async def export(token: str, client_id: str, body: bytes) -> str:
            metadata = (("authorization", f"Bearer {token}"), ("x-kafka-client-id", client_id))
            try:
                await method(body, metadata=metadata, timeout=10)
            except grpc.aio.AioRpcError as error:
                trailers = dict(error.trailing_metadata() or ())
                if (
                    error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    and "google.rpc.retryinfo-bin" in trailers
                ):
                    return "refused"
                return str(error.code())
            return "accepted"

        await _run(export)
