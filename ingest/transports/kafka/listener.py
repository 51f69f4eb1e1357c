"""The Kafka wire listener: an asyncio TCP server (optionally TLS) that reads Kafka request frames and
answers them with ``KafkaApis``, one connection at a time as a broker's network layer does.

- Accepting: every connection passes the connection quotas on the ``KAFKA`` listener
  (``ingest.transports.connections.ConnectionGate``: counts per listener and IP, creation
  rates, per-IP rate with un-record on violation, throttled accepts wait; CONN-3), and TLS starts
  only once it is admitted.
- Reading: a connection's requests are read and answered one after another (a broker mutes a channel
  while its request is handled). A request larger than ``socket_request_max_bytes`` (Kafka's
  ``socket.request.max.bytes``), one that does not parse, or one for an API or version the listener
  does not implement closes the connection with a log line; ApiVersions of an unsupported version is
  answered (``apis``). Only PushTelemetry needs that size: the listener reads a request's api key
  first and closes the connection, before reading the rest, when any other request is larger than
  ``non_push_request_max_bytes``. So a connection holds at most one request of at most that size in
  memory (plus the stream's 128 KiB read-ahead) before it is authorized or admitted. A request's size
  is held in the listeners' ``RequestMemory`` from its frame's size until it is answered; one that
  does not fit is not read (the connection is muted, as a broker's under memory pressure) until it
  does; the wait counts in the request's ``request_read_timeout_ms`` (from its first byte), after
  which the connection is closed.
- Throttling: a quota throttle goes out in the response at once, and the connection is muted (no
  further reads) until the quota engine's reaper ends the throttle (QUO-14): the connection is the
  ``ThrottleCallback``. A client that disconnects while muted is closed (and its instances evicted) at
  once, not when its throttle ends.
- Slow and idle clients: a connection with no request started for ``connections_max_idle_ms``
  (Kafka's ``connections.max.idle.ms``) is closed; so is one whose request does not arrive in full
  within ``request_read_timeout_ms`` of its first byte (a slow-loris client), and one that does not
  read its answers for ``connections_max_idle_ms``.
- Identity: the principal is that of a verified client certificate (mTLS), written from its DER as on
  every other transport (``ingest.security.principals``), or ``User:ANONYMOUS`` (SASL is not implemented).
  With ``security.require_authentication`` a connection without a certificate is closed before its
  first request is read, with a log line saying why (the pipeline's ``Authenticator`` decides;
  the configuration refuses that setting on a Kafka port without mTLS). Source address and port come
  from the socket; client software name and version from ApiVersions v3 (``unknown`` until then, as
  in Kafka).
- Closing: instances created on the connection are evicted (PD-8), and its connection count is given
  back. ``stop`` closes idle connections at once and lets a request being handled finish (within the
  grace period) before its connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Final

from ingest.security.authentication import AuthenticationError
from ingest.security.identity import java_host_address
from ingest.security.principals import certificate_principal
from ingest.security.sasl import sasl_principal
from ingest.transports.connections import (
    DEFAULT_GATE_LIMITS,
    DEFAULT_LISTENER_MAX_CONNECTIONS,
    ConnectionGate,
    GateLimits,
    connection_ip,
    register_listener,
)
from ingest.transports.kafka.apis import Answer, KafkaApis
from ingest.transports.kafka.protocol import API_KEY, FRAME_SIZE, PUSH_TELEMETRY, FrameError
from ingest.transports.kafka.sasl import KafkaSasl, SaslSettings
from ingest.transports.request_memory import RequestMemory
from quotas import Clock, ConnectionQuotas
from subscriptions import ClientContext, ClientMetricsManager

__all__ = ["KAFKA_LISTENER", "KafkaListener", "ListenerLimits"]

log = logging.getLogger(__name__)

KAFKA_LISTENER: Final = "KAFKA"
"""The listener name of the Kafka port in connection-quota metrics and ``listener.name.kafka.*``."""
_UNKNOWN: Final = "unknown"


class ListenerLimits:
    """How much a connection may send and how long it may take."""

    def __init__(
        self,
        *,
        socket_request_max_bytes: int = 8 * 1024 * 1024,
        non_push_request_max_bytes: int = 1024 * 1024,
        connections_max_idle_ms: int = 600_000,
        request_read_timeout_ms: int = 30_000,
    ) -> None:
        self.socket_request_max_bytes = socket_request_max_bytes
        self.non_push_request_max_bytes = non_push_request_max_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.request_read_timeout_ms = request_read_timeout_ms

    def request_max_bytes(self, api_key: int | None) -> int:
        """The largest request of this API (None: not known yet) a connection may send."""
        if api_key == PUSH_TELEMETRY:
            return self.socket_request_max_bytes
        return min(self.non_push_request_max_bytes, self.socket_request_max_bytes)


class _Connection:
    """One client connection: its identity, its mute, and its read-answer loop."""

    __slots__ = (
        "_contexts",
        "_gone",
        "_held",
        "_ip",
        "_listener",
        "_memory_wait",
        "_reader",
        "_software",
        "_throttles",
        "_unmuted",
        "_writer",
        "busy",
        "connection_id",
        "local_address",
        "peer",
        "principal",
        "sasl",
    )

    def __init__(
        self,
        listener: KafkaListener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gone: asyncio.Event,
        index: int,
    ) -> None:
        self._listener = listener
        self._gone = gone
        self._reader = reader
        self._writer = writer
        self._unmuted = asyncio.Event()
        self._unmuted.set()
        self._throttles = 0
        self._software = (_UNKNOWN, _UNKNOWN)
        self._contexts: dict[str | None, ClientContext] = {}
        self.busy = False
        """True from a request's first byte to its answer being written."""
        peer = writer.get_extra_info("peername")
        local = writer.get_extra_info("sockname")
        self.peer: tuple[str | None, int | None] = (
            java_host_address(connection_ip(peer) or ""),
            int(peer[1]) if isinstance(peer, tuple) and len(peer) > 1 else None,
        )
        self.local_address: tuple[str, int] = (str(local[0]), int(local[1]))
        self._ip = connection_ip(peer) or ""
        self._held = 0
        self._memory_wait: str | None = None
        self.connection_id = f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{index}"
        tls = writer.get_extra_info("ssl_object")
        self.principal = certificate_principal(tls.getpeercert(binary_form=True) if tls else None)
        self.sasl = (
            None
            if listener.sasl is None
            else KafkaSasl(listener.sasl, self._api_versions, listener.clock.now_ms)
        )

    async def _api_versions(self, frame: bytes) -> bytes:
        """ApiVersions while authenticating: answered by the authenticator, outside every quota."""
        return (await self._listener.apis.respond(frame, self, quotas=False)).frame

    # -- KafkaConnection ------------------------------------------------------------------------

    def client_context(self, client_id: str | None) -> ClientContext:
        context = self._contexts.get(client_id)
        if context is None:
            if len(self._contexts) > 16:  # a client switching ids at will must not grow this
                self._contexts.clear()
            name, version = self._software
            context = self._contexts[client_id] = ClientContext(
                client_id=client_id,
                client_software_name=name,
                client_software_version=version,
                client_source_address=self.peer[0],
                client_source_port=self.peer[1],
                principal=self.principal,
                connection_id=self.connection_id,
                listener_name=KAFKA_LISTENER,
            )
        return context

    def set_client_software(self, name: str, version: str) -> None:
        self._software = (name, version)
        self._contexts.clear()

    def start_throttling(self) -> None:
        """Muted until every throttle started ends: a response throttled by two quotas (request time
        and mutations) stays muted for the longer one, as a broker mutes it once for the larger (KF3-R6)."""
        self._throttles += 1
        self._unmuted.clear()

    def end_throttling(self) -> None:
        self._throttles = max(0, self._throttles - 1)
        if self._throttles == 0:
            self._unmuted.set()

    # -- serving ------------------------------------------------------------------------------

    def _close_because(self, reason: str) -> None:
        log.info("Closing Kafka connection %s (%s): %s", self.connection_id, self.principal, reason)

    async def serve(self) -> None:
        limits = self._listener.limits
        idle_s = limits.connections_max_idle_ms / 1000
        if self.sasl is None:  # with SASL, every connection authenticates before its first API request
            try:
                self._listener.apis.pipeline.authenticator.connection_principal(self.principal)
            except AuthenticationError as exc:
                self._close_because(str(exc))
                return
        while not self._listener.stopping:
            if not self._unmuted.is_set() and not await self._unmuted_unless_gone():
                self._close_because("the client went away while muted")
                return
            frame = await self._read_frame()
            if frame is None:
                return
            try:
                response, close = await self._respond(frame)
            except FrameError as exc:
                self._close_because(str(exc))
                return
            # every failed authentication closes after the delay, answered or not (KF3-S5, KF3-S7)
            if close and not await self._failed_authentication_delay():
                self._close_because("the client went away during the failed-authentication delay")
                return
            if isinstance(response, Answer):
                response.write_to(self._writer)
            elif response is not None:
                self._writer.write(response)
            self.give_back()  # the request is answered: its bytes are no longer held
            try:
                async with asyncio.timeout(idle_s):
                    await self._writer.drain()
            except TimeoutError:
                self._close_because(f"answers not read for {limits.connections_max_idle_ms} ms")
                return
            if close:
                self._close_because("SASL authentication failed or a request came out of its order")
                return
            self.busy = False

    async def _read_frame(self) -> bytes | None:
        """The next request frame; None when the connection is to be closed (said why in the log)."""
        limits = self._listener.limits
        reader = self._reader
        try:
            async with asyncio.timeout(limits.connections_max_idle_ms / 1000):
                first = await reader.readexactly(1)
            self.busy = True
        except asyncio.IncompleteReadError:
            return None  # the client closed the connection between requests
        except TimeoutError:
            self._close_because(f"idle for {limits.connections_max_idle_ms} ms")
            return None
        try:
            async with asyncio.timeout(limits.request_read_timeout_ms / 1000):
                (size,) = FRAME_SIZE.unpack(first + await reader.readexactly(3))
                if not 0 < size <= limits.socket_request_max_bytes:
                    self._close_because(
                        f"a request of {size} bytes (socket.request.max.bytes is "
                        f"{limits.socket_request_max_bytes})"
                    )
                    return None
                head = await reader.readexactly(min(size, API_KEY.size))
                api_key = API_KEY.unpack(head)[0] if len(head) == API_KEY.size else None
                if size > limits.request_max_bytes(api_key):
                    self._close_because(
                        f"a request of {size} bytes for api key {api_key} (at most "
                        f"{limits.request_max_bytes(api_key)} for it)"
                    )
                    return None
                await self._hold(size)
                return head + await reader.readexactly(size - len(head))
        except asyncio.IncompleteReadError as exc:
            self._close_because(f"closed by the client in the middle of a request ({len(exc.partial)} bytes)")
        except TimeoutError:
            if self._memory_wait is not None:
                waited = limits.request_read_timeout_ms
                self._close_because(f"no memory for its request within {waited} ms: {self._memory_wait}")
            else:
                self._close_because(f"a request not complete within {limits.request_read_timeout_ms} ms")
        self.give_back()
        return None

    async def _hold(self, size: int) -> None:
        """Hold a request's ``size`` in the listeners' ``RequestMemory`` before reading its body:
        unread, as a broker mutes a channel under memory pressure, until it fits."""
        memory = self._listener.request_memory
        if not memory.fits(self._ip):
            self._memory_wait = memory.refusal(self._ip)
        await memory.take(self._ip, size)
        self._memory_wait = None
        self._held = size

    def give_back(self) -> None:
        """Give back the bytes the request being read or answered holds (if any)."""
        if self._held:
            self._listener.request_memory.give_back(self._ip, self._held)
            self._held = 0

    async def _respond(self, frame: bytes) -> tuple[Answer | bytes | None, bool]:
        """The answer to a frame (the authenticator's as bytes), and whether to close the connection
        after it."""
        sasl = self.sasl
        if sasl is None or not sasl.intercepts(frame):
            return await self._listener.apis.respond(frame, self), False
        was = sasl.username
        answer, close = await sasl.respond(frame)
        if sasl.authenticated and sasl.username != was:
            self.principal = sasl_principal(sasl.username or "")
            self._contexts.clear()
        return answer, close

    async def _failed_authentication_delay(self) -> bool:
        """Hold the answer to a failed authentication for ``connection.failed.authentication.delay.ms``
        (Kafka's Selector mutes the channel that long before it sends the answer and closes); False
        if the client went away meanwhile."""
        settings = self._listener.sasl
        delay_ms = 0 if settings is None else settings.failed_authentication_delay_ms
        if delay_ms <= 0:
            return True
        return not await self._listener.clock.wait(self._gone, delay_ms)

    async def _unmuted_unless_gone(self) -> bool:
        """Wait for the throttle to end (True), or for the client to close or reset (False)."""
        waits = {asyncio.ensure_future(self._unmuted.wait()), asyncio.ensure_future(self._gone.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self._unmuted.is_set()


class _StreamProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, telling the connection's loop when the client has gone (end of
    stream or connection lost) even while the loop is not reading."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter, asyncio.Event], Awaitable[None]],
    ) -> None:
        self.gone = asyncio.Event()
        super().__init__(reader, lambda r, w: serve(r, w, self.gone))

    def eof_received(self) -> bool:
        self.gone.set()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone.set()
        super().connection_lost(exc)


