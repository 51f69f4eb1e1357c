"""Client instance ids as the sink prints and stores them: Kafka's ``Uuid.toString()`` (22 characters
of base64url without padding), never the hex UUID form."""

from __future__ import annotations

import re
from typing import Final

from ingest.wire import parse_instance_id
from subscriptions import kafka_uuid_string

__all__ = ["is_kafka_uuid_string"]

_KAFKA_FORM: Final = re.compile(r"[A-Za-z0-9_-]{22}")


def is_kafka_uuid_string(text: object) -> bool:
    """True if ``text`` is a client instance id in Kafka's form, exactly as Kafka writes it."""
    if not isinstance(text, str) or not _KAFKA_FORM.fullmatch(text):
        return False
    instance_id = parse_instance_id(text)
    return instance_id is not None and kafka_uuid_string(instance_id) == text
