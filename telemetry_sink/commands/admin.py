"""``telemetry-sink admin``: a thin command-line client of the admin HTTP API (``ingest.admin.http_api``).

Named as a Kafka operator expects (``kafka-client-metrics.sh``, ``kafka-configs.sh``)::

    telemetry-sink admin [--config FILE] [--url URL] [--token TOKEN] [--cacert FILE]
                         [--cert FILE [--key FILE]] [--timeout S] [--json] COMMAND
      subscriptions list | describe NAME | delete NAME
      subscriptions alter NAME [--metrics a,b] [--interval MS] [--match k=regex,...]
                               [--delete-config KEY,...] [--validate-only]
      quotas describe [--user U | --user-default] [--client-id C | --client-id-default]
                      [--ip IP | --ip-default] [--strict]
      quotas alter    (entity flags as above) [--add-config k=v,...] [--delete-config k,...] [--validate-only]
      instances list [--limit N] | describe ID
      log [--since OFFSET]

- The credential is a bearer token, from ``--token`` or ``TELEMETRY_SINK_ADMIN_TOKEN`` (prefer the
  environment: a command line is visible to every user of the host); it is never printed. TLS: the
  server is verified against ``--cacert`` (else the system's CAs), ``--cert``/``--key`` present a
  client certificate (mTLS; the principal is then its subject).
- ``subscriptions alter`` is Kafka's IncrementalAlterConfigs (``PATCH``): it sets the given keys,
  deletes those named by ``--delete-config``, keeps the rest, and creates the subscription when new.
- Output: a table or a few lines per answer; ``--json`` prints the answer's JSON instead. A throttle
  (``throttle_time_ms``, ``Retry-After``) is reported on stderr.
- Exit status (``EXIT_*``): 0 when the answer's error is NONE (for ``quotas alter``, every entry's);
  1 when the sink answered an error, each printed on stderr as ``error: <NAME>: <message>``; 2 for a
  usage error or when no admin API answered (unreachable, not JSON), as one line on stderr.
- A change that lost a config-log race (HTTP 409, NOT_CONTROLLER: another change was written since
  the replica read the state this one was prepared from) was not written: the error names both
  offsets and a last line says to run the command again (exit 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import ssl
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

import httpx

from ingest.config import ServerConfig, SinkConfig, SinkConfigError
from ingest.errors import error_name
from ingest.wire import ADMIN_PREFIX, CLIENT_ID_HEADER
from quotas import DEFAULT
from quotas.entities import CLIENT_ID_TAG, ENTITY_FIELDS, IP_TAG, MATCH_DEFAULT, MATCH_EXACT, USER_TAG
from subscriptions.model import CONFIG_KEYS, INTERVAL_MS_CONFIG, MATCH_CONFIG, METRICS_CONFIG

__all__ = [
    "ADMIN_CLIENT_ID",
    "DEFAULT_URL",
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_USAGE",
    "TOKEN_ENV",
    "add_arguments",
    "run_admin",
]

DEFAULT_URL: Final = f"http://localhost:{ServerConfig().http_port}"
TOKEN_ENV: Final = "TELEMETRY_SINK_ADMIN_TOKEN"
ADMIN_CLIENT_ID: Final = "telemetry-sink-admin"
"""Sent as the Kafka client id: with the principal, it names the mutation quota's entity (KIP-599)."""
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_INSTANCE_LIMIT: Final = 1000
EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2

_PROG: Final = "telemetry-sink admin"
_NONE: Final = "NONE"

Answer = dict[str, Any]
Render = Callable[[Answer], list[str]]


class _UsageError(Exception):
    """A mistake in the command line that argparse cannot see: one line on stderr, exit 2."""


@dataclass(frozen=True)
class _Call:
    """One admin API request and how its answer is shown."""

    method: str
    path: str
    render: Render
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None


# -- argument types -------------------------------------------------------------------------------


