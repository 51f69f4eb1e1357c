"""A client instance: one KIP-714 client as this sink knows it (Kafka's ClientMetricsInstance).

It holds the client's attributes (captured when the instance was created), the resolved subscription
and its id, the store version it was resolved at, and the gating state: last Get and Push times,
last error, terminating flag, and the expiry deadline. Behaviour lives in ``gating`` and ``manager``.

A cache holds up to ``cache_max_size`` (16,384) instances, and anonymous clients choose how often
new ones are made, so an instance is one object the garbage collector tracks, not three: it keeps
the id as its 128-bit int (``key``) and the client's attributes as a plain tuple (a tuple of strings
and ints is untracked by the collector; a ``UUID`` or a named tuple never is), and rebuilds the
``UUID`` and ``ClientContext`` when asked. Every full collection walks every tracked object, so this
is what keeps its pause short while a flood of new client ids churns the cache.
"""

from __future__ import annotations

from uuid import UUID

from subscriptions.errors import Errors
from subscriptions.gating import NEVER
from subscriptions.messages import ClientContext
from subscriptions.patterns import (
    CLIENT_ID,
    CLIENT_INSTANCE_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
)
from subscriptions.resolution import Resolution
from subscriptions.subscription_id import kafka_uuid_string, uuid_hash

__all__ = ["ClientInstance", "client_attributes"]


def client_attributes(client_instance_id: UUID, context: ClientContext) -> dict[str, str | None]:
    """The six matchable attributes of TEL-6 (the instance id in Kafka's base64 form)."""
    port = context.client_source_port
    return {
        CLIENT_INSTANCE_ID: kafka_uuid_string(client_instance_id),
        CLIENT_ID: context.client_id,
        CLIENT_SOFTWARE_NAME: context.client_software_name,
        CLIENT_SOFTWARE_VERSION: context.client_software_version,
        CLIENT_SOURCE_ADDRESS: context.client_source_address,
        CLIENT_SOURCE_PORT: None if port is None else str(port),
    }


class ClientInstance:
    """Mutable per-instance state; a re-evaluation (TEL-13) replaces the object."""

    __slots__ = (
        "_context",
        "deadline_ms",
        "expiry_ms",
        "key",
        "last_error",
        "last_get_ms",
        "last_push_ms",
        "resolution",
        "subscription_id",
        "terminating",
        "version",
    )

    def __init__(
        self,
        client_instance_id: UUID,
        context: ClientContext,
        resolution: Resolution,
        version: int,
        expiry_ms: int,
    ) -> None:
        self.key = client_instance_id.int
        """The id as its 128-bit int: the cache's key."""
        self._context: tuple[str | int | None, ...] = tuple(context)
        self.resolution = resolution
        self.subscription_id = resolution.crc ^ uuid_hash(client_instance_id)
        self.version = version
        self.expiry_ms = expiry_ms
        self.deadline_ms = NEVER
        self.last_get_ms = NEVER
        self.last_push_ms = NEVER
        self.last_error: int = Errors.NONE
        self.terminating = False

    @property
    def client_instance_id(self) -> UUID:
        return UUID(int=self.key)

    @property
    def context(self) -> ClientContext:
        """The client's attributes, captured when the instance was created."""
        return ClientContext._make(self._context)

    @property
    def connection_id(self) -> str | None:
        """The connection the instance was created on (Kafka wire listener), else None."""
        return self.context.connection_id

    @property
    def push_interval_ms(self) -> int:
        return self.resolution.push_interval_ms

    def __repr__(self) -> str:
        return (
            f"ClientInstance({kafka_uuid_string(self.client_instance_id)}, "
            f"subscription_id={self.subscription_id}, interval={self.push_interval_ms}, "
            f"last_error={self.last_error}, terminating={self.terminating})"
        )
