"""Connection quotas at the HTTP listener over real loopback sockets (CONN-1, CONN-3, CONN-E1, CONN-E3),
the bounds on sockets waiting at the gate and the HTTP header, body and idle timeouts (F9), and the
grpc connection limits ``ingest.transports.connections`` documents.

Quota time is a fake clock: a connection that must wait waits on it, and the test moves it on. The
connection timeouts run on the loop's clock: tests configure short ones and wait for the server to
close the socket, never asserting how long that took."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio
import pytest
from aiohttp import web

from ingest.transports.connections import (
    DEFAULT_GATE_LIMITS,
    DEFAULT_HTTP_TIMEOUTS,
    HTTP_LISTENER,
    INT_MAX,
    GateLimits,
    HttpTimeouts,
    QuotaGatedSite,
    connection_ip,
    grpc_connection_options,
    register_http_listener,
)
from quotas import ClientQuotaEntity, ConnectionQuotas, MetricName, QuotaConfig, QuotaManagers
from quotas import create_quota_managers as _create_quota_managers
from tests.support.certificates import self_signed
from tests.support.clock import T0, FakeClock, SteppedClock, eventually

pytestmark = pytest.mark.integration

IP = "127.0.0.1"
GROUP = "socket-server-metrics"
REQUEST = b"GET / HTTP/1.1\r\nHost: sink\r\n\r\n"


@dataclass
class Served:
    site: QuotaGatedSite
    runner: web.AppRunner
    quotas: QuotaManagers
    clock: FakeClock
    clients: list[Client] = field(default_factory=list)

    @property
    def connections(self) -> ConnectionQuotas:
        return self.quotas.connections

    def metric(self, name: str, **tags: str) -> float:
        return self.quotas.values(self.clock.now_ms())[MetricName.of(name, GROUP, tags)]


async def _peer(request: web.Request) -> web.Response:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return web.Response(text=str(peer[0]) if peer else "?")


async def _body_size(request: web.Request) -> web.Response:
    return web.Response(text=str(len(await request.read())))


@asynccontextmanager
async def serving(
    keys: dict[str, object],
    clock: FakeClock | None = None,
    ssl_context: ssl.SSLContext | None = None,
    *,
    timeouts: HttpTimeouts = DEFAULT_HTTP_TIMEOUTS,
    gate_limits: GateLimits = DEFAULT_GATE_LIMITS,
    max_connections: int = INT_MAX,
) -> AsyncIterator[Served]:
    """An aiohttp app on loopback behind the gate, with quotas built from Kafka's keys."""
    clock = clock or FakeClock()
    quotas = _create_quota_managers(QuotaConfig.from_mapping(keys), clock)
    register_http_listener(quotas.connections, max_connections=max_connections)
    app = web.Application()
    app.router.add_get("/", _peer)
    app.router.add_post("/size", _body_size)
    runner = web.AppRunner(app, access_log=None, **timeouts.runner_options())
    await runner.setup()
    site = QuotaGatedSite(
        runner,
        quotas.connections,
        clock,
        IP,
        0,
        ssl_context=ssl_context,
        timeouts=timeouts,
        gate_limits=gate_limits,
    )
    await site.start()
    served = Served(site, runner, quotas, clock)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        await runner.cleanup()
        quotas.close()


class Client:
    """One TCP connection speaking just enough HTTP/1.1 (keep-alive) to ask ``GET /``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, served: Served, ssl_context: ssl.SSLContext | None = None) -> Client:
        reader, writer = await asyncio.open_connection(IP, served.site.port, ssl=ssl_context)
        client = cls(reader, writer)
        served.clients.append(client)  # closed when the server goes, if the test did not
        return client

    def send(self, data: bytes = REQUEST) -> None:
        self.writer.write(data)

    async def response(self) -> tuple[int, str]:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)  # a hang guard only
        lines = head.decode().split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
        body = await self.reader.readexactly(length)
        return int(lines[0].split()[1]), body.decode()

    async def get(self) -> tuple[int, str]:
        self.send()
        return await self.response()

    async def closed_by_server(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 10) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.writer.close()

    def reset(self) -> None:
        """Close abruptly: SO_LINGER 0 makes the kernel send RST instead of FIN."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


# -- CONN-1: config and listener registration --------------------------------------------------