class KafkaListener:
    """The listener: ``start`` binds (port 0 picks one: ``port``), ``stop`` closes everything."""

    def __init__(
        self,
        apis: KafkaApis,
        manager: ClientMetricsManager,
        connections: ConnectionQuotas,
        clock: Clock,
        *,
        limits: ListenerLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = DEFAULT_LISTENER_MAX_CONNECTIONS,
        max_connection_creation_rate: int = 2147483647,
        gate_limits: GateLimits = DEFAULT_GATE_LIMITS,
        sasl: SaslSettings | None = None,
        request_memory: RequestMemory | None = None,
    ) -> None:
        self.apis = apis
        self.request_memory = request_memory or RequestMemory()
        """The request bytes held at once (shared with the other listeners; by default its own)."""
        self.sasl = sasl
        """SASL_PLAINTEXT / SASL_SSL when set (``sasl``); else every connection is what its TLS says."""
        self.clock = clock
        self.manager = manager
        self.limits = limits or ListenerLimits()
        register_listener(
            connections,
            KAFKA_LISTENER,
            max_connections=max_connections,
            max_connection_creation_rate=max_connection_creation_rate,
        )
        self.gate = ConnectionGate(
            connections, clock, KAFKA_LISTENER, self._protocol, ssl_context, limits=gate_limits
        )
        self.port = 0
        self._server: asyncio.Server | None = None
        self.stopping = False
        self._index = itertools.count()
        self._serving: dict[asyncio.Task[None], _Connection] = {}

    async def start(self, host: str | None, port: int, *, backlog: int = 128) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.gate.protocol, host, port, backlog=backlog)
        self.port = self._server.sockets[0].getsockname()[1] if self._server.sockets else port

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return len(self._serving)

    def _protocol(self) -> asyncio.Protocol | None:
        if self.stopping:
            return None
        return _StreamProtocol(asyncio.StreamReader(limit=2**16), self._serve)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gone: asyncio.Event
    ) -> None:
        task: asyncio.Task[None] = asyncio.current_task()  # type: ignore[assignment]
        connection = _Connection(self, reader, writer, gone, next(self._index))
        self._serving[task] = connection
        try:
            await connection.serve()
        except (ConnectionError, OSError) as exc:
            log.debug("Kafka connection %s lost: %r", connection.connection_id, exc)
        except asyncio.CancelledError:
            pass  # the listener is stopping
        except Exception:  # one connection's surprise never reaches the listener
            log.exception("Kafka connection %s failed; closing it", connection.connection_id)
        finally:
            connection.give_back()
            del self._serving[task]
            evicted = self.manager.connection_closed(connection.connection_id)
            if evicted:
                log.debug("Evicted %d client instances of %s", evicted, connection.connection_id)
            writer.close()

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop accepting; close idle connections now, and the others once their request is answered
        or ``grace_s`` has passed."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        self.gate.abort_waiting()
        for task, connection in list(self._serving.items()):
            if not connection.busy:
                task.cancel()
        if self._serving:
            await asyncio.wait(list(self._serving), timeout=grace_s)
        for task in list(self._serving):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
