"""A trusted forwarder's numbering of its batches, so that a batch it sends again lands once.

The header ``x-telemetry-sink-forwarded-batch: forwarder=<id>; pushes=<first>-<last>; attempt=<n>``
(HTTP header or gRPC metadata) says who numbers the batch (``id``: the forwarder's incarnation, 1 to
128 letters, digits, ``.``, ``_``, ``:`` or ``-``; the broker plugin draws one each time it starts), the
numbers of its first and last pushes (0 <= first <= last < 2**63) and how many times some push of it
was sent before (0: never). The forwarder's contract (``exporters.ForwardedBatch``): it numbers pushes
in the order it queues them and sends one batch at a time, in order, resending a batch whole (or a part
of it) until it is answered.

Only a sender in ``security.trusted_forwarders`` is numbered this way (the batch is recorded under its
principal and the id: ``<principal>/<id>``, so no sender can speak for another's batches); anyone
else's header is ignored and its pushes land as sent. A trusted forwarder's malformed header is refused
INVALID_REQUEST. Each client's row of a numbered batch gets a push id that every resend of the batch
shares (``forwarded_push_id``), so even a copy that slipped through (``exporters.delta.landing``: the
one window left) is recognisable by ``push_id``.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

from exporters import ForwardedBatch

__all__ = ["forwarded_batch", "forwarded_push_id"]

_HEADER: Final = re.compile(
    r"\s*forwarder=([A-Za-z0-9._:-]{1,128})\s*;\s*pushes=([0-9]{1,19})-([0-9]{1,19})\s*;"
    r"\s*attempt=([0-9]{1,9})\s*"
)
_PUSH_IDS: Final = uuid.UUID("5d0c3f8e-6a4b-4f0e-9d57-3c1f2a7b9e41")
"""The namespace of forwarded push ids (a UUIDv5 namespace drawn once for this purpose)."""


def forwarded_batch(header: str, principal: str) -> ForwardedBatch:
    """The batch a trusted forwarder (``principal``) numbered in ``header``; ValueError, saying why,
    when the header is malformed."""
    match = _HEADER.fullmatch(header)
    if match is None:
        raise ValueError(
            "x-telemetry-sink-forwarded-batch must be 'forwarder=<id>; pushes=<first>-<last>; "
            "attempt=<n>' (id: 1-128 of letters, digits, '.', '_', ':', '-')"
        )
    forwarder, first, last, attempt = match.groups()
    if int(last) >= 2**63 or int(first) > int(last):
        raise ValueError(f"x-telemetry-sink-forwarded-batch: pushes {first}-{last} is not a range of int64")
    return ForwardedBatch(f"{principal}/{forwarder}", int(last), resend=int(attempt) > 0)


def forwarded_push_id(batch: ForwardedBatch, client_instance_id: uuid.UUID) -> str:
    """The push id of a client's row in a numbered batch: the same for every attempt of the batch."""
    return uuid.uuid5(_PUSH_IDS, f"{batch.forwarder}/{batch.last}/{client_instance_id}").hex