def test_CONN_1_http_listener_registers_with_listener_limits() -> None:
    quotas = _create_quota_managers(QuotaConfig(), FakeClock())
    assert register_http_listener(quotas.connections, max_connections=3) == HTTP_LISTENER
    assert quotas.connections.listener_count(HTTP_LISTENER) == 0
    with pytest.raises(ValueError, match=r"listener\.name\.HTTP\.max\.connection\.creation\.rate"):
        register_http_listener(quotas.connections, max_connection_creation_rate=0)


async def test_CONN_1_site_refuses_an_unregistered_listener() -> None:
    quotas = _create_quota_managers(QuotaConfig(), FakeClock())
    runner = web.AppRunner(web.Application())
    await runner.setup()
    try:
        with pytest.raises(ValueError, match="unknown listener"):
            QuotaGatedSite(runner, quotas.connections, FakeClock(), IP, 0)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("peername", "ip"),
    [
        (("127.0.0.1", 5000), "127.0.0.1"),
        (("::1", 5000, 0, 0), "::1"),
        (("::ffff:10.1.2.3", 5000, 0, 0), "10.1.2.3"),  # dual-stack socket: counted as the IPv4 client
        (("0:0:0:0:0:0:0:1", 5000, 0, 0), "::1"),
        ("/tmp/sock", None),
        (None, None),
    ],
)
def test_CONN_3_connection_ip_is_the_canonical_peer_address(peername: object, ip: str | None) -> None:
    assert connection_ip(peername) == ip


# -- CONN-3 / CONN-E1: counts ------------------------------------------------------------------


async def test_CONN_E1_per_ip_limit_closes_the_extra_connection_while_the_others_stay_served() -> None:
    async with serving({"max.connections.per.ip": 2}) as served:
        first, second = await Client.connect(served), await Client.connect(served)
        assert await first.get() == (200, IP)
        assert await second.get() == (200, IP)

        extra = await Client.connect(served)
        assert await extra.closed_by_server()
        assert served.connections.get(IP) == 2  # the rejected one was counted and given back at once
        assert served.connections.listener_count(HTTP_LISTENER) == 2

        assert await first.get() == (200, IP)
        assert await second.get() == (200, IP)
        first.close()
        await eventually(lambda: served.connections.get(IP) == 1)
        again = await Client.connect(served)  # a close frees the slot
        assert await again.get() == (200, IP)
        assert served.connections.get(IP) == 2


async def test_CONN_1_per_ip_override_beats_the_default_over_real_sockets() -> None:
    keys = {"max.connections.per.ip": 5, "max.connections.per.ip.overrides": "127.0.0.1:1"}
    async with serving(keys) as served:
        only = await Client.connect(served)
        assert await only.get() == (200, IP)
        refused = await Client.connect(served)
        assert await refused.closed_by_server()
        assert served.connections.get(IP) == 1


async def test_CONN_3_dec_on_every_kind_of_close_returns_the_counts_to_zero() -> None:
    async with serving({}) as served:
        graceful, reset_idle, reset_mid_request, silent = [await Client.connect(served) for _ in range(4)]
        assert await graceful.get() == (200, IP)
        assert await reset_idle.get() == (200, IP)
        reset_mid_request.send(b"POST / HTTP/1.1\r\nHost: sink\r\nContent-Length: 100\r\n\r\nhalf")
        await eventually(lambda: served.site.waiting == 0)
        assert served.connections.get(IP) == 4

        graceful.close()
        reset_idle.reset()
        reset_mid_request.reset()
        silent.reset()  # never sent a byte
        await eventually(lambda: served.connections.total == 0)
        assert served.connections.get(IP) == 0
        assert served.connections.listener_count(HTTP_LISTENER) == 0
        assert served.metric("connection-count", listener=HTTP_LISTENER) == 0
        assert served.site.gate.sockets == 0


# -- CONN-3: creation rates --------------------------------------------------------------------


