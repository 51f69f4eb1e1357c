"""Dynamic broker configs: the connection quotas the config log sets at run time on every replica, as
Kafka's dynamic broker configs set a broker's ``ConnectionQuotas`` (the admin side is
``broker_configs``).

The keys are Kafka's: ``max.connections``, ``max.connections.per.ip``,
``max.connections.per.ip.overrides`` (``ip:count,...``), ``max.connection.creation.rate``, and per
listener ``listener.name.<listener>.max.connections`` and ``.max.connection.creation.rate`` (the
listeners are ``kafka`` and ``http``). A raised limit wakes the connections waiting at the gate at
once, a lowered one applies to the next connection (open ones are not closed). Removing a key restores
the sink's configured (static) value.

A quota callback that is a ``ReconfigurableQuotaCallback`` adds its own keys (KF3-K4), as Kafka's
``DynamicClientQuotaCallback`` does: a change of them is validated by the callback
(``validate_reconfiguration``, with the configs it would give: what its ``configure`` got, the dynamic
values over it) and refused with the broker's words when it raises ``ValueError``; once in force on a
replica the callback's ``reconfigure`` gets those configs (Kafka's ``maybeReconfigure``: only when one
of its keys changed). Removing one restores the value ``configure`` got, or none.

``DynamicBrokerConfigs`` holds the keys the log set; it is bound to this replica's ``ConnectionQuotas``
and quota callback once its listeners are registered (``bind``), which is when the static values are
known: records applied before then (the log's replay at start) take effect at the bind.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final, NamedTuple

from quotas import ConnectionQuotas, ReconfigurableQuotaCallback
from quotas.config import parse_per_ip_overrides
from quotas.java import INT_MAX

__all__ = ["BROKER_CONFIG_KEYS", "BrokerConfigChange", "DynamicBrokerConfigs"]

MAX_CONNECTIONS: Final = "max.connections"
MAX_CONNECTIONS_PER_IP: Final = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES: Final = "max.connections.per.ip.overrides"
MAX_CONNECTION_CREATION_RATE: Final = "max.connection.creation.rate"
BROKER_CONFIG_KEYS: Final = (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    MAX_CONNECTIONS_PER_IP_OVERRIDES,
    MAX_CONNECTION_CREATION_RATE,
)
_LISTENER_KEYS: Final = (MAX_CONNECTIONS, MAX_CONNECTION_CREATION_RATE)

_DOCUMENTATION: Final = {
    MAX_CONNECTIONS: "The most connections the sink holds open at once, over all its listeners; a "
    "listener's own limit is listener.name.<listener>.max.connections (listeners: kafka, http).",
    MAX_CONNECTIONS_PER_IP: "The most connections the sink holds open from one IP address, unless "
    "max.connections.per.ip.overrides names that address.",
    MAX_CONNECTIONS_PER_IP_OVERRIDES: "Per-address exceptions to max.connections.per.ip, as "
    "address:count pairs separated by commas, e.g. 10.0.0.1:200,10.0.0.2:0.",
    MAX_CONNECTION_CREATION_RATE: "The most new connections a second the sink accepts over all its "
    "listeners; a listener's own rate is listener.name.<listener>.max.connection.creation.rate.",
}
"""What DescribeConfigs says of each key when asked for documentation: the sink's own words, where a
broker's describe its listeners (an inter-broker one among them) (docs/kafka-oracle.md)."""

log = logging.getLogger(__name__)


class BrokerConfigChange(NamedTuple):
    """``key`` is now ``value`` (None: removed, the static value again)."""

    key: str
    value: str | None


def _listener_key(key: str) -> tuple[str, str] | None:
    """(listener, key) of a ``listener.name.<listener>.<key>`` key."""
    if not key.startswith("listener.name."):
        return None
    listener, _, rest = key.removeprefix("listener.name.").partition(".")
    return (listener, rest) if rest in _LISTENER_KEYS and listener else None


