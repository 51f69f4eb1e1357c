"""Connection quotas at the transports (docs/rules.md CONN-1..CONN-6): what each server lets the sink see.

This module owns:

- ``ConnectionGate``: every TCP connection a listener accepts goes through
  ``ConnectionQuotas.inc(listener, ip)`` before its protocol (or the TLS handshake) sees it, and
  ``dec`` when it closes, however it closes (CONN-3). ``QuotaGatedSite``, the aiohttp site of the HTTP
  listener, and the Kafka wire listener (``ingest.transports.kafka``) accept through one:

  - accepts are serialised per listener, as Kafka's acceptor thread serialises them: while one
    connection waits for the broker or listener creation rate, or for a free slot, later ones queue
    behind it (accepted by the kernel, not read);
  - over ``max.connections.per.ip`` (or its override) the connection is closed at once, and its count
    taken back (CONN-E1);
  - over the IP's ``connection_creation_rate`` it was already un-recorded by the engine; the socket is
    held open, unread, and closed once the clock is strictly past the throttle (CONN-E3);
  - a client that disconnects while it waits leaves the queue; its creation-rate record stays, as
    Kafka's does (CONN-3 step 1 is never undone);
  - the sockets waiting at the gate are bounded (``GateLimits``): beyond ``max_waiting`` a new one is
    closed at once, and one still waiting for its turn or a slot after ``max_wait_ms`` is closed, so
    a flood of connections over ``max.connections`` costs a bounded number of file descriptors;
  - so are all the sockets the listener holds, waiting or admitted: beyond ``max_sockets``, its share
    of the open-file limit (``ingest.transports.descriptors``), a new one is closed at once, whatever
    the connection quotas would allow, so that no listener's sockets leave another listener or the
    sink's own files without a descriptor.

  With TLS the handshake runs only after the connection was admitted (``loop.start_tls``), as in
  Kafka, so a refused connection costs no handshake; it must end within ``max_wait_ms`` too
  (asyncio's own default is 60 s), or the socket is closed.
- ``HttpTimeouts``: how long an HTTP connection may take to send a request (headers, then body) and
  may stay idle between requests. ``QuotaGatedSite`` wraps each aiohttp connection in a watchdog that
  aborts it (its socket and count released) when a request's headers are not complete within
  ``header_ms`` of its first byte, or its body within ``body_ms`` of the headers; the idle limit is
  aiohttp's ``keepalive_timeout`` (``runner_options``), which closes a connection that has not sent a
  complete request header within ``idle_ms`` of connecting or of its last response. A pipelined
  request's header time counts from its first byte after the previous request was read in full.
- ``register_listener``: a listener's ``listener.name.<l>.max.connections`` and creation rate.
- ``HTTP_LISTENER`` (``"HTTP"``), the listener name of port 4318: the ``listener`` tag of the
  ``connection-accept-rate``, ``connection-accept-throttle-time``, ``ip-connection-accept-throttle-time``
  and ``connection-count`` metrics, and the ``<l>`` of ``listener.name.http.*`` keys.
- ``grpc_connection_options``: the connection limits grpcio *can* enforce, as channel arguments.

What grpcio (``grpc.aio``, 1.85) lets a Python server see and limit about connections:

- no accept or close hook: ``grpc.aio.Server`` has only ports, handlers, ``start``/``stop``; an
  interceptor sees one RPC (``HandlerCallDetails``: method and metadata), and a handler's context
  ``peer()`` (``ipv4:127.0.0.1:54321``), so per-IP counts and creation rates cannot be enforced;
- server channel arguments (checked in ``grpc/impl/channel_arg_names.h`` and against a live server):
  ``grpc.max_allowed_incoming_connections`` (connections per bound port; the one over the limit is
  closed at accept, the client sees UNAVAILABLE), ``grpc.max_concurrent_streams`` (RPCs at once on
  one connection; the client queues the rest), ``grpc.max_connection_idle_ms`` (GOAWAY to an idle
  connection), ``grpc.max_connection_age_ms`` with ``grpc.max_connection_age_grace_ms`` (GOAWAY after
  that age, in-flight RPCs get the grace; clients reconnect, so long-lived connections are spread
  again across replicas);
- ``maximum_concurrent_rpcs`` (a ``grpc.aio.server`` argument, not a channel argument): RPCs in
  flight in the whole server; the one over it fails with RESOURCE_EXHAUSTED;
- pointer-valued arguments (``grpc.resource_quota``, ``grpc.socket_mutator``) cannot be built from
  Python.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from aiohttp import web
from aiohttp.streams import StreamReader
from yarl import URL

from quotas import Clock, ConnectionQuotas, ConnectionThrottledError, TooManyConnectionsError

__all__ = [
    "DEFAULT_GATE_LIMITS",
    "DEFAULT_HTTP_TIMEOUTS",
    "DEFAULT_LISTENER_MAX_CONNECTIONS",
    "HTTP_LISTENER",
    "ConnectionGate",
    "GateLimits",
    "HttpTimeouts",
    "QuotaGatedSite",
    "connection_ip",
    "grpc_connection_options",
    "register_http_listener",
    "register_listener",
]

log = logging.getLogger(__name__)

HTTP_LISTENER: Final = "HTTP"
"""The listener name of the HTTP port in connection-quota metrics and ``listener.name.http.*`` keys."""

INT_MAX: Final = 2147483647
"""Kafka's "no limit" for connection counts and rates, and grpc's for its channel arguments."""
DEFAULT_LISTENER_MAX_CONNECTIONS: Final = 10_000
"""The sink's ``listener.name.<l>.max.connections`` on each of its listeners unless configured (Kafka:
none): ten times the per-IP default, far above a fleet's connections to one replica, and within the
open-file limit the sink raises itself to at start."""


@dataclass(frozen=True, slots=True)
class GateLimits:
    """How many sockets may wait at a listener's gate, and for how long; how many the listener may hold
    at all (see the module docstring)."""

    max_waiting: int = 1_000
    max_wait_ms: int = 10_000
    max_sockets: int = INT_MAX


@dataclass(frozen=True, slots=True)
class HttpTimeouts:
    """How long an HTTP connection may take (see the module docstring)."""

    header_ms: int = 10_000
    body_ms: int = 30_000
    idle_ms: int = 120_000

    def runner_options(self) -> dict[str, Any]:
        """The ``web.AppRunner`` keyword arguments for the limit aiohttp enforces itself."""
        return {"keepalive_timeout": self.idle_ms / 1000}


DEFAULT_GATE_LIMITS: Final = GateLimits()
DEFAULT_HTTP_TIMEOUTS: Final = HttpTimeouts()


def register_listener(
    connections: ConnectionQuotas,
    name: str,
    *,
    max_connections: int = INT_MAX,
    max_connection_creation_rate: int = INT_MAX,
) -> str:
    """Register a listener with its ``listener.name.<l>.max.connections`` and
    ``listener.name.<l>.max.connection.creation.rate`` (2147483647: none); once per process."""
    connections.add_listener(
        name, max_connections=max_connections, max_connection_creation_rate=max_connection_creation_rate
    )
    return name


def register_http_listener(
    connections: ConnectionQuotas,
    *,
    max_connections: int = INT_MAX,
    max_connection_creation_rate: int = INT_MAX,
) -> str:
    """Register the HTTP listener (``HTTP_LISTENER``)."""
    return register_listener(
        connections,
        HTTP_LISTENER,
        max_connections=max_connections,
        max_connection_creation_rate=max_connection_creation_rate,
    )


def connection_ip(peername: Any) -> str | None:
    """The IP a connection counts against: the peer address of the socket, an IPv4-mapped IPv6
    address as its IPv4 address (as a JVM broker sees it); None when there is no IP peer."""
    if not isinstance(peername, tuple) or not peername or not isinstance(peername[0], str):
        return None
    try:
        address = ipaddress.ip_address(peername[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class _GatedConnection(asyncio.Protocol):
    """One accepted connection: held unread until the quotas admit it, then handed to the listener's
    protocol (every later event is forwarded to it); its count and its socket are given back exactly
    once."""

    def __init__(self, site: ConnectionGate) -> None:
        self._site = site
        self._transport: asyncio.Transport | None = None
        self._ip: str | None = None
        self._handler: asyncio.Protocol | None = None
        self._admission: asyncio.Task[None] | None = None
        self._counted = False
        self._holds_socket = False
        self._early: list[bytes] = []

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.pause_reading()
        self._ip = connection_ip(transport.get_extra_info("peername"))
        if self._ip is None:
            self._transport.abort()
            return
        if self._site._sockets >= self._site.limits.max_sockets:
            log.debug(  # not info: a flood of them must not flood the log
                "Closed a connection from %s: the listener holds its %d sockets",
                self._ip,
                self._site._sockets,
            )
            self._transport.abort()
            return
        self._site._sockets += 1
        self._holds_socket = True
        if len(self._site._gated) >= self._site.limits.max_waiting:
            log.debug(  # not info: a flood of them must not flood the log
                "Closed a connection from %s: %d already wait at the gate", self._ip, len(self._site._gated)
            )
            self._transport.abort()
            return
        self._site._gated.add(self)
        self._admission = asyncio.get_running_loop().create_task(
            self._admit(self._transport, self._ip), name=f"admit-{self._ip}"
        )

    def data_received(self, data: bytes) -> None:
        if self._handler is None:
            self._early.append(data)  # TLS: a record right after the handshake, before the hand-off
            return
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._handler is None else self._handler.eof_received()

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._site._gated.discard(self)
        if self._admission is not None and not self._admission.done():
            self._admission.cancel()
        try:
            if self._handler is not None:
                self._handler.connection_lost(exc)
        finally:
            self._release()
            self._give_socket_back()

    # -- admission ----------------------------------------------------------------------------

    def abort(self) -> None:
        """Drop a connection not yet handed to its protocol (the listener is stopping)."""
        if self._admission is not None:
            self._admission.cancel()
        if self._transport is not None:
            self._transport.abort()
        self._release()
        self._give_socket_back()  # during a TLS handshake no connection_lost reaches this protocol

    def _release(self) -> None:
        if self._counted and self._ip is not None:
            self._counted = False
            self._site.quotas.dec(self._site.listener, self._ip)

    def _give_socket_back(self) -> None:
        if self._holds_socket:
            self._holds_socket = False
            self._site._sockets -= 1

    async def _admit(self, transport: asyncio.Transport, ip: str) -> None:
        try:
            await self._gate(transport, ip)
        except Exception:  # never let one connection's surprise reach the loop or keep its count
            log.exception("Admitting a connection from %s failed", ip)
            self._site._gated.discard(self)
            transport.abort()
            self._release()

    async def _gate(self, transport: asyncio.Transport, ip: str) -> None:
        site = self._site
        try:
            async with asyncio.timeout(site.limits.max_wait_ms / 1000), site._acceptor:
                await site.quotas.inc(site.listener, ip)
                self._counted = True
        except TimeoutError:
            log.info("Closed a connection from %s: not admitted within %d ms", ip, site.limits.max_wait_ms)
            site._gated.discard(self)
            transport.abort()
            return
        except TooManyConnectionsError as exc:
            site.quotas.dec(site.listener, ip)  # inc counted it; Kafka closes and takes it back at once
            log.info("Rejected connection from %s: %s", ip, exc)
            site._gated.discard(self)
            transport.close()
            return
        except ConnectionThrottledError as exc:
            log.info("Throttling connection from %s for %d ms", ip, exc.throttle_ms)
            await self._hold(exc)
            site._gated.discard(self)
            transport.close()
            return
        await self._hand_off(transport)

    async def _hold(self, throttled: ConnectionThrottledError) -> None:
        """Keep a throttled socket open, unread, until strictly past its throttle (CONN-3)."""
        clock = self._site.clock
        never = asyncio.Event()  # nothing sets it: a wait on the clock alone
        while not throttled.should_close(now := clock.now_ms()):
            await clock.wait(never, throttled.start_ms + throttled.throttle_ms + 1 - now)

    async def _hand_off(self, transport: asyncio.Transport) -> None:
        site = self._site
        if site.ssl_context is not None:
            try:
                tls = await asyncio.get_running_loop().start_tls(
                    transport,
                    self,
                    site.ssl_context,
                    server_side=True,
                    ssl_handshake_timeout=site.limits.max_wait_ms / 1000,
                )
            except OSError as exc:  # ssl.SSLError, a reset, the handshake timeout
                log.debug("TLS handshake with %s failed: %s", self._ip, exc)
                site._gated.discard(self)
                self._release()  # start_tls closed the socket; the count is ours to give back
                self._give_socket_back()
                return
            if tls is None:  # lost during the handshake (connection_lost released it)
                return
            transport = tls
        site._gated.discard(self)
        handler = site.handler_factory()
        if handler is None:  # stopped during the handshake
            transport.abort()
            return
        self._handler = handler
        handler.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            handler.data_received(data)
        if site.ssl_context is None:
            transport.resume_reading()


class ConnectionGate:
    """Admits the connections of one listener (registered beforehand) through ``ConnectionQuotas``,
    starts TLS once admitted, then hands each to a protocol from ``handler_factory`` (None while the
    listener stops); at most ``limits.max_waiting`` wait, each ``limits.max_wait_ms`` at most, and at
    most ``limits.max_sockets`` are held at all. ``protocol`` is the ``loop.create_server`` factory."""

    def __init__(
        self,
        quotas: ConnectionQuotas,
        clock: Clock,
        listener: str,
        handler_factory: Callable[[], asyncio.Protocol | None],
        ssl_context: ssl.SSLContext | None = None,
        *,
        limits: GateLimits = DEFAULT_GATE_LIMITS,
    ) -> None:
        quotas.listener_count(listener)  # ValueError now, not at the first accept, if unregistered
        self.quotas = quotas
        self.clock = clock
        self.listener = listener
        self.handler_factory = handler_factory
        self.ssl_context = ssl_context
        self.limits = limits
        self._acceptor = asyncio.Lock()
        self._gated: set[_GatedConnection] = set()
        self._sockets = 0

    def protocol(self) -> asyncio.Protocol:
        return _GatedConnection(self)

    @property
    def waiting(self) -> int:
        """Connections accepted but not yet handed on (queued, waiting or throttled)."""
        return len(self._gated)

    @property
    def sockets(self) -> int:
        """Sockets the listener holds, waiting at the gate or handed on, until they close."""
        return self._sockets

    def abort_waiting(self) -> None:
        """Drop every connection still at the gate (the listener is stopping)."""
        for connection in list(self._gated):
            connection.abort()
        self._gated.clear()


class _TimedHttpConnection(asyncio.Protocol):
    """An aiohttp connection under its ``HttpTimeouts``: forwards every event to aiohttp's handler and
    aborts the connection when a request's headers or body take too long (see the module docstring).

    Phases: idle (no request under way), headers (from a request's first byte until aiohttp takes the
    parsed request up), body (until the request's payload ends), read (the handler answers)."""

    _IDLE: Final = 0
    _HEADERS: Final = 1
    _BODY: Final = 2
    _READ: Final = 3

    def __init__(self, handler: web.RequestHandler, site: QuotaGatedSite) -> None:
        self._handler = handler
        self._site = site
        self._transport: asyncio.Transport | None = None
        self._phase = self._IDLE
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._site._timed[self._handler] = self
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if data and self._phase in (self._IDLE, self._READ):
            self._phase = self._HEADERS
            self._arm(self._site.timeouts.header_ms, "headers")
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        self._handler.eof_received()
        return None

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._site._timed.pop(self._handler, None)
        self._handler.connection_lost(exc)

    def request_started(self, payload: StreamReader) -> None:
        """aiohttp took a request up (its headers are parsed): its body is timed until it ends."""
        self._phase = self._BODY
        self._arm(self._site.timeouts.body_ms, "body")
        payload.on_eof(self._body_read)  # at once when there is no body or it has arrived already

    @property
    def receiving(self) -> bool:
        """A request's headers or body are arriving (not yet read in full)."""
        return self._phase in (self._HEADERS, self._BODY)

    def _body_read(self) -> None:
        if self._phase == self._BODY:
            self._phase = self._READ
            self._disarm()

    def _arm(self, timeout_ms: int, what: str) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(timeout_ms / 1000, self._expired, what, timeout_ms)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str, timeout_ms: int) -> None:
        self._deadline = None
        self.abort(f"request {what} not complete within {timeout_ms} ms")

    def abort(self, reason: str) -> None:
        """Close the socket now (connection_lost gives the count back), with a log line saying why."""
        if self._transport is not None:
            peer = self._transport.get_extra_info("peername")
            log.info("Closing HTTP connection from %s: %s", peer, reason)
            self._transport.abort()


