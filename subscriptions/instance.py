"""A client instance: one KIP-714 client as this sink knows it (Kafka's ClientMetricsInstance).

It holds the client's attributes (captured when the instance was created), the resolved subscription
and its id, the store version it was resolved at, and the gating state: last Get and Push times,
last error, terminating flag, and the expiry deadline. Behaviour lives in ``gating`` and ``manager``.
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
        "client_instance_id",
        "context",
        "deadline_ms",
        "expiry_ms",
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
        self.client_instance_id = client_instance_id
        self.context = context
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
    def push_interval_ms(self) -> int:
        return self.resolution.push_interval_ms

    def __repr__(self) -> str:
        return (
            f"ClientInstance({kafka_uuid_string(self.client_instance_id)}, "
            f"subscription_id={self.subscription_id}, interval={self.push_interval_ms}, "
            f"last_error={self.last_error}, terminating={self.terminating})"
        )