def _csv(text: str) -> list[str]:
    """``a,b`` -> ``["a", "b"]``; empty items are dropped (so ``""`` is the empty list)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _subscription_keys(text: str) -> list[str]:
    keys = _csv(text)
    unknown = [k for k in keys if k not in CONFIG_KEYS]
    if unknown:
        raise argparse.ArgumentTypeError(f"subscription keys are {', '.join(CONFIG_KEYS)}, got {text!r}")
    return keys


def _number(key: str, text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"quota {key!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"quota {key!r}: {text!r} is not a finite number")
    return value


def _quota_values(text: str) -> list[tuple[str, int | float]]:
    """``k=v,k2=v2`` (kafka-configs.sh ``--add-config``) -> ``[(k, v), (k2, v2)]``."""
    pairs = []
    for item in _csv(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE,..., got {text!r}")
        pairs.append((key.strip(), _number(key.strip(), value.strip())))
    return pairs


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


# -- the parser -----------------------------------------------------------------------------------


def add_arguments(name: str, admin: argparse.ArgumentParser) -> None:
    """Declare ``admin`` and its commands on ``admin``; ``run_admin`` runs what it parsed."""
    admin.description = (
        "A client of the sink's admin HTTP API, named like kafka-client-metrics.sh and "
        "kafka-configs.sh. Needs a super user's credential: a bearer token (--token or "
        f"{TOKEN_ENV}) or a client certificate. Exits 0 on success, 1 when the sink answered an "
        "error, 2 on a usage error or when the sink cannot be reached."
    )
    admin.add_argument(
        "--url",
        help="the sink's HTTP listener, URL or HOST:PORT (default: localhost at --config's "
        f"server.http_port, https with its server.tls_cert_file; without --config {DEFAULT_URL})",
    )
    admin.add_argument(
        "--token", help=f"bearer token of a super user (default: ${TOKEN_ENV}, which is safer: not in `ps`)"
    )
    admin.add_argument(
        "--cacert", metavar="FILE", help="verify the sink's certificate against these CAs (PEM)"
    )
    admin.add_argument("--cert", metavar="FILE", help="client certificate for mTLS (PEM)")
    admin.add_argument("--key", metavar="FILE", help="the client certificate's private key (PEM)")
    admin.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to connect and to wait for the answer (default: {DEFAULT_TIMEOUT_S:g})",
    )
    admin.add_argument("--json", action="store_true", help="print the sink's JSON answer instead of a table")
    resources = admin.add_subparsers(dest="admin_resource", metavar="COMMAND", required=True)
    _add_subscriptions(resources)
    _add_quotas(resources)
    _add_instances(resources)
    log = resources.add_parser(
        "log", help="the config log: every change with its offset, principal and replica"
    )
    log.add_argument(
        "--since",
        type=int,
        default=-1,
        metavar="OFFSET",
        help="only changes after this offset (default: all)",
    )
    log.set_defaults(admin_call=_log)
    admin.set_defaults(run=run_admin)


def _add_subscriptions(resources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    subscriptions = resources.add_parser(
        "subscriptions", help="client metrics subscriptions (kafka-client-metrics.sh)"
    )
    actions = subscriptions.add_subparsers(dest="admin_action", metavar="ACTION", required=True)
    actions.add_parser("list", help="every subscription with its configs").set_defaults(
        admin_call=_list_subscriptions
    )
    describe = actions.add_parser("describe", help="one subscription's configs")
    describe.add_argument("name", metavar="NAME")
    describe.set_defaults(admin_call=_describe_subscription)
    alter = actions.add_parser(
        "alter",
        help="set or delete configs of a subscription, creating it when new",
        description="Kafka's IncrementalAlterConfigs: set the given configs, delete those named by "
        "--delete-config, keep the others; a new name creates the subscription. A subscription left "
        "with no config is deleted.",
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument(
        "--metrics",
        type=_csv,
        action="extend",
        metavar="PREFIX,...",
        help='metric name prefixes ("*": all, "": none); repeatable',
    )
    alter.add_argument("--interval", type=int, metavar="MS", help="push interval (interval.ms)")
    alter.add_argument(
        "--match",
        type=_csv,
        action="extend",
        metavar="ATTR=REGEX,...",
        help="client matching patterns, e.g. client_software_name=librdkafka; repeatable",
    )
    alter.add_argument(
        "--delete-config",
        type=_subscription_keys,
        action="extend",
        metavar="KEY,...",
        help=f"configs to delete ({', '.join(CONFIG_KEYS)})",
    )
    alter.add_argument("--validate-only", action="store_true", help="check the change, write nothing")
    alter.set_defaults(admin_call=_alter_subscription)
    delete = actions.add_parser("delete", help="delete a subscription")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(admin_call=_delete_subscription)


def _add_entity_flags(parser: argparse.ArgumentParser) -> None:
    """kafka-configs.sh's entity shorthands: a name, or the default entity, per entity type."""
    for kind, aliases in ((USER_TAG, ()), (CLIENT_ID_TAG, ("--client",)), (IP_TAG, ())):
        dest = ENTITY_FIELDS[kind]
        group = parser.add_mutually_exclusive_group()
        metavar = kind.upper().replace("-", "_")
        group.add_argument(f"--{kind}", *aliases, dest=dest, metavar=metavar, help=f"the {kind} {metavar}")
        group.add_argument(
            f"--{kind}-default",
            f"--{kind.split('-')[0]}-defaults",
            dest=f"{dest}_default",
            action="store_true",
            help=f"the default {kind} entity",
        )