async def test_CONN_3_creation_rate_makes_the_accept_wait_for_the_clock_while_others_are_served() -> None:
    clock = SteppedClock()
    # 2 samples of 1 s, 2 connections/s: the third at one instant is rate 3.0 -> (3 - 2) / 2 x 1000 ms
    async with serving({"quota.window.num": 2, "max.connection.creation.rate": 2}, clock) as served:
        first, second = await Client.connect(served), await Client.connect(served)
        assert await first.get() == (200, IP)
        assert await second.get() == (200, IP)
        assert clock.pending == []

        third = await Client.connect(served)
        third.send()
        await eventually(lambda: clock.pending == [500])
        fourth = await Client.connect(served)  # queued behind the third, as behind Kafka's acceptor
        await eventually(lambda: served.site.waiting == 2)
        assert clock.pending == [500]
        assert served.connections.listener_count(HTTP_LISTENER) == 2
        assert served.metric("connection-accept-throttle-time", listener=HTTP_LISTENER) == 500

        assert await first.get() == (200, IP)  # the waiting accept blocks nobody already served

        clock.advance(500)
        assert await third.response() == (200, IP)
        assert clock.now_ms() == T0 + 500
        await eventually(lambda: len(clock.pending) == 1)  # the fourth now waits its own throttle
        fourth.send()
        clock.advance(clock.pending[0])
        assert await fourth.response() == (200, IP)
        assert served.connections.get(IP) == 4


async def test_CONN_E3_ip_rate_violation_is_unrecorded_and_closed_strictly_after_the_throttle() -> None:
    clock = SteppedClock()
    async with serving({"quota.window.num": 2}, clock) as served:
        served.quotas.alter(ClientQuotaEntity(ip=IP), "connection_creation_rate", 2)
        first, second = await Client.connect(served), await Client.connect(served)
        assert await first.get() == (200, IP)
        assert await second.get() == (200, IP)

        throttled = await Client.connect(served)
        await eventually(lambda: clock.pending == [501])  # held open, unread, until past start + 500
        assert served.connections.get(IP) == 2
        assert served.metric("connection-accept-rate", ip=IP) == 2.0  # the third was un-recorded
        assert served.metric("connection-accept-rate", listener=HTTP_LISTENER) == 2.0
        assert served.metric("broker-connection-accept-rate") == 2.0
        assert served.metric("ip-connection-accept-throttle-time", listener=HTTP_LISTENER) == 500

        clock.advance(500)  # at start + throttle it is not closed yet: strictly later (CONN-3)
        await eventually(lambda: clock.pending == [501])
        assert served.site.waiting == 1
        clock.advance(1)
        assert await throttled.closed_by_server()
        await eventually(lambda: served.site.waiting == 0)
        assert served.connections.get(IP) == 2
        assert await first.get() == (200, IP)


async def test_CONN_3_stopping_the_site_drops_connections_still_waiting_and_frees_every_count() -> None:
    clock = SteppedClock()
    async with serving({"quota.window.num": 2, "max.connection.creation.rate": 1}, clock) as served:
        served_client = await Client.connect(served)
        assert await served_client.get() == (200, IP)
        waiting = await Client.connect(served)
        await eventually(lambda: len(clock.pending) == 1)

        await served.runner.cleanup()
        assert await waiting.closed_by_server()
        assert await served_client.closed_by_server()
        await eventually(lambda: served.connections.total == 0)
        assert served.site.waiting == 0


