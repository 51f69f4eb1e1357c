"""The transports the clients use: ``GrpcTransport`` (the ``ClientTelemetry`` service),
``HttpTransport`` (the KIP-714 JSON endpoints) and ``OtlpGrpcTransport`` (``MetricsService/Export``),
each plaintext or TLS with the ``Credentials`` given.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import grpc
import grpc.aio
import httpx
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from ingest.proto import client_telemetry_pb2 as pb
from ingest.proto import client_telemetry_pb2_grpc as pb_grpc
from ingest.wire import (
    AUTHORIZATION_HEADER,
    CLIENT_ID_HEADER,
    GET_PATH,
    HEALTH_PATH,
    INSTANCE_ID_HEADER,
    METRICS_SERVICE,
    PUSH_PATH,
    RETRY_INFO_KEY,
    SOFTWARE_NAME_HEADER,
    SOFTWARE_VERSION_HEADER,
    STATUS_DETAILS_KEY,
    parse_instance_id,
)
from loadgen.clients import OtlpAnswer, TargetUnreachableError, TransportError
from loadgen.payloads import SOFTWARE_NAME, SOFTWARE_VERSION, ClientIdentity
from subscriptions import (
    CompressionType,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)


def _headers(client: ClientIdentity) -> tuple[tuple[str, str], ...]:
    return (
        (CLIENT_ID_HEADER, client.client_id),
        (SOFTWARE_NAME_HEADER, SOFTWARE_NAME),
        (SOFTWARE_VERSION_HEADER, SOFTWARE_VERSION),
    )


_CHANNEL_OPTIONS: Final = (("grpc.use_local_subchannel_pool", 1),)
"""Each channel its own connection, as each Kafka client has its own (gRPC shares them otherwise)."""


@dataclass(frozen=True)
class Credentials:
    """How the simulated clients reach a secured sink: TLS trusting ``tls_ca_file`` (with a client
    certificate for mTLS), and a bearer token. All off: plaintext, anonymous."""

    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    token: str | None = None

    @property
    def tls(self) -> bool:
        return self.tls_ca_file is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Headers (gRPC metadata) every request carries."""
        return ((AUTHORIZATION_HEADER, f"Bearer {self.token}"),) if self.token else ()

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        if not self.tls:
            return grpc.aio.insecure_channel(address, options=options)
        return grpc.aio.secure_channel(address, self._grpc_credentials(), options=options)

    def _grpc_credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as file:
                return file.read()

        return grpc.ssl_channel_credentials(
            read(self.tls_ca_file), read(self.tls_key_file), read(self.tls_cert_file)
        )

    def http_verify(self) -> ssl.SSLContext | bool:
        if not self.tls:
            return True
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context


class _GrpcChannels:
    """One gRPC channel (so one connection) per simulated client."""

    def __init__(self, address: str, timeout_s: float, credentials: Credentials = Credentials()) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.credentials = credentials
        self._auth = credentials.metadata()
        self._channels: dict[int, grpc.aio.Channel] = {}

    def channel(self, index: int) -> grpc.aio.Channel:
        channel = self._channels.get(index)
        if channel is None:
            channel = self.credentials.channel(self.address, options=_CHANNEL_OPTIONS)
            self._channels[index] = channel
        return channel

    async def check(self, connect_timeout_s: float) -> None:
        channel = self.credentials.channel(self.address)
        try:
            await asyncio.wait_for(channel.channel_ready(), connect_timeout_s)
        except TimeoutError:
            raise TargetUnreachableError(
                f"cannot reach the gRPC target {self.address} within {connect_timeout_s:g} s"
            ) from None
        finally:
            await channel.close()

    async def close(self) -> None:
        await asyncio.gather(*(channel.close() for channel in self._channels.values()))
        self._channels.clear()


