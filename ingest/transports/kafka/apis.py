"""What the Kafka wire listener answers, API by API (Kafka's ``KafkaApis`` for this one-node "cluster").

- ApiVersions (18), v0-4: exactly ``SUPPORTED_VERSIONS``. v3 carries the client's software name and
  version, checked with Kafka's pattern and capped at ``limits.max_software_chars`` characters
  (INVALID_REQUEST otherwise, as Kafka answers a name its pattern refuses), which the connection keeps
  for its later requests. An unsupported version gets a v0 answer: UNSUPPORTED_VERSION and
  ApiVersions' range.
- Metadata (3), v0-13: this node as the only broker and the controller, at its advertised address;
  every requested topic UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID when asked by id, v12); no topics
  when all are asked for. A request for more than ``protocol.MAX_METADATA_TOPICS`` topics, or by topic id
  before v12, is refused.
- DescribeCluster (60), v0-2: this node (never fenced), for brokers; asking for controllers gets
  MISMATCHED_ENDPOINT_TYPE (114) and any other endpoint type UNSUPPORTED_ENDPOINT_TYPE (115), with a
  broker's messages.
- Metadata (the cluster's in v8-10, each topic's from v8) and DescribeCluster carry, when asked, what
  the client's principal may do (``SuperUserAuthorizer.authorized_operations``): every operation for
  a super user, none for anybody else. Every topic is unknown to every principal: a broker with an
  authorizer answers a user without ACLs TOPIC_AUTHORIZATION_FAILED instead, to hide which topics
  exist; the sink has none to hide.
- GetTelemetrySubscriptions (71) and PushTelemetry (72), v0: the pipeline's answer, the same as over
  gRPC and HTTP; the connection is the pipeline's ``channel``, which quota throttles mute.
- SaslHandshake (17), v0-1, and SaslAuthenticate (36), v0-2: ILLEGAL_SASL_STATE (34), as Kafka's APIs
  answer them on an authenticated connection or a listener without SASL; the authentication itself is
  the listener's (``sasl``), before any request reaches the APIs.
- DescribeConfigs (32) v1-4, AlterConfigs (33) v0-2, IncrementalAlterConfigs (44) v0-1 and
  ListConfigResources (74) v0-1, for CLIENT_METRICS resources: the subscriptions, through the admin
  operations (``config_apis``).
- DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), v0: SCRAM credentials in the
  config log (``credential_apis``, KIP-554), super users only.
- DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1: the admin operations (``SinkAdmin``),
  super users only; AlterClientQuotas goes through the mutation quota, whose throttle also mutes the
  connection.

The request header's ``ClientId`` names the client to the APIs that use it (the telemetry RPCs and
the client-quota RPCs): there it must be valid text (no control character; kio already refuses
invalid UTF-8) of at most ``limits.max_client_id_chars`` characters (``identity.check_client_text``),
else the request is answered INVALID_REQUEST (in the error code, or in every entry of
AlterClientQuotas) without reaching the pipeline or the admin. An answer rather than a closed
connection: a closed connection makes a Kafka client reconnect and retry, while INVALID_REQUEST tells
it (and its operator, in its log) that this request will never be served, and turns its telemetry off
(PD-12). The APIs that do not use the client id (ApiVersions, Metadata, DescribeCluster) ignore it.

Anything else (another API key, an unsupported version, a body that does not parse) raises
``FrameError``: the listener closes the connection, as a broker does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from ingest.admin.operations import QuotaAlteration, SinkAdmin
from ingest.handler_time import HandlerTime, metering, record_request_time
from ingest.push.metrics import Rpc
from ingest.push.pipeline import TelemetryPipeline
from ingest.security.identity import ClientTextError, check_client_text
from ingest.transports.kafka.config_apis import ConfigApis
from ingest.transports.kafka.credential_apis import CredentialApis
from ingest.transports.kafka.protocol import (
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    GET_TELEMETRY_SUBSCRIPTIONS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_CONFIG_RESOURCES,
    METADATA,
    PUSH_TELEMETRY,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUPPORTED_VERSIONS,
    FrameError,
    RequestHeader,
    build,
    encode_response,
    nested,
    parse_request,
    peek_header,
    response_schema,
)
from quotas import DEFAULT, ClientQuotaEntity, ThrottleCallback
from quotas.entities import ENTITY_FIELDS, EntityComponent
from subscriptions import ClientContext, GetTelemetrySubscriptionsRequest, PushTelemetryRequest

__all__ = ["Answer", "KafkaApis", "KafkaConnection", "NodeInfo"]

log = logging.getLogger(__name__)

BROKERS_ENDPOINT: Final = 1
CONTROLLERS_ENDPOINT: Final = 2
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
_SOFTWARE_PATTERN: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
"""Kafka's rule for ApiVersions v3's ClientSoftwareName and ClientSoftwareVersion."""
_ZERO_MS: Final = datetime.timedelta(0)
_RECORDED_BY_THE_PIPELINE: Final = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY})
"""The telemetry RPCs record their handler time in the pipeline; every other API is recorded here,
SaslHandshake included: one that reaches the APIs is not authenticating (KIP-124 throttles it then)."""
_ZERO_UUID: Final = uuid.UUID(int=0)
_LOGGED_CHARS: Final = 64
"""How much of a refused client string a log line shows."""


class KafkaConnection(ThrottleCallback, Protocol):
    """What the APIs need of the connection a request came on; it is also the channel a quota
    throttle mutes."""

    @property
    def local_address(self) -> tuple[str, int]:
        """The (host, port) the client connected to."""
        ...

    def client_context(self, client_id: str | None) -> ClientContext:
        """Who sent a request with this header client id on this connection."""
        ...

    def set_client_software(self, name: str, version: str) -> None:
        """ApiVersions v3: the client's software, for the connection's later requests."""
        ...


class NodeInfo:
    """This node as Metadata and DescribeCluster describe it."""

    def __init__(
        self, node_id: int, cluster_id: str, advertised_host: str | None, advertised_port: int | None
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port

    def address(self, connection: KafkaConnection) -> tuple[str, int]:
        """The advertised address, else the one the client reached (Kafka's ``advertised.listeners``
        defaults to the listener's own)."""
        host, port = connection.local_address
        return self.advertised_host or host, self.advertised_port or port


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


Handler = Callable[[RequestHeader, Any, KafkaConnection], Awaitable[Any]]


class Answer:
    """A response frame, and what Kafka's ``recordNetworkThreadTimeCallback`` does once it is sent:
    the request's network-side time (parsing the request, encoding and writing the answer; TLS
    encryption happens in the write) is recorded for its client without a quota check (KIP-124,
    AUD-D9), so it counts toward the client's next throttle, never this answer's."""

    __slots__ = ("_clock", "_record", "frame")

    def __init__(self, frame: bytes, clock: Callable[[], int], record: Callable[[int], None]) -> None:
        self.frame = frame
        self._clock = clock
        self._record = record

    def write_to(self, writer: asyncio.WriteTransport | asyncio.StreamWriter) -> None:
        started = self._clock()
        writer.write(self.frame)
        self._record(self._clock() - started)


class KafkaApis:
    """Answers one request frame at a time for a connection (``respond``)."""

    network_clock: Callable[[], int] = staticmethod(time.perf_counter_ns)
    """What the network-side time is read with (a test steps it)."""

    def __init__(self, pipeline: TelemetryPipeline, admin: SinkAdmin, node: NodeInfo) -> None:
        self.pipeline = pipeline
        self.admin = admin
        self.node = node
        credentials = CredentialApis(admin, self._client)
        configs = ConfigApis(admin, self._client, node.node_id)
        self._handlers: Mapping[int, Handler] = {
            API_VERSIONS: self._api_versions,
            METADATA: self._metadata,
            DESCRIBE_CLUSTER: self._describe_cluster,
            GET_TELEMETRY_SUBSCRIPTIONS: self._get_telemetry_subscriptions,
            PUSH_TELEMETRY: self._push_telemetry,
            DESCRIBE_CLIENT_QUOTAS: self._describe_client_quotas,
            ALTER_CLIENT_QUOTAS: self._alter_client_quotas,
            SASL_HANDSHAKE: self._sasl_handshake,
            SASL_AUTHENTICATE: self._sasl_authenticate,
            DESCRIBE_USER_SCRAM_CREDENTIALS: credentials.describe_user_scram_credentials,
            ALTER_USER_SCRAM_CREDENTIALS: credentials.alter_user_scram_credentials,
            DESCRIBE_CONFIGS: configs.describe_configs,
            ALTER_CONFIGS: configs.alter_configs,
            INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
            LIST_CONFIG_RESOURCES: configs.list_config_resources,
        }
        assert set(self._handlers) == set(SUPPORTED_VERSIONS)

    async def respond(self, frame: bytes, connection: KafkaConnection, *, quotas: bool = True) -> Answer:
        """The answer to one request frame; FrameError when the connection is to be closed.
        ``quotas=False``: the authenticator's ApiVersions before SASL authentication, which a broker
        answers outside ``KafkaApis`` and every quota (nothing recorded, never throttled: KF3-S4)."""
        clock = self.network_clock
        started = clock()
        api_key, api_version, correlation_id = peek_header(frame)
        versions = SUPPORTED_VERSIONS.get(api_key)
        if versions is None:
            raise FrameError(f"api key {api_key} is not supported")
        if not versions[0] <= api_version <= versions[1]:
            if api_key == API_VERSIONS:  # answered in v0, which every client reads (KIP-511)
                response = encode_response(API_VERSIONS, 0, correlation_id, self._unsupported_api_versions())
                if not quotas:
                    return Answer(response, self.network_clock, lambda _: None)
                return self._answer(response, lambda: self._quota_client(None, connection), clock() - started)
            raise FrameError(f"api key {api_key} version {api_version} is not supported")
        header, body = parse_request(frame, api_key, api_version)
        network_ns = clock() - started
        who = functools.cache(lambda: self._quota_client(header, connection))  # once for both records
        if api_key in _RECORDED_BY_THE_PIPELINE or not quotas:
            response = await self._handlers[api_key](header, body, connection)
        else:
            with metering() as meter:
                response = await self._handlers[api_key](header, body, connection)
            response = self._request_quota(who(), connection, meter, response)
        started = clock()
        try:
            encoded = encode_response(api_key, api_version, correlation_id, response)
        except Exception as exc:  # a value the version cannot carry, from what the client sent
            raise FrameError(f"no {api_key}v{api_version} answer can carry this: {exc!r}") from exc
        if not quotas:
            return Answer(encoded, self.network_clock, lambda _: None)
        return self._answer(encoded, who, network_ns + clock() - started)

    def _answer(self, frame: bytes, who: Callable[[], ClientContext], network_ns: int) -> Answer:
        """``frame``, recording its network time for the client ``who`` names once it is written."""

        def record(write_ns: int) -> None:
            quota = self.pipeline.quotas.request
            if quota.quotas_enabled:  # else nothing is recorded (Kafka installs no callback then)
                client, now = who(), self.pipeline.clock.now_ms()
                quota.record_network_time(
                    client.principal, client.client_id or "", network_ns + write_ns, now
                )

        return Answer(frame, self.network_clock, record)

    def _quota_client(self, header: RequestHeader | None, connection: KafkaConnection) -> ClientContext:
        """The client a request is recorded for: its header's, or the connection's when the client id
        is missing or not valid text."""
        try:
            client = self._client(header, connection) if header is not None else None
        except ClientTextError:
            client = None
        return connection.client_context(None) if client is None else client

    def _request_quota(
        self, client: ClientContext, connection: KafkaConnection, meter: HandlerTime, response: Any
    ) -> Any:
        """Every other API is subject to the request quota too (KIP-124; AUD-D13): its handler
        time is recorded for the connection's client, and a throttle mutes the connection and goes
        into the answer's ``throttle_time_ms`` where its version has one, as a broker's
        ``sendResponseMaybeThrottle`` (``record_request_time``)."""
        now = self.pipeline.clock.now_ms()
        throttle_ms = record_request_time(self.pipeline.quotas.request, client, meter, now, connection)
        if throttle_ms <= 0 or not hasattr(response, "throttle_time"):
            return response
        answered = max(throttle_ms, int(response.throttle_time.total_seconds() * 1000))
        return dataclasses.replace(response, throttle_time=_ms(answered))

    # -- SASL, once authenticated (or on a listener without it) ---------------------------------

    async def _sasl_handshake(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        """A handshake the listener did not take as a re-authentication (``sasl``): ILLEGAL_SASL_STATE."""
        schema = response_schema(SASL_HANDSHAKE, header.api_version)
        return build(schema, error_code=ErrorCode.illegal_sasl_state, mechanisms=())

    async def _sasl_authenticate(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        schema = response_schema(SASL_AUTHENTICATE, header.api_version)
        return build(
            schema,
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
        )

    # -- cluster ------------------------------------------------------------------------------

    def _api_keys(self, schema: type[Any], only: int | None = None) -> tuple[Any, ...]:
        version = nested(schema, "ApiVersion")
        return tuple(
            version(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
            if only is None or key == only
        )

    def _unsupported_api_versions(self) -> Any:
        schema = response_schema(API_VERSIONS, 0)
        return build(
            schema,
            error_code=ErrorCode.unsupported_version,
            api_keys=self._api_keys(schema, only=API_VERSIONS),
        )

    async def _api_versions(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        schema = response_schema(API_VERSIONS, header.api_version)
        if header.api_version >= 3:
            name, version = body.client_software_name, body.client_software_version
            cap = self.pipeline.limits.max_software_chars
            if not (
                len(name) <= cap
                and len(version) <= cap
                and _SOFTWARE_PATTERN.fullmatch(name)
                and _SOFTWARE_PATTERN.fullmatch(version)
            ):
                log.info(
                    "ApiVersions with an invalid client software name or version (%d, %d characters): %r %r",
                    len(name),
                    len(version),
                    name[:_LOGGED_CHARS],
                    version[:_LOGGED_CHARS],
                )
                return build(
                    schema, error_code=ErrorCode.invalid_request, api_keys=(), throttle_time=_ZERO_MS
                )
            connection.set_client_software(name, version)
        return build(
            schema, error_code=ErrorCode.none, api_keys=self._api_keys(schema), throttle_time=_ZERO_MS
        )

    async def _metadata(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        schema = response_schema(METADATA, header.api_version)
        host, port = self.node.address(connection)
        broker = build(
            nested(schema, "MetadataResponseBroker"), node_id=self.node.node_id, host=host, port=port
        )
        topic_schema = nested(schema, "MetadataResponseTopic")
        requested = body.topics or ()  # at most MAX_METADATA_TOPICS: the frame walk refused more
        topic_operations = self._authorized_operations(
            "TOPIC", getattr(body, "include_topic_authorized_operations", False), header, connection
        )
        if header.api_version < 12 and any(t.name is None for t in requested):
            raise FrameError(f"Metadata v{header.api_version} asks for a topic by id (v12 and later only)")
        topics = tuple(
            build(
                topic_schema,
                error_code=(
                    ErrorCode.unknown_topic_or_partition if t.name is not None else ErrorCode.unknown_topic_id
                ),
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                is_internal=False,
                partitions=(),
                topic_authorized_operations=topic_operations,
            )
            for t in requested
        )
        return build(
            schema,
            throttle_time=_ZERO_MS,
            error_code=ErrorCode.none,
            brokers=(broker,),
            cluster_id=self.node.cluster_id,
            controller_id=self.node.node_id,
            topics=topics,
            cluster_authorized_operations=self._authorized_operations(
                "CLUSTER", getattr(body, "include_cluster_authorized_operations", False), header, connection
            ),
        )

    async def _describe_cluster(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        schema = response_schema(DESCRIBE_CLUSTER, header.api_version)
        endpoint_type = getattr(body, "endpoint_type", BROKERS_ENDPOINT)
        if endpoint_type != BROKERS_ENDPOINT:  # a broker's answers, word for word (tests/oracle)
            if endpoint_type == CONTROLLERS_ENDPOINT:
                code, message = (
                    ErrorCode.mismatched_endpoint_type,
                    "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                    "CONTROLLER",
                )
            else:
                code, message = (
                    ErrorCode.unsupported_endpoint_type,
                    f"Unsupported endpoint type {endpoint_type}",
                )
            return build(
                schema,
                throttle_time=_ZERO_MS,
                error_code=code,
                error_message=message,
                endpoint_type=BROKERS_ENDPOINT,
                cluster_id="",
                brokers=(),
            )
        host, port = self.node.address(connection)
        broker = build(
            nested(schema, "DescribeClusterBroker"),
            broker_id=self.node.node_id,
            host=host,
            port=port,
            is_fenced=False,
        )
        return build(
            schema,
            throttle_time=_ZERO_MS,
            error_code=ErrorCode.none,
            error_message=None,
            endpoint_type=BROKERS_ENDPOINT,
            cluster_id=self.node.cluster_id,
            controller_id=self.node.node_id,
            brokers=(broker,),
            cluster_authorized_operations=self._authorized_operations(
                "CLUSTER", body.include_cluster_authorized_operations, header, connection
            ),
        )

    def _authorized_operations(
        self, resource_type: str, asked: bool, header: RequestHeader, connection: KafkaConnection
    ) -> int:
        """What the client may do on a resource of ``resource_type``, when it asked (Kafka's
        ``AuthHelper.authorizedOperations``)."""
        if not asked:
            return AUTHORIZED_OPERATIONS_OMITTED
        principal = connection.client_context(header.client_id).principal
        return self.admin.authorizer.authorized_operations(principal, resource_type)

    # -- telemetry ----------------------------------------------------------------------------

    def _client(self, header: RequestHeader, connection: KafkaConnection) -> ClientContext:
        """Who sent the request; ``ClientTextError`` when its ``ClientId`` is not valid text or is over
        ``limits.max_client_id_chars`` (see the module docstring)."""
        if header.client_id is not None:
            check_client_text("ClientId", header.client_id, self.pipeline.limits.max_client_id_chars)
        return connection.client_context(header.client_id)

    def _observe(self, rpc: Rpc, client: ClientContext | None) -> Any:
        seen = self.pipeline.request_metrics.observe("kafka", rpc)
        seen.client = client
        return seen

    def _refused(self, rpc: Rpc, error: ClientTextError) -> None:
        """Count a telemetry request refused for its client id, which names no quota entity."""
        log.debug("%s refused: %s", rpc, error)
        with self._observe(rpc, None) as seen:
            seen.code = ErrorCode.invalid_request

    async def _get_telemetry_subscriptions(
        self, header: RequestHeader, body: Any, connection: KafkaConnection
    ) -> Any:
        schema = response_schema(GET_TELEMETRY_SUBSCRIPTIONS, 0)
        try:
            client = self._client(header, connection)
        except ClientTextError as exc:
            self._refused("GetTelemetrySubscriptions", exc)
            return build(
                schema,
                throttle_time=_ZERO_MS,
                error_code=ErrorCode.invalid_request,
                client_instance_id=_ZERO_UUID,
                subscription_id=0,
                accepted_compression_types=(),
                push_interval=_ZERO_MS,
                telemetry_max_bytes=0,
                delta_temporality=False,
                requested_metrics=(),
            )
        with self._observe("GetTelemetrySubscriptions", client) as seen:
            r = await self.pipeline.get_subscriptions(
                GetTelemetrySubscriptionsRequest(body.client_instance_id), client, connection
            )
            seen.code = r.error_code
        return build(
            schema,
            throttle_time=_ms(r.throttle_time_ms),
            error_code=ErrorCode(r.error_code),
            client_instance_id=r.client_instance_id,
            subscription_id=r.subscription_id,
            accepted_compression_types=tuple(int(c) for c in r.accepted_compression_types),
            push_interval=_ms(r.push_interval_ms),
            telemetry_max_bytes=r.telemetry_max_bytes,
            delta_temporality=r.delta_temporality,
            requested_metrics=tuple(r.requested_metrics),
        )

    async def _push_telemetry(self, header: RequestHeader, body: Any, connection: KafkaConnection) -> Any:
        schema = response_schema(PUSH_TELEMETRY, 0)
        try:
            client = self._client(header, connection)
        except ClientTextError as exc:
            self._refused("PushTelemetry", exc)
            return build(schema, throttle_time=_ZERO_MS, error_code=ErrorCode.invalid_request)
        with self._observe("PushTelemetry", client) as seen:
            push = PushTelemetryRequest(
                body.client_instance_id,
                body.subscription_id,
                body.terminating,
                body.compression_type,
                body.metrics,
            )
            r = await self.pipeline.push(push, client, connection)
            seen.code = r.error_code
        return build(
            schema,
            throttle_time=_ms(r.throttle_time_ms),
            error_code=ErrorCode(r.error_code),
        )

    # -- client quotas ------------------------------------------------------------------------

    async def _describe_client_quotas(
        self, header: RequestHeader, body: Any, connection: KafkaConnection
    ) -> Any:
        schema = response_schema(DESCRIBE_CLIENT_QUOTAS, header.api_version)
        try:
            client = self._client(header, connection)
        except ClientTextError as exc:
            return build(
                schema,
                throttle_time=_ZERO_MS,
                error_code=ErrorCode.invalid_request,
                error_message=str(exc),
                entries=None,
            )
        components = [EntityComponent(c.entity_type, c.match_type, c.match) for c in body.components]
        result = self.admin.describe_client_quotas(client, components, strict=body.strict)
        if result.value is None:
            return build(
                schema,
                throttle_time=_ZERO_MS,
                error_code=ErrorCode(result.error),
                error_message=result.message,
                entries=None,
            )
        entity_schema = nested(schema, "EntityData")
        value_schema = nested(schema, "ValueData")
        entries = tuple(
            build(
                nested(schema, "EntryData"),
                entity=tuple(
                    entity_schema(entity_type=kind, entity_name=None if name == DEFAULT else name)
                    for kind, name in parts.items()
                ),
                values=tuple(value_schema(key=k, value=v) for k, v in sorted(values.items())),
            )
            for parts, values in result.value
        )
        return build(
            schema, throttle_time=_ZERO_MS, error_code=ErrorCode.none, error_message=None, entries=entries
        )

    async def _alter_client_quotas(
        self, header: RequestHeader, body: Any, connection: KafkaConnection
    ) -> Any:
        schema = response_schema(ALTER_CLIENT_QUOTAS, header.api_version)
        entity_schema = nested(schema, "EntityData")

        def echoed(parts: Any) -> tuple[Any, ...]:
            return tuple(entity_schema(entity_type=p.entity_type, entity_name=p.entity_name) for p in parts)

        def every_entry(code: ErrorCode, message: str) -> Any:
            entries = tuple(
                build(
                    nested(schema, "EntryData"),
                    error_code=code,
                    error_message=message,
                    entity=echoed(e.entity),
                )
                for e in body.entries
            )
            return build(schema, throttle_time=_ZERO_MS, entries=entries)

        try:
            client = self._client(header, connection)
        except ClientTextError as exc:
            return every_entry(ErrorCode.invalid_request, str(exc))
        # authorized before anything is validated, as Kafka does
        if (denied := self.admin.denial(client, "ALTER_CONFIGS")) is not None:
            return every_entry(ErrorCode(denied.error), str(denied))
        answers: list[tuple[Any, int, str | None] | None] = []
        alterations: list[QuotaAlteration] = []
        for entry in body.entries:
            try:
                entity = _quota_entity(entry.entity)
            except ValueError as exc:
                answers.append((entry.entity, ErrorCode.invalid_request, str(exc)))
                continue
            ops = [(op.key, None if op.remove else op.value) for op in entry.ops]
            alterations.append(QuotaAlteration(entity, ops))
            answers.append(None)
        result = await self.admin.alter_client_quotas(client, alterations, validate_only=body.validate_only)
        altered = iter(result.entries)
        entries = []
        for entry, refused in zip(body.entries, answers, strict=True):
            if refused is None:
                _, error, message = next(altered)
                entities, code = entry.entity, int(error)
            else:
                entities, code, message = refused
            entries.append(
                build(
                    nested(schema, "EntryData"),
                    error_code=ErrorCode(code),
                    error_message=message,
                    entity=echoed(entities),
                )
            )
        throttle_ms = result.throttle_time_ms
        self.admin.quotas.controller_mutation.throttle(
            client.principal, client.client_id or "", throttle_ms, connection, self.admin.now_ms()
        )
        return build(schema, throttle_time=_ms(throttle_ms), entries=tuple(entries))


def _quota_entity(parts: Any) -> ClientQuotaEntity:
    """An AlterClientQuotas entity (type, name or null for the default); ValueError when Kafka's
    controller would refuse its shape."""
    names: dict[str, str] = {}
    for part in parts:
        field = ENTITY_FIELDS.get(part.entity_type)
        if field is None:
            raise ValueError(f"Unhandled client quota entity type: {part.entity_type}")
        if field in names:
            raise ValueError(f"Duplicate {part.entity_type} entity type")
        names[field] = DEFAULT if part.entity_name is None else part.entity_name
    if not names:
        raise ValueError("Invalid empty client quota entity")
    return ClientQuotaEntity(**names)