class QuotaGatedSite(web.BaseSite):
    """A TCP site (like ``web.TCPSite``) that admits each connection through a ``ConnectionGate`` on
    ``listener`` before aiohttp serves it, and then serves it under ``timeouts`` (whose ``idle_ms``
    the runner must have been given: ``HttpTimeouts.runner_options``)."""

    __slots__ = ("_bound_port", "_gate", "_host", "_port", "_timed", "timeouts")

    def __init__(
        self,
        runner: web.BaseRunner,
        quotas: ConnectionQuotas,
        clock: Clock,
        host: str | None,
        port: int,
        *,
        listener: str = HTTP_LISTENER,
        ssl_context: ssl.SSLContext | None = None,
        backlog: int = 128,
        timeouts: HttpTimeouts = DEFAULT_HTTP_TIMEOUTS,
        gate_limits: GateLimits = DEFAULT_GATE_LIMITS,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._gate = ConnectionGate(quotas, clock, listener, self._handler, ssl_context, limits=gate_limits)
        self._host = host
        self._port = port
        self._bound_port: int | None = None
        self.timeouts = timeouts
        self._timed: dict[web.RequestHandler, _TimedHttpConnection] = {}

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return str(URL.build(scheme=scheme, host=self._host or "0.0.0.0", port=self.port))

    @property
    def port(self) -> int:
        """The bound port once started (the requested one before)."""
        return self._port if self._bound_port is None else self._bound_port

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self._ssl_context

    @property
    def gate(self) -> ConnectionGate:
        return self._gate

    @property
    def waiting(self) -> int:
        """Connections accepted but not yet handed to aiohttp (queued, waiting or throttled)."""
        return self._gate.waiting

    def _handler(self) -> asyncio.Protocol | None:
        server = self._runner.server
        if server is None:
            return None  # the runner is cleaning up
        return _TimedHttpConnection(server(), self)

    def _request_factory(self, make: Callable[..., web.BaseRequest]) -> Callable[..., web.BaseRequest]:
        """aiohttp's request factory, telling the connection's watchdog that a request was taken up."""

        def request(
            message: Any, payload: StreamReader, protocol: web.RequestHandler, *args: Any
        ) -> web.BaseRequest:
            timed = self._timed.get(protocol)
            if timed is not None:
                timed.request_started(payload)
            return make(message, payload, protocol, *args)

        return request

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # BaseSite.start checks that the runner was set up
        server.request_factory = self._request_factory(server.request_factory)
        loop = asyncio.get_running_loop()
        # no ssl= here: TLS starts only once the quotas admitted the connection
        self._server = await loop.create_server(
            self._gate.protocol, self._host, self._port, backlog=self._backlog
        )
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port

    async def stop(self) -> None:
        """Stop listening and drop connections still at the gate; aiohttp closes the ones it
        serves (``AppRunner.cleanup``), which gives their counts back."""
        await super().stop()
        self._gate.abort_waiting()

    def abort_receiving(self) -> int:
        """Abort every connection whose request is still arriving (shutdown, once the grace period is
        over: a request not read by then is never handled, and a stalled upload must not hold the
        shutdown up); how many."""
        receiving = [timed for timed in self._timed.values() if timed.receiving]
        for timed in receiving:
            timed.abort("the sink is shutting down")
        return len(receiving)


def grpc_connection_options(
    *,
    max_connections: int | None = None,
    max_concurrent_streams: int | None = None,
    max_connection_idle_ms: int | None = None,
    max_connection_age_ms: int | None = None,
    max_connection_age_grace_ms: int | None = None,
) -> list[tuple[str, int]]:
    """The connection limits grpcio enforces, as ``grpc.aio.server(options=...)`` channel arguments
    (None leaves grpc's default: unlimited).

    | argument | channel argument | what the client sees |
    |---|---|---|
    | ``max_connections`` | ``grpc.max_allowed_incoming_connections`` | one over it is closed (UNAVAILABLE) |
    | ``max_concurrent_streams`` | ``grpc.max_concurrent_streams`` | RPCs over it on one connection wait |
    | ``max_connection_idle_ms`` | ``grpc.max_connection_idle_ms`` | GOAWAY after that long without RPCs |
    | ``max_connection_age_ms`` | ``grpc.max_connection_age_ms`` | GOAWAY after that age; it reconnects |
    | ``max_connection_age_grace_ms`` | ``grpc.max_connection_age_grace_ms`` | RPCs in flight get that long |
    """
    values = {
        "grpc.max_allowed_incoming_connections": max_connections,
        "grpc.max_concurrent_streams": max_concurrent_streams,
        "grpc.max_connection_idle_ms": max_connection_idle_ms,
        "grpc.max_connection_age_ms": max_connection_age_ms,
        "grpc.max_connection_age_grace_ms": max_connection_age_grace_ms,
    }
    options = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= INT_MAX:
            raise ValueError(f"{name} must be an integer between 1 and {INT_MAX}, got {value!r}")
        options.append((name, value))
    return options
