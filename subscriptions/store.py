"""The subscription store: name -> subscription, with Kafka's update version counter (docs/rules.md TEL-5).

Every update with a non-empty property set replaces the subscription and bumps ``version`` (even when
nothing changed); an update with an empty property set deletes an existing subscription (bumping the
version) and is a no-op for an unknown name; a failed validation changes nothing. Client instances
compare their version with the store's to know when to re-resolve (TEL-13).

The store saves to and loads from YAML with an atomic file replace. Its durable, replicated form (the
config log) belongs to the front end.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from subscriptions.config import ClientMetricsConfig
from subscriptions.errors import SubscriptionError
from subscriptions.model import PropertyValue, Subscription
from subscriptions.patterns import DEFAULT_MAX_PATTERN_LENGTH

__all__ = ["StoreFileError", "SubscriptionStore"]

_FORMAT_VERSION = 1


class StoreFileError(ValueError):
    """A subscriptions YAML file that cannot be read as one."""


class SubscriptionStore:
    """Subscriptions by name plus a monotonically increasing update version."""

    def __init__(self, *, max_pattern_length: int = DEFAULT_MAX_PATTERN_LENGTH) -> None:
        self._subscriptions: dict[str, Subscription] = {}
        self._by_name: tuple[Subscription, ...] = ()
        self._version = 0
        self._max_pattern_length = max_pattern_length

    @classmethod
    def for_config(cls, config: ClientMetricsConfig) -> SubscriptionStore:
        """An empty store with the limits of ``config`` (``client.metrics.match.pattern.max.length``)."""
        return cls(max_pattern_length=config.match_pattern_max_length)

    @property
    def version(self) -> int:
        return self._version

    def __len__(self) -> int:
        return len(self._subscriptions)

    def get(self, name: str) -> Subscription | None:
        return self._subscriptions.get(name)

    def names(self) -> list[str]:
        """Subscription names, ascending (ListClientMetricsResources)."""
        return [s.name for s in self._by_name]

    def by_name(self) -> tuple[Subscription, ...]:
        """All subscriptions in ascending name order, the order resolution visits them (PD-3)."""
        return self._by_name

    def validate(self, name: str | None, properties: Mapping[str, PropertyValue]) -> Subscription:
        """Validate without storing (Kafka's validate-only alter); raise SubscriptionError."""
        return Subscription.from_properties(name, properties, max_pattern_length=self._max_pattern_length)

    def update(self, name: str | None, properties: Mapping[str, PropertyValue]) -> int:
        """Apply the complete property set of ``name``; return the store version afterwards."""
        if not properties and name:
            if name in self._subscriptions:
                del self._subscriptions[name]
                self._changed()
            return self._version
        subscription = self.validate(name, properties)
        self._subscriptions[subscription.name] = subscription
        self._changed()
        return self._version

    def delete(self, name: str) -> int:
        """Delete every key of ``name`` (same as an empty update)."""
        return self.update(name, {})

    def _changed(self) -> None:
        self._version += 1
        # Java's String.compareTo order (UTF-16 code units), so every replica visits the same order
        names = sorted(self._subscriptions, key=lambda n: n.encode("utf-16-be", "surrogatepass"))
        self._by_name = tuple(self._subscriptions[n] for n in names)

    # -- YAML -------------------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        return {
            "format": _FORMAT_VERSION,
            "version": self._version,
            "subscriptions": {s.name: dict(s.properties) for s in self._by_name},
        }

    def save_yaml(self, path: str | os.PathLike[str]) -> None:
        """Write the store to ``path`` atomically (temp file in the same folder, fsync, rename)."""
        target = Path(path)
        text = yaml.safe_dump(self.to_document(), sort_keys=False, default_flow_style=False)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @classmethod
    def load_yaml(
        cls,
        path: str | os.PathLike[str],
        *,
        max_pattern_length: int = DEFAULT_MAX_PATTERN_LENGTH,
    ) -> SubscriptionStore:
        """Read a store saved by ``save_yaml`` (or written by hand); every entry is validated.

        Raises StoreFileError for a malformed file or an invalid subscription (with Kafka's
        message and the subscription's name).
        """
        try:
            document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise StoreFileError(f"{path}: not valid YAML: {exc}") from exc
        document = {} if document is None else document
        if not isinstance(document, dict):
            raise StoreFileError(f"{path}: expected a mapping at the top level")
        entries = document.get("subscriptions") or {}
        version = document.get("version", 0)
        if not isinstance(entries, dict) or not isinstance(version, int) or version < 0:
            raise StoreFileError(
                f"{path}: 'subscriptions' must map names to properties and 'version' be an int >= 0"
            )
        store = cls(max_pattern_length=max_pattern_length)
        for name, properties in entries.items():
            if not isinstance(properties, dict):
                raise StoreFileError(f"{path}: subscription {name!r} must be a mapping of properties")
            try:
                subscription = store.validate(str(name), properties)
            except SubscriptionError as exc:
                detail = f" ({exc.detail})" if exc.detail else ""
                raise StoreFileError(f"{path}: subscription {name!r}: {exc.message}{detail}") from exc
            store._subscriptions[subscription.name] = subscription
        store._changed()
        store._version = max(version, store._version)
        return store