# -- TLS: the handshake only after admission ---------------------------------------------------


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: the server's context and a client trusting it."""
    cert, key = self_signed(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_CONN_3_tls_starts_after_admission_and_a_refused_connection_gets_no_handshake(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_context, client_context = tls
    async with serving({"max.connections.per.ip": 1}, ssl_context=server_context) as served:
        admitted = await Client.connect(served, client_context)
        assert await admitted.get() == (200, IP)  # handlers still see the peer through the TLS transport
        with pytest.raises((ConnectionResetError, ssl.SSLError)):  # closed before any ServerHello
            await Client.connect(served, client_context)
        assert served.connections.get(IP) == 1
        admitted.reset()
        await eventually(lambda: served.connections.total == 0)

        # a client that never completes the handshake gives its count back when it goes
        plain = await Client.connect(served)
        await eventually(lambda: served.connections.get(IP) == 1)
        plain.send(b"not a TLS record\r\n\r\n")
        assert await plain.closed_by_server()
        await eventually(lambda: served.connections.total == 0)


async def test_F9_a_tls_handshake_that_never_comes_is_closed_after_the_gates_wait_limit(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """asyncio would wait 60 s for a ClientHello; the gate's ``max_wait_ms`` bounds the handshake too."""
    server_context, _ = tls
    limits = GateLimits(max_waiting=10, max_wait_ms=200)
    async with serving({}, ssl_context=server_context, gate_limits=limits) as served:
        silent = await Client.connect(served)  # admitted, then sends nothing at all
        await eventually(lambda: served.connections.get(IP) == 1)
        assert await silent.closed_by_server()
        await eventually(lambda: served.connections.total == 0)
        assert served.site.gate.sockets == 0  # its descriptor given back too


# -- what grpcio enforces ----------------------------------------------------------------------


def test_grpc_connection_options_map_to_grpc_channel_arguments() -> None:
    assert grpc_connection_options() == []
    assert grpc_connection_options(
        max_connections=100,
        max_concurrent_streams=8,
        max_connection_idle_ms=300_000,
        max_connection_age_ms=3_600_000,
        max_connection_age_grace_ms=30_000,
    ) == [
        ("grpc.max_allowed_incoming_connections", 100),
        ("grpc.max_concurrent_streams", 8),
        ("grpc.max_connection_idle_ms", 300_000),
        ("grpc.max_connection_age_ms", 3_600_000),
        ("grpc.max_connection_age_grace_ms", 30_000),
    ]
    with pytest.raises(ValueError, match=r"grpc\.max_concurrent_streams"):
        grpc_connection_options(max_concurrent_streams=0)


async def _echo_peer(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return context.peer().encode()


async def test_grpc_max_allowed_incoming_connections_closes_the_connection_over_the_limit() -> None:
    server = grpc.aio.server(options=grpc_connection_options(max_connections=1))
    handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(_echo_peer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Echo", {"Peer": handler}),))
    port = server.add_insecure_port(f"{IP}:0")
    await server.start()
    own_connection = [("grpc.use_local_subchannel_pool", 1)]  # no subchannel sharing between channels
    first = grpc.aio.insecure_channel(f"{IP}:{port}", options=own_connection)
    second = grpc.aio.insecure_channel(f"{IP}:{port}", options=own_connection)
    ask_first: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = first.unary_unary("/t.Echo/Peer")
    ask_second: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = second.unary_unary("/t.Echo/Peer")
    try:
        peer = await ask_first(b"", timeout=10)
        assert peer.startswith(b"ipv4:127.0.0.1:")  # all a handler learns about its connection
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ask_second(b"", timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await first.close()
        await second.close()
        await server.stop(None)


# -- F9: sockets waiting at the gate are bounded and timed ---------------------------------------


async def test_F9_sockets_waiting_for_a_slot_are_bounded_and_the_extra_one_is_closed_at_once() -> None:
    async with serving({}, max_connections=1, gate_limits=GateLimits(max_waiting=2)) as served:
        admitted = await Client.connect(served)
        assert await admitted.get() == (200, IP)
        waiting = [await Client.connect(served), await Client.connect(served)]
        await eventually(lambda: served.site.waiting == 2)  # parked, unread, until a slot frees

        extra = await Client.connect(served)
        assert await extra.closed_by_server()  # no third socket parked
        assert served.site.waiting == 2
        assert served.connections.listener_count(HTTP_LISTENER) == 1

        admitted.close()  # a slot frees: the first waiting socket is served
        first = waiting[0]
        assert await first.get() == (200, IP)
        assert served.site.waiting == 1


async def test_F9_a_listener_holds_at_most_its_share_of_sockets_admitted_or_waiting() -> None:
    """``max_sockets`` (its share of the open-file limit) bounds the sockets a listener holds whatever
    the quotas allow: one over it is closed at once, and a closed one makes room."""
    limits = GateLimits(max_sockets=3)
    async with serving({}, max_connections=2, gate_limits=limits) as served:
        admitted = [await Client.connect(served), await Client.connect(served)]
        for client in admitted:
            assert await client.get() == (200, IP)
        waiting = await Client.connect(served)
        await eventually(lambda: served.site.waiting == 1)
        assert served.site.gate.sockets == 3

        extra = await Client.connect(served)
        assert await extra.closed_by_server()  # neither admitted nor parked
        assert served.site.gate.sockets == 3
        assert served.connections.listener_count(HTTP_LISTENER) == 2

        admitted[0].close()  # a socket and a slot free: the waiting one is served, a new one parks
        assert await waiting.get() == (200, IP)
        again = await Client.connect(served)
        await eventually(lambda: served.site.waiting == 1)
        assert served.site.gate.sockets == 3
        waiting.reset()  # an admitted socket that goes gives its descriptor and slot back
        assert await again.get() == (200, IP)
        await eventually(lambda: served.site.gate.sockets == 2)


async def test_F9_a_socket_not_admitted_within_the_wait_timeout_is_closed_without_a_count() -> None:
    limits = GateLimits(max_wait_ms=200)
    async with serving({}, max_connections=1, gate_limits=limits) as served:
        admitted = await Client.connect(served)
        assert await admitted.get() == (200, IP)
        parked = await Client.connect(served)
        await eventually(lambda: served.site.waiting == 1)

        assert await parked.closed_by_server()  # after the wait timeout; the slot never freed
        await eventually(lambda: served.site.waiting == 0)
        assert served.connections.get(IP) == 1  # only the admitted one was ever counted
        assert await admitted.get() == (200, IP)


# -- F9: HTTP header, body and idle timeouts ---------------------------------------------------


async def test_F9_a_slowloris_header_is_closed_after_the_header_timeout_and_its_count_freed() -> None:
    timeouts = HttpTimeouts(header_ms=200, body_ms=60_000, idle_ms=60_000)
    async with serving({}, timeouts=timeouts) as served:
        served_before = await Client.connect(served)
        assert await served_before.get() == (200, IP)  # then idle: no header timer runs for it
        slow = await Client.connect(served)
        slow.send(b"GET / HTTP/1.1\r\nHost: sink\r\nX-Slow: ")  # and never the end of the headers
        await eventually(lambda: served.connections.get(IP) == 2)

        assert await slow.closed_by_server()
        await eventually(lambda: served.connections.get(IP) == 1)  # its socket and count released
        assert await served_before.get() == (200, IP)  # idle longer than the header timeout, still served


async def test_F9_a_slowloris_body_is_closed_after_the_body_timeout_and_its_count_freed() -> None:
    timeouts = HttpTimeouts(header_ms=60_000, body_ms=200, idle_ms=60_000)
    async with serving({}, timeouts=timeouts) as served:
        whole = await Client.connect(served)
        whole.send(b"POST /size HTTP/1.1\r\nHost: sink\r\nContent-Length: 5\r\n\r\nhello")
        assert await whole.response() == (200, "5")
        slow = await Client.connect(served)
        slow.send(b"POST /size HTTP/1.1\r\nHost: sink\r\nContent-Length: 100000\r\n\r\n" + bytes(10))

        assert await slow.closed_by_server()
        await eventually(lambda: served.connections.get(IP) == 1)
        assert await whole.get() == (200, IP)  # a request read in full is not timed while answered


async def test_F9_every_request_of_a_keep_alive_connection_gets_its_own_header_time() -> None:
    timeouts = HttpTimeouts(header_ms=200, body_ms=60_000, idle_ms=60_000)
    async with serving({}, timeouts=timeouts) as served:
        client = await Client.connect(served)
        assert await client.get() == (200, IP)
        witness = await Client.connect(served)
        witness.send(b"GET / HTTP/1.1\r\n")
        assert await witness.closed_by_server()  # a header time has passed since the first answer
        assert await client.get() == (200, IP)  # the second request starts its own header time
        client.send(b"GET / HTTP/1.1\r\nHost: sink\r\n")  # a third one stalls in its header
        assert await client.closed_by_server()


async def test_F9_a_connection_that_never_sends_a_request_is_closed_after_the_idle_timeout() -> None:
    timeouts = HttpTimeouts(header_ms=60_000, body_ms=60_000, idle_ms=200)
    async with serving({}, timeouts=timeouts) as served:
        silent = await Client.connect(served)
        await eventually(lambda: served.connections.get(IP) == 1)
        assert await silent.closed_by_server()
        await eventually(lambda: served.connections.total == 0)
        answered = await Client.connect(served)
        assert await answered.get() == (200, IP)
        assert await answered.closed_by_server()  # idle after its answer: closed as well


def test_F9_http_timeouts_give_aiohttp_its_keep_alive_timeout_in_seconds() -> None:
    assert HttpTimeouts(idle_ms=1500).runner_options() == {"keepalive_timeout": 1.5}