class GrpcTransport(_GrpcChannels):
    """The sink's ``ClientTelemetry`` gRPC service (``ingest/proto/client_telemetry.proto``)."""

    def __init__(self, address: str, timeout_s: float, credentials: Credentials = Credentials()) -> None:
        super().__init__(address, timeout_s, credentials)
        self._stubs: dict[int, Any] = {}

    def _stub(self, index: int) -> Any:
        stub = self._stubs.get(index)
        if stub is None:
            stub = pb_grpc.ClientTelemetryStub(self.channel(index))  # type: ignore[no-untyped-call]
            self._stubs[index] = stub
        return stub

    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        stub = self._stub(client.number)
        request = pb.GetTelemetrySubscriptionsRequest(client_instance_id=instance_id.bytes)
        try:
            r = await stub.GetTelemetrySubscriptions(
                request, metadata=(*_headers(client), *self._auth), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=r.throttle_time_ms,
            error_code=r.error_code,
            client_instance_id=uuid.UUID(bytes=r.client_instance_id)
            if len(r.client_instance_id) == 16
            else uuid.UUID(int=0),
            subscription_id=r.subscription_id,
            accepted_compression_types=tuple(r.accepted_compression_types),
            push_interval_ms=r.push_interval_ms,
            telemetry_max_bytes=r.telemetry_max_bytes,
            delta_temporality=r.delta_temporality,
            requested_metrics=tuple(r.requested_metrics),
        )

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        stub = self._stub(client.number)
        message = pb.PushTelemetryRequest(
            client_instance_id=request.client_instance_id.bytes if request.client_instance_id else b"",
            subscription_id=request.subscription_id,
            terminating=request.terminating,
            compression_type=request.compression_type,
            metrics=request.metrics or b"",
        )
        try:
            r = await stub.PushTelemetry(
                message, metadata=(*_headers(client), *self._auth), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
        return PushTelemetryResponse(r.throttle_time_ms, r.error_code)


def _retry_after_ms(trailers: grpc.aio.Metadata | None) -> int:
    """The wait an OTLP answer asks for: ``RetryInfo`` in its own trailer or inside the status details."""
    for key, value in trailers or ():
        if not isinstance(value, bytes):
            continue
        if key == RETRY_INFO_KEY:
            return int(RetryInfo.FromString(value).retry_delay.ToMilliseconds())
        if key == STATUS_DETAILS_KEY:
            for detail in Status.FromString(value).details:
                info = RetryInfo()
                if detail.Unpack(info):
                    return int(info.retry_delay.ToMilliseconds())
    return 0


class OtlpGrpcTransport(_GrpcChannels):
    """OTLP ``MetricsService/Export`` over gRPC (``compression`` gzip or none, gRPC's own encoding)."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        compression: CompressionType,
        credentials: Credentials = Credentials(),
    ) -> None:
        super().__init__(address, timeout_s, credentials)
        self.compression = grpc.Compression.Gzip if compression is CompressionType.GZIP else None

    async def export(self, client: ClientIdentity, instance_id: uuid.UUID, body: bytes) -> OtlpAnswer:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel(client.number).unary_unary(
            f"/{METRICS_SERVICE}/Export"
        )
        metadata = (*_headers(client), (INSTANCE_ID_HEADER, str(instance_id)), *self._auth)
        try:
            await call(body, metadata=metadata, timeout=self.timeout_s, compression=self.compression)
        except grpc.aio.AioRpcError as exc:
            retry_ms = _retry_after_ms(exc.trailing_metadata())
            if (
                exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                and not retry_ms
            ):
                raise TransportError(f"{exc.code().name}: {exc.details()}") from exc
            return OtlpAnswer(exc.code().name, retry_ms)
        return OtlpAnswer("OK")


class HttpTransport:
    """The sink's KIP-714 HTTP endpoints: Get as JSON, Push as raw bytes with the other fields as query
    parameters (``ingest/transports/http_app.py``)."""

    def __init__(
        self,
        address: str,
        timeout_s: float,
        max_connections: int = 100,
        credentials: Credentials = Credentials(),
    ) -> None:
        scheme = "https" if credentials.tls else "http"
        self.base_url = address if "://" in address else f"{scheme}://{address}"
        self.address = address
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            verify=credentials.http_verify(),
            headers=dict(credentials.metadata()),
        )

    async def check(self, connect_timeout_s: float) -> None:
        try:
            await self._client.get(HEALTH_PATH, timeout=connect_timeout_s)
        except httpx.HTTPError as exc:
            raise TargetUnreachableError(
                f"cannot reach the HTTP target {self.base_url}: {exc or type(exc).__name__}"
            ) from None

    async def _post(
        self, path: str, client: ClientIdentity, headers: Mapping[str, str] | None = None, **kwargs: Any
    ) -> Mapping[str, Any]:
        try:
            response = await self._client.post(
                path, headers={**dict(_headers(client)), **(headers or {})}, **kwargs
            )
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 500 or not isinstance(body, dict) or "error_code" not in body:
            raise TransportError(f"HTTP {response.status_code} from {path}")
        return body

    async def get(self, client: ClientIdentity, instance_id: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
        known = instance_id.int != 0
        body = await self._post(
            GET_PATH, client, json={"client_instance_id": str(instance_id) if known else None}
        )
        returned = body.get("client_instance_id")
        return GetTelemetrySubscriptionsResponse(
            throttle_time_ms=int(body.get("throttle_time_ms", 0)),
            error_code=int(body["error_code"]),
            client_instance_id=parse_instance_id(returned) or uuid.UUID(int=0),
            subscription_id=int(body.get("subscription_id", 0)),
            accepted_compression_types=tuple(body.get("accepted_compression_types", ())),
            push_interval_ms=int(body.get("push_interval_ms", 0)),
            telemetry_max_bytes=int(body.get("telemetry_max_bytes", 0)),
            delta_temporality=bool(body.get("delta_temporality", False)),
            requested_metrics=tuple(body.get("requested_metrics", ())),
        )

    async def push(self, client: ClientIdentity, request: PushTelemetryRequest) -> PushTelemetryResponse:
        params = {
            "client_instance_id": str(request.client_instance_id or ""),
            "subscription_id": str(request.subscription_id),
            "terminating": "true" if request.terminating else "false",
            "compression_type": str(request.compression_type),
        }
        body = await self._post(
            PUSH_PATH,
            client,
            params=params,
            content=request.metrics or b"",
            headers={"Content-Type": "application/octet-stream"},
        )
        return PushTelemetryResponse(int(body.get("throttle_time_ms", 0)), int(body["error_code"]))

    async def close(self) -> None:
        await self._client.aclose()