class DynamicBrokerConfigs:
    """The broker configs the config log set, and the replica's connection quotas they apply to."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._connections: ConnectionQuotas | None = None
        self._static: dict[str, int | dict[str, int]] = {}
        self._callback: ReconfigurableQuotaCallback | None = None
        self._callback_configs: dict[str, object] = {}
        self._callback_keys: tuple[str, ...] = ()

    def bind(
        self,
        connections: ConnectionQuotas,
        callback: object = None,
        callback_configs: Mapping[str, object] | None = None,
    ) -> None:
        """Apply to ``connections`` and, when it is a ``ReconfigurableQuotaCallback``, to the quota
        ``callback`` (configured with ``callback_configs``) from now on; their values now are the static
        ones."""
        self._connections = connections
        self._static = connections.limits()
        if isinstance(callback, ReconfigurableQuotaCallback):
            self._callback = callback
            self._callback_configs = dict(callback_configs or {})
            own = set(self.keys)
            self._callback_keys = tuple(sorted(k for k in callback.reconfigurable_configs() if k not in own))
        self._apply()
        if any(key in self.values for key in self._callback_keys):
            self._reconfigure()

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this replica can change: the broker-wide ones, its listeners', then the quota
        callback's."""
        listeners = [k for k in self._static if _listener_key(k) is not None]
        return (*BROKER_CONFIG_KEYS, *listeners, *self._callback_keys)

    def set(self, change: BrokerConfigChange) -> None:
        if change.value is None:
            self.values.pop(change.key, None)
        else:
            self.values[change.key] = change.value
        self._apply()
        if change.key in self._callback_keys:
            self._reconfigure()

    def effective(self) -> dict[str, str]:
        """Each key's value in force, as Kafka writes it (a callback's key only when it has one)."""
        values = {key: self.values.get(key, _text(self._static.get(key, INT_MAX))) for key in self.keys}
        for key in self._callback_keys:
            if key not in self.values:
                static = self._callback_configs.get(key)
                if static is None:
                    del values[key]
                else:
                    values[key] = str(static)
        return values

    @property
    def callback_keys(self) -> tuple[str, ...]:
        """The quota callback's own keys (none unless it is reconfigurable)."""
        return self._callback_keys

    def documentation(self, key: str) -> str | None:
        """What ``key`` sets, for DescribeConfigs' ``include_documentation``; None for a key of the
        quota callback, whose meaning is the callback's."""
        parts = _listener_key(key)
        if parts is not None:
            return f"{parts[1]} for the {parts[0]} listener alone (see {parts[1]})."
        return _DOCUMENTATION.get(key)

    def problem(self, changes: Mapping[str, str | None]) -> str | None:
        """Why ``changes`` (each key's new value; None removes it) cannot be made, in the broker's words
        (it answers INVALID_REQUEST), or None."""
        for key, value in changes.items():
            if (problem := self._key_problem(key, value)) is not None:
                return problem
        callback = self._callback
        if callback is None or not any(key in changes for key in self._callback_keys):
            return None
        try:
            callback.validate_reconfiguration(self._callback_view(changes))
        except ValueError as exc:  # Kafka's ConfigException, wrapped as DynamicBrokerConfig wraps it
            return (
                f"Invalid value org.apache.kafka.common.config.ConfigException: {exc} for configuration "
                "Invalid dynamic configuration"
            )
        except Exception:
            log.exception("the quota callback's validate_reconfiguration failed")
            changed = sorted(key for key in changes if key in self._callback_keys)
            return (
                f"Validation of dynamic config update of [{', '.join(changed)}] failed with class "
                f"{type(callback).__qualname__}"
            )
        return None

    def _key_problem(self, key: str, value: str | None) -> str | None:
        if key not in self.keys:
            return f"Cannot update these configs dynamically: {key} (the sink's are {', '.join(self.keys)})"
        if value is None or key in self._callback_keys:
            return None
        if key == MAX_CONNECTIONS_PER_IP_OVERRIDES:
            counts = [item.rpartition(":")[2].strip() for item in value.split(",") if ":" in item]
            if (bad := next((c for c in counts if not c.lstrip("-").isdigit()), None)) is not None:
                return f'For input string: "{bad}"'  # Java's Integer.parseInt, as the broker answers
            try:
                overrides = parse_per_ip_overrides(value)
            except ValueError as exc:
                return f"Invalid value {value} for configuration {key}: {exc}"
            if any(not 0 <= n <= INT_MAX for n in overrides.values()):
                return (
                    f"Invalid value {value} for configuration {key}: counts must be between 0 and {INT_MAX}"
                )
            return None
        try:
            number = int(value.strip())
        except ValueError:
            return f"Invalid value {value} for configuration {key}: Not a number of type INT"
        if not 0 <= number <= INT_MAX:
            return f"Invalid value {value} for configuration {key}: Value must be at least 0"
        if number == 0 and key.endswith(MAX_CONNECTION_CREATION_RATE):  # the broker's dynamic check
            return (
                "Invalid value org.apache.kafka.common.config.ConfigException: Invalid "
                f"{MAX_CONNECTION_CREATION_RATE} 0 for configuration Invalid dynamic configuration"
            )
        return None

    def _apply(self) -> None:
        connections = self._connections
        if connections is None:
            return
        limit = self._limit
        connections.update_max_connections(limit(MAX_CONNECTIONS))
        overrides = self.values.get(MAX_CONNECTIONS_PER_IP_OVERRIDES)
        static = self._static.get(MAX_CONNECTIONS_PER_IP_OVERRIDES)
        connections.update_max_connections_per_ip(
            limit(MAX_CONNECTIONS_PER_IP),
            parse_per_ip_overrides(overrides)
            if overrides is not None
            else (dict(static) if isinstance(static, Mapping) else {}),
        )
        connections.update_broker_max_connection_rate(limit(MAX_CONNECTION_CREATION_RATE))
        for key in self.keys:
            parts = _listener_key(key)
            if parts is not None and parts[1] == MAX_CONNECTIONS:
                prefix = f"listener.name.{parts[0]}."
                name = next(n for n in connections.listener_names if n.lower() == parts[0])
                connections.update_listener(
                    name,
                    max_connections=limit(prefix + MAX_CONNECTIONS),
                    max_connection_creation_rate=limit(prefix + MAX_CONNECTION_CREATION_RATE),
                )

    def _callback_view(self, changes: Mapping[str, str | None] | None = None) -> dict[str, object]:
        """The quota callback's configs with ``changes`` made: what ``configure`` got, the dynamic
        values of its keys over it."""
        dynamic: dict[str, str | None] = {k: v for k, v in self.values.items() if k in self._callback_keys}
        dynamic.update({k: v for k, v in (changes or {}).items() if k in self._callback_keys})
        view = dict(self._callback_configs)
        for key, value in dynamic.items():
            if value is not None:
                view[key] = value
            elif key in self._callback_configs:
                view[key] = self._callback_configs[key]
            else:
                view.pop(key, None)
        return view

    def _reconfigure(self) -> None:
        callback = self._callback
        if callback is None:
            return
        try:
            callback.reconfigure(self._callback_view())
        except Exception:  # a change every replica applies must not stop this one's config log
            log.exception("the quota callback's reconfigure failed; its previous configs stay")

    def _limit(self, key: str) -> int:
        if key in self.values:
            return int(self.values[key].strip())
        static = self._static.get(key, INT_MAX)
        return static if isinstance(static, int) else INT_MAX


def _text(value: int | dict[str, int]) -> str:
    if isinstance(value, dict):
        return ",".join(f"{ip}:{n}" for ip, n in value.items())
    return str(value)
