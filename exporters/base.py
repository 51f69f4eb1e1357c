"""The exporter plugin interface: where an accepted push goes, and when it counts as done.

An ``Exporter`` receives each accepted push (the decompressed, validated OTLP bytes and a
``PushContext`` describing who sent it) and completes ``export`` only when the push is durable, with
a result the front end maps to the client's answer:

- ``SUCCESS``: durable; the client is told NONE.
- ``RETRYABLE``: not stored, try again later (storage fault, overload, shutdown); the client is told
  THROTTLING_QUOTA_EXCEEDED with a throttle, so it retries at its next interval.
- ``PERMANENT``: the data itself was refused (e.g. a downstream collector rejected it as malformed);
  the client is told INVALID_RECORD.

A ``PushContext`` is proven storable when it is made: every number fits its column and every string
(and quota tag) is text UTF-8 can carry (no lone surrogate), else ``ValueError`` naming the field. So
no push can make an exporter's conversion fail for the pushes batched with it. ``TelemetryPush.size``
is what a push costs an exporter that keeps it: its payload plus the UTF-8 bytes of its context text.

Exporters are started once, may be flushed, and are shut down once; ``health`` says whether the last
attempt to store something succeeded. ``ChainExporter`` (in ``registry``) runs several in order.

``export_batch`` stores a trusted forwarder's batch (``ForwardedBatch``: who sent it, the sequence
number of its last push, whether it was sent before). An exporter that can, stores the batch
atomically with its sequence and answers a resend of a batch it already holds ``DUPLICATE`` (the
client is told it landed; nothing is stored twice): the Delta exporter does, across restarts and
replicas (``delta.landing``). The default stores each push alone and never deduplicates.
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, NamedTuple

__all__ = [
    "ExportResult",
    "Exporter",
    "ForwardedBatch",
    "Health",
    "PushContext",
    "TelemetryPush",
    "entity_text",
    "new_push_id",
]


class ExportResult(Enum):
    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    DUPLICATE = "duplicate"
    """Already stored by an earlier attempt of the same forwarded batch (``export_batch`` only): the
    client is answered as for SUCCESS."""


class Health(NamedTuple):
    healthy: bool
    detail: str = ""


_TEXT_FIELDS: Final = (
    "push_id",
    "principal",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
)
"""The string fields of a ``PushContext`` (besides the quota tags); each may be None but the first two."""


def _utf8_bytes(value: str) -> int | None:
    """How many bytes ``value`` takes in UTF-8; None if it cannot be encoded (a lone surrogate)."""
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def new_push_id() -> str:
    """A unique id for one accepted push (a random UUID in its 32-hex-digit form)."""
    return uuid.uuid4().hex


def entity_text(tags: Iterable[tuple[str, str]]) -> str:
    """A quota entity's tags as one stable string, sorted ``k=v`` pairs: ``client-id=c1,user=alice``
    (the bronze tables' ``quota_entity`` and ``entity`` columns). The tag names are the quota engine's
    (``quotas.entities``); exporters import no other package of the repo, so the string form
    is defined here."""
    return ",".join(f"{key}={value}" for key, value in sorted(tags))


@dataclass(frozen=True, slots=True)
class PushContext:
    """Everything known about an accepted push besides its payload.

    ``quota_tags`` are the metric tags of the quota level the client matched (e.g. ``{"user":
    "alice", "client-id": ""}``): the quota entity its usage is accounted to. ``text_bytes`` is set on
    creation: the UTF-8 bytes of the context's text, the quota tags counted twice (a row holds them as
    tags and as ``quota_entity``).
    """

    client_instance_id: uuid.UUID
    subscription_id: int
    received_ms: int
    principal: str = "User:ANONYMOUS"
    client_id: str | None = None
    client_software_name: str | None = None
    client_software_version: str | None = None
    client_source_address: str | None = None
    client_source_port: int | None = None
    quota_tags: Mapping[str, str] = field(default_factory=dict)
    compression_type: int = 0
    terminating: bool = False
    push_id: str = field(default_factory=new_push_id)
    text_bytes: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        """Reject values the bronze schema cannot hold, so one bad push never fails a batch."""
        problems = []
        text_bytes = 0
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is None and name not in ("push_id", "principal"):
                continue
            size = _utf8_bytes(value) if isinstance(value, str) else None
            if size is None:
                problems.append(f"{name} must be a string UTF-8 can encode (no lone surrogate)")
            else:
                text_bytes += size
        if not -(2**31) <= self.subscription_id < 2**31:
            problems.append(f"subscription_id {self.subscription_id} is not an int32")
        if self.received_ms < 0:
            problems.append("received_ms must not be negative")
        if self.client_source_port is not None and not 0 <= self.client_source_port <= 65535:
            problems.append(f"client_source_port {self.client_source_port} is not a port")
        if not -128 <= self.compression_type <= 127:
            problems.append(f"compression_type {self.compression_type} is not an int8")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.quota_tags.items()):
            problems.append("quota_tags must map strings to strings")
        else:
            for key, value in self.quota_tags.items():
                key_bytes, value_bytes = _utf8_bytes(key), _utf8_bytes(value)
                if key_bytes is None or value_bytes is None:
                    problems.append("quota_tags must be strings UTF-8 can encode (no lone surrogate)")
                    break
                text_bytes += 2 * (key_bytes + value_bytes + 1)
        if problems:
            raise ValueError("; ".join(problems))
        object.__setattr__(self, "text_bytes", text_bytes)

    @property
    def quota_entity(self) -> str:
        """The quota tags as one stable string, e.g. ``client-id=,user=alice``."""
        return entity_text(self.quota_tags.items())


@dataclass(frozen=True, slots=True)
class TelemetryPush:
    """An accepted push: OTLP ``MetricsData`` bytes (decompressed and validated) and its context."""

    context: PushContext
    payload: bytes

    @property
    def size(self) -> int:
        """The bytes this push costs an exporter that keeps it: payload and context text."""
        return len(self.payload) + self.context.text_bytes


@dataclass(frozen=True, slots=True)
class ForwardedBatch:
    """A trusted forwarder's batch of pushes, as its sender numbered it.

    ``forwarder`` names the sender and its incarnation (``<principal>/<forwarder id>``: no other
    sender shares it); its pushes are numbered in the order it queued them, and it sends its batches
    one at a time, in that order, each resent until answered, so that every batch it sends holds pushes
    all after those of every batch already stored, or is (part of) one sent before. So a batch is
    already stored exactly when a batch whose ``last`` push is at least this one's is. ``resend``: some
    push of it was sent before (the earlier attempt may have landed, here or at another replica).
    """

    forwarder: str
    last: int
    resend: bool = False


class Exporter(ABC):
    """Receives accepted pushes; ``export`` completes only once the push is durable."""

    name: str = "exporter"

    async def start(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Prepare (open connections, create tables); called once before the first export."""

    @abstractmethod
    async def export(self, push: TelemetryPush) -> ExportResult:
        """Store ``push``; return only when it is durable (or has failed)."""

    async def export_batch(
        self, pushes: Sequence[TelemetryPush], batch: ForwardedBatch
    ) -> list[ExportResult]:
        """Store a forwarded ``batch``'s pushes; their results in order. This default exports each
        push alone, concurrently, and never answers DUPLICATE."""
        return list(await asyncio.gather(*(self.export(push) for push in pushes)))

    async def force_flush(self) -> bool:
        """Make everything accepted so far durable now; False if that failed."""
        return True

    async def shutdown(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Flush and release resources; called once. Later exports answer RETRYABLE."""

    def health(self) -> Health:
        return Health(True)