def _add_quotas(resources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quotas = resources.add_parser(
        "quotas", help="client quotas (kafka-configs.sh --entity-type users|clients|ips)"
    )
    actions = quotas.add_subparsers(dest="admin_action", metavar="ACTION", required=True)
    describe = actions.add_parser(
        "describe",
        help="the configured quotas of the entities matching the filter (DescribeClientQuotas)",
        description="Without entity flags, every configured quota. Each flag narrows the match to "
        "entities with that part; --strict also leaves out entities with parts not named.",
    )
    _add_entity_flags(describe)
    describe.add_argument("--strict", action="store_true", help="only entities with exactly the named parts")
    describe.set_defaults(admin_call=_describe_quotas)
    alter = actions.add_parser("alter", help="set or remove quotas of one entity (AlterClientQuotas)")
    _add_entity_flags(alter)
    alter.add_argument(
        "--add-config",
        type=_quota_values,
        action="extend",
        metavar="KEY=VALUE,...",
        help="e.g. producer_byte_rate=1048576,request_percentage=50; repeatable",
    )
    alter.add_argument(
        "--delete-config", type=_csv, action="extend", metavar="KEY,...", help="quotas to remove; repeatable"
    )
    alter.add_argument("--validate-only", action="store_true", help="check the change, write nothing")
    alter.set_defaults(admin_call=_alter_quotas)


def _add_instances(resources: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    instances = resources.add_parser("instances", help="client instances this replica knows (KIP-714)")
    actions = instances.add_subparsers(dest="admin_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="client instances with their subscriptions and last push")
    listing.add_argument(
        "--limit",
        type=_non_negative,
        default=DEFAULT_INSTANCE_LIMIT,
        metavar="N",
        help=f"at most N (default: {DEFAULT_INSTANCE_LIMIT})",
    )
    listing.set_defaults(admin_call=_list_instances)
    describe = actions.add_parser("describe", help="one client instance")
    describe.add_argument(
        "instance_id",
        metavar="ID",
        help="Kafka's 22-character form (as listed; put -- before one starting with -) or a hex UUID",
    )
    describe.set_defaults(admin_call=_describe_instance)


# -- requests -------------------------------------------------------------------------------------


def _subscription_path(name: str) -> str:
    return f"/subscriptions/{quote(name, safe='')}"


def _list_subscriptions(args: argparse.Namespace) -> _Call:
    return _Call("GET", "/subscriptions", _render_subscriptions)


def _describe_subscription(args: argparse.Namespace) -> _Call:
    return _Call("GET", _subscription_path(args.name), _render_subscription)


def _alter_subscription(args: argparse.Namespace) -> _Call:
    changes: dict[str, Any] = {}
    if args.metrics is not None:
        changes[METRICS_CONFIG] = args.metrics
    if args.interval is not None:
        changes[INTERVAL_MS_CONFIG] = args.interval
    if args.match is not None:
        changes[MATCH_CONFIG] = args.match
    for key in args.delete_config or []:
        if key in changes:
            raise _UsageError(f"subscriptions alter: {key} is both set and deleted")
        changes[key] = None
    if not changes:
        raise _UsageError(
            "subscriptions alter: nothing to change (--metrics, --interval, --match, --delete-config)"
        )
    name, validate_only = args.name, args.validate_only
    return _Call(
        "PATCH",
        _subscription_path(name),
        lambda answer: [_changed("Altered", name, answer, validate_only)],
        params=_validate_only(validate_only),
        body=changes,
    )


def _delete_subscription(args: argparse.Namespace) -> _Call:
    name = args.name
    return _Call("DELETE", _subscription_path(name), lambda answer: [_changed("Deleted", name, answer)])


def _validate_only(flag: bool) -> dict[str, str]:
    return {"validate_only": "true"} if flag else {}


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The entity the flags name: (entity type, name or None for the default), in Kafka's order."""
    parts: list[tuple[str, str | None]] = []
    for kind, dest in ENTITY_FIELDS.items():
        if getattr(args, f"{dest}_default"):
            parts.append((kind, None))
        elif getattr(args, dest) is not None:
            parts.append((kind, getattr(args, dest)))
    return parts


def _describe_quotas(args: argparse.Namespace) -> _Call:
    components = [
        {"entity_type": kind, "match_type": MATCH_DEFAULT}
        if name is None
        else {"entity_type": kind, "match_type": MATCH_EXACT, "match": name}
        for kind, name in _entity(args)
    ]
    body = {"components": components, "strict": args.strict}
    return _Call("POST", "/client-quotas/describe", _render_quotas, body=body)


def _alter_quotas(args: argparse.Namespace) -> _Call:
    entity = _entity(args)
    if not entity:
        raise _UsageError("quotas alter: name an entity (--user, --client-id, --ip or their -default forms)")
    ops: list[dict[str, Any]] = [{"key": k, "value": v} for k, v in args.add_config or []]
    ops += [{"key": k, "remove": True} for k in args.delete_config or []]
    if not ops:
        raise _UsageError("quotas alter: nothing to change (--add-config, --delete-config)")
    entry = {"entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity], "ops": ops}
    validate_only = args.validate_only
    body = {"entries": [entry], "validate_only": validate_only}
    return _Call(
        "POST",
        "/client-quotas/alter",
        lambda answer: _render_altered_quotas(answer, validate_only),
        body=body,
    )


def _list_instances(args: argparse.Namespace) -> _Call:
    return _Call("GET", "/client-instances", _render_instances, params={"limit": str(args.limit)})


def _describe_instance(args: argparse.Namespace) -> _Call:
    path = f"/client-instances/{quote(args.instance_id, safe='')}"
    return _Call("GET", path, lambda answer: _fields(answer.get("instance") or {}))


def _log(args: argparse.Namespace) -> _Call:
    return _Call("GET", "/config-log", _render_log, params={"since": str(args.since)})


# -- rendering ------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """A JSON value as an operator reads it: lists comma separated, whole floats without ``.0``."""
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _when(ms: Any) -> str:
    """Epoch milliseconds as UTC ISO 8601; ``-`` for never (null, or a negative "never" sentinel)."""
    if not isinstance(ms, int) or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def _fields(values: Answer) -> list[str]:
    width = max((len(k) for k in values), default=0)
    return [f"{key.ljust(width)}  {_text(value)}" for key, value in values.items()]


def _render_subscriptions(answer: Answer) -> list[str]:
    subscriptions: dict[str, Answer] = answer.get("subscriptions") or {}
    rows = [
        [name, *(_text(properties.get(key)) for key in (METRICS_CONFIG, INTERVAL_MS_CONFIG, MATCH_CONFIG))]
        for name, properties in sorted(subscriptions.items())
    ]
    return _table(["NAME", "METRICS", "INTERVAL_MS", "MATCH"], rows)


def _render_subscription(answer: Answer) -> list[str]:
    name, properties = answer.get("name"), answer.get("properties") or {}
    if not properties:  # Kafka's words for a name with no config
        return [f"The client metric resource {name} doesn't exist and doesn't have dynamic config."]
    return [f"Client metrics configs for {name} are:"] + [
        f"  {key}={_text(value)}" for key, value in sorted(properties.items())
    ]


def _changed(verb: str, name: str, answer: Answer, validate_only: bool = False) -> str:
    if validate_only:
        return f"Validated client metrics config for {name} (nothing written)."
    return f"{verb} client metrics config for {name} (config log offset {_text(answer.get('offset'))})."


def _entity_text(parts: Sequence[Answer]) -> str:
    return ", ".join(f"{p.get('entity_type')}={_entity_name(p)}" for p in parts) or "-"


def _entity_name(part: Answer) -> str:
    name = part.get("entity_name")
    return DEFAULT if name is None else str(name)


def _render_quotas(answer: Answer) -> list[str]:
    rows = []
    for entry in answer.get("entries") or []:
        names = {p.get("entity_type"): _entity_name(p) for p in entry.get("entity", [])}
        entity = [names.get(kind, "-") for kind in ENTITY_FIELDS]
        rows += [[*entity, value.get("key"), _text(value.get("value"))] for value in entry.get("values", [])]
    return _table(["USER", "CLIENT_ID", "IP", "KEY", "VALUE"], rows)


def _render_altered_quotas(answer: Answer, validate_only: bool) -> list[str]:
    verb, note = ("Validated", " (nothing written)") if validate_only else ("Altered", "")
    return [
        f"{verb} quotas of {_entity_text(entry.get('entity', []))}{note}."
        for entry in answer.get("entries") or []
        if entry.get("error") == _NONE
    ]


def _render_instances(answer: Answer) -> list[str]:
    rows = [
        [
            _text(i.get("client_instance_id")),
            _text(i.get("client_id")),
            _text(i.get("principal")),
            "/".join(
                _text(v) for v in (i.get("client_software_name"), i.get("client_software_version")) if v
            ),
            _text(i.get("subscriptions")),
            _text(i.get("push_interval_ms")),
            _when(i.get("last_push_ms")),
            _text(i.get("last_error")),
        ]
        for i in answer.get("instances") or []
    ]
    headers = ["CLIENT_INSTANCE_ID", "CLIENT_ID", "PRINCIPAL", "SOFTWARE", "SUBSCRIPTIONS", "INTERVAL_MS"]
    return _table([*headers, "LAST_PUSH", "LAST_ERROR"], rows)


def _change_text(change: Answer) -> str:
    if change.get("kind") == "subscription":
        properties: Answer = change.get("properties") or {}
        if not properties:
            return f"subscription {change.get('name')} deleted"
        configs = ", ".join(f"{k}={_text(v)}" for k, v in sorted(properties.items()))
        return f"subscription {change.get('name')}: {configs}"
    entity = _entity_text(change.get("entity", []))
    value = change.get("value")
    return f"quota {entity}: {change.get('key')} " + ("removed" if value is None else f"= {_text(value)}")


def _render_log(answer: Answer) -> list[str]:
    rows = [
        [
            _text(c.get("offset")),
            _when(c.get("written_ms")),
            _text(c.get("principal")),
            _text(c.get("replica_id")),
            _change_text(c),
        ]
        for c in answer.get("changes") or []
    ]
    return _table(["OFFSET", "WRITTEN", "PRINCIPAL", "REPLICA", "CHANGE"], rows)


def _notes(answer: Answer, response: httpx.Response) -> list[str]:
    """What an operator should know besides the answer: the throttle, a truncated listing."""
    notes = []
    throttle_ms = answer.get("throttle_time_ms")
    if throttle_ms:
        retry_after = response.headers.get("Retry-After")
        after = f" (Retry-After: {retry_after} s)" if retry_after else ""
        notes.append(f"throttled: throttle_time_ms={throttle_ms}{after}")
    instances, count = answer.get("instances"), answer.get("count")
    if isinstance(instances, list) and isinstance(count, int) and count > len(instances):
        notes.append(f"showing {len(instances)} of {count} client instances (raise --limit to see more)")
    return notes


def _errors(answer: Answer) -> list[str]:
    """Every error of an answer as ``NAME: message``: the answer's own, then each entry's."""
    entry_errors = [
        f"{entry['error']}: {_entity_text(entry.get('entity', []))}: {entry.get('error_message') or ''}"
        for entry in answer.get("entries") or []
        if isinstance(entry, dict) and "error" in entry and entry["error"] != _NONE
    ]
    error = _error(answer)
    if error != _NONE and (answer.get("message") or not entry_errors):
        return [f"{error}: {answer.get('message') or '(no message)'}", *entry_errors]
    return entry_errors


# -- running --------------------------------------------------------------------------------------


def _token(args: argparse.Namespace) -> str | None:
    token: str | None = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and not all("!" <= c <= "~" for c in token):
        # never echo it: not even in the error a header library would raise with it
        raise _UsageError("the token has characters a bearer token cannot have (spaces, control, non-ASCII)")
    return token


def _verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """The TLS context for ``--cacert`` / ``--cert`` / ``--key`` (True: the system's CAs, no client cert)."""
    if args.key and not args.cert:
        raise _UsageError("--key needs --cert")
    if not (args.cacert or args.cert):
        return True
    try:
        context = ssl.create_default_context(cafile=args.cacert)
    except (OSError, ssl.SSLError) as exc:
        raise _UsageError(f"--cacert {args.cacert}: {getattr(exc, 'strerror', None) or exc}") from exc
    if args.cert:
        try:
            context.load_cert_chain(args.cert, args.key)
        except (OSError, ssl.SSLError) as exc:
            raise _UsageError(f"--cert {args.cert}: {getattr(exc, 'strerror', None) or exc}") from exc
    return context


def _base_url(args: argparse.Namespace) -> str:
    """``--url``, else the HTTP listener of ``--config`` on this host, else ``DEFAULT_URL``."""
    url: str | None = args.url
    if url is None and getattr(args, "config", None) is not None:
        try:
            server = SinkConfig.load(args.config).server
        except SinkConfigError as exc:
            raise _UsageError(f"--config {args.config}: {exc}") from exc
        url = f"{'https' if server.tls_cert_file else 'http'}://localhost:{server.http_port}"
    url = url or DEFAULT_URL
    return (url if "://" in url else f"http://{url}").rstrip("/")


def _answer(response: httpx.Response) -> Answer | None:
    """The admin API's JSON answer; None when the response is not one."""
    try:
        answer = response.json()
    except ValueError:
        return None
    if not isinstance(answer, dict) or _error(answer) is None:
        return None
    return answer


def _error(answer: Answer) -> str | None:
    """The answer's error name (from ``error``, else the Kafka code ``error_code``)."""
    if isinstance(answer.get("error"), str):
        return str(answer["error"])
    code = answer.get("error_code")
    return error_name(code) if isinstance(code, int) else None


def run_admin(args: argparse.Namespace) -> int:
    """Send the request ``add_arguments`` declared, print the answer; the exit status (``EXIT_*``)."""
    try:
        call: _Call = args.admin_call(args)
        token = _token(args)
        verify = _verify(args)
        if args.timeout <= 0:
            raise _UsageError("--timeout must be positive")
        base_url = _base_url(args)
    except _UsageError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    headers = {CLIENT_ID_HEADER: ADMIN_CLIENT_ID}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(base_url=base_url, headers=headers, verify=verify, timeout=args.timeout) as client:
            response = client.request(
                call.method, ADMIN_PREFIX + call.path, params=call.params, json=call.body
            )
    except httpx.InvalidURL as exc:
        print(f"{_PROG}: --url {base_url}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except httpx.HTTPError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{_PROG}: cannot reach the sink at {base_url}: {reason}", file=sys.stderr)
        return EXIT_USAGE
    answer = _answer(response)
    if answer is None:
        print(
            f"{_PROG}: {base_url} answered HTTP {response.status_code} without an admin API answer "
            "(is --url the sink's HTTP listener?)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    errors = _errors(answer)
    if args.json:
        print(json.dumps(answer, indent=2))
    elif _error(answer) == _NONE:
        for line in call.render(answer):
            print(line)
    for note in _notes(answer, response):
        print(note, file=sys.stderr)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if response.status_code == 409:
        print(
            f"{_PROG}: nothing was written (another change came first): run the command again",
            file=sys.stderr,
        )
    if response.status_code == 401 and token is None:
        print(f"{_PROG}: no credential was sent: give --token or set {TOKEN_ENV}", file=sys.stderr)
    return EXIT_ERROR if errors else EXIT_OK
