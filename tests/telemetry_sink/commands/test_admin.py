"""``telemetry-sink admin`` against a real admin API on a loopback HTTP server, over a real config log
(Delta): what each command sends (checked in the server's state), what it prints and its exit status.

The CLI is synchronous (httpx.Client): it runs in a worker thread while the server runs on the loop."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from ingest.admin.config_log import ConfigImage, ConfigLog, ConfigLogFollower, SubscriptionChange
from ingest.admin.http_api import admin_routes
from ingest.admin.operations import SinkAdmin, SuperUserAuthorizer
from ingest.security.identity import ANONYMOUS
from ingest.wire import CLIENT_ID_HEADER
from quotas import DEFAULT, ClientQuotaEntity, QuotaConfig, create_quota_managers
from subscriptions import (
    ClientContext,
    ClientMetricsManager,
    GetTelemetrySubscriptionsRequest,
    SubscriptionStore,
    kafka_uuid_string,
)
from telemetry_sink.cli import build_parser
from telemetry_sink.commands.admin import TOKEN_ENV, run_admin
from tests.support.clock import FakeClock

pytestmark = pytest.mark.integration

TOKEN = "admin-s3cret-token-7f3a"
PRINCIPALS = {f"Bearer {TOKEN}": "User:admin", "Bearer bob-secret": "User:bob"}


def client_of(request: web.Request) -> ClientContext:
    """Stands in for the sink's authenticator: a known bearer token, else a client certificate whose
    subject is CN=admin, names the principal."""
    principal = PRINCIPALS.get(request.headers.get("Authorization", ""), ANONYMOUS)
    peercert = request.transport.get_extra_info("peercert") if request.transport else None
    if peercert and (("commonName", "admin"),) in peercert.get("subject", ()):
        principal = "User:admin"
    return ClientContext(client_id=request.headers.get(CLIENT_ID_HEADER), principal=principal)


class Sink:
    """A served admin API, and the CLI pointed at it."""

    def __init__(self, url: str, admin: SinkAdmin, clock: FakeClock) -> None:
        self.url = url
        self.admin = admin
        self.clock = clock

    async def cli(self, *argv: str, token: str | None = TOKEN, url: str | None = None) -> int:
        """``telemetry-sink admin --url URL [--token TOKEN] *argv``, run as the CLI runs it."""
        parser = build_parser()
        credential = [] if token is None else ["--token", token]
        args = parser.parse_args(["admin", "--url", url or self.url, *credential, *argv])
        return await asyncio.to_thread(run_admin, args)

    @property
    def quotas(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        return self.admin.follower.image.client_quotas


async def serve(tmp_path: Path, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[Sink]:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    image = ConfigImage(SubscriptionStore(), quotas)
    manager = ClientMetricsManager(image.store)
    follower = ConfigLogFollower(ConfigLog(str(tmp_path / "config_log"), replica_id="r0"), image)
    admin = SinkAdmin(follower, manager, quotas, SuperUserAuthorizer(["User:admin"]), clock.now_ms)
    app = web.Application()
    app.add_routes(admin_routes(admin, client_of))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(ssl=ssl_context)
    try:
        yield Sink(str(server.make_url("")), admin, clock)
    finally:
        await server.close()


@pytest.fixture(autouse=True)
def no_token_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)


@pytest.fixture
async def sink(tmp_path: Path) -> AsyncIterator[Sink]:
    async for served in serve(tmp_path):
        yield served


def stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


# -- subscriptions --------------------------------------------------------------------------------


async def test_subscriptions_alter_creates_patches_and_delete_deletes_in_the_servers_store(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    store = sink.admin.follower.image.store
    assert (
        await sink.cli(
            "subscriptions", "alter", "kafka", "--metrics", "org.apache.kafka.", "--interval", "60000"
        )
        == 0
    )
    created = store.get("kafka")
    assert created is not None
    assert (created.metrics, created.interval_ms) == (("org.apache.kafka.",), 60000)
    assert "Altered client metrics config for kafka" in capsys.readouterr().out

    args = ["--match", "client_software_name=librdkafka", "--delete-config", "interval.ms"]
    assert await sink.cli("subscriptions", "alter", "kafka", *args) == 0
    patched = store.get("kafka")
    assert patched is not None
    assert patched.properties == {
        "metrics": ["org.apache.kafka."],
        "match": ["client_software_name=librdkafka"],
    }

    assert await sink.cli("subscriptions", "delete", "kafka") == 0
    assert store.get("kafka") is None
    assert "Deleted client metrics config for kafka" in capsys.readouterr().out


async def test_F16_a_patch_that_lost_a_config_log_race_exits_1_naming_both_offsets(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another replica wrote a change this replica has not read yet: the PATCH is refused, not laid
    over it; run again, it applies to the state that won."""
    assert await sink.cli("subscriptions", "alter", "kafka", "--metrics", "org.apache.kafka.") == 0
    other = ConfigLog(sink.admin.follower.log.table_uri, replica_id="r1")
    other.append(
        [SubscriptionChange("kafka", {"metrics": ["org.apache.kafka."], "interval.ms": 5000})], "User:b", 1
    )
    capsys.readouterr()
    assert await sink.cli("subscriptions", "alter", "kafka", "--metrics", "org.apache.kafka.producer.") == 1
    assert stderr_lines(capsys) == [
        "error: NOT_CONTROLLER: config-log conflict: the change was prepared at offset 0, but the log is "
        "at offset 1 (another change was written meanwhile); nothing was written, retry",
        "telemetry-sink admin: nothing was written (another change came first): run the command again",
    ]
    assert await sink.cli("subscriptions", "alter", "kafka", "--metrics", "org.apache.kafka.producer.") == 0
    patched = sink.admin.follower.image.store.get("kafka")
    assert patched is not None
    assert patched.properties == {"metrics": ["org.apache.kafka.producer."], "interval.ms": 5000}


async def test_subscriptions_list_and_describe_print_every_config(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    await sink.cli("subscriptions", "alter", "kafka", "--metrics", "a.,b.", "--interval", "5000")
    await sink.cli("subscriptions", "alter", "all", "--metrics", "*", "--match", "client_id=app-.*")
    capsys.readouterr()
    assert await sink.cli("subscriptions", "list") == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "METRICS", "INTERVAL_MS", "MATCH"]
    assert [row.split() for row in rows] == [
        ["all", "*", "-", "client_id=app-.*"],
        ["kafka", "a.,b.", "5000", "-"],
    ]

    assert await sink.cli("subscriptions", "describe", "kafka") == 0
    assert capsys.readouterr().out.splitlines() == [
        "Client metrics configs for kafka are:",
        "  interval.ms=5000",
        "  metrics=a.,b.",
    ]
    assert await sink.cli("subscriptions", "describe", "nope") == 0  # as Kafka: no error, no config
    assert "doesn't exist" in capsys.readouterr().out


async def test_subscription_alter_validate_only_writes_nothing(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("subscriptions", "alter", "kafka", "--metrics", "*", "--validate-only") == 0
    assert "Validated" in capsys.readouterr().out
    assert sink.admin.follower.image.store.get("kafka") is None
    assert sink.admin.follower.log.latest_version() == -1


async def test_a_refused_subscription_exits_1_with_kafkas_error_on_stderr(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("subscriptions", "alter", "kafka", "--interval", "1") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    reason = "Invalid value 1 for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    assert captured.err.splitlines() == [f"error: INVALID_REQUEST: {reason}"]
    assert sink.admin.follower.image.store.get("kafka") is None


@pytest.mark.parametrize(
    "argv",
    [
        ["subscriptions", "alter", "kafka"],
        ["subscriptions", "alter", "kafka", "--metrics", "a", "--delete-config", "metrics"],
        ["quotas", "alter", "--add-config", "producer_byte_rate=1"],
        ["quotas", "alter", "--user", "alice"],
    ],
    ids=["nothing-to-alter", "set-and-deleted", "quota-without-entity", "quota-without-change"],
)
async def test_a_command_that_cannot_be_sent_is_a_usage_error_on_one_line(
    sink: Sink, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert await sink.cli(*argv) == 2
    (line,) = stderr_lines(capsys)
    assert line.startswith("telemetry-sink admin: ")
    assert sink.admin.follower.log.latest_version() == -1


@pytest.mark.parametrize(
    "argv",
    [
        ["subscriptions", "alter", "s", "--delete-config", "colour"],
        ["quotas", "alter", "--user", "a", "--user-default", "--add-config", "producer_byte_rate=1"],
        ["quotas", "alter", "--user", "a", "--add-config", "producer_byte_rate=lots"],
        ["instances", "list", "--limit", "-1"],
    ],
    ids=["unknown-subscription-key", "name-and-default", "quota-not-a-number", "negative-limit"],
)
def test_argparse_refuses_malformed_options_with_exit_2(argv: list[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["admin", *argv])
    assert exited.value.code == 2


# -- client quotas --------------------------------------------------------------------------------


async def test_quotas_alter_sends_kafka_shaped_entities_for_names_and_defaults(sink: Sink) -> None:
    assert (
        await sink.cli(
            "quotas",
            "alter",
            "--user-default",
            "--client-id-default",
            "--add-config",
            "producer_byte_rate=1024",
        )
        == 0
    )
    assert (
        await sink.cli("quotas", "alter", "--user", "alice", "--add-config", "request_percentage=50.5") == 0
    )
    assert (
        await sink.cli("quotas", "alter", "--client-defaults", "--add-config", "consumer_byte_rate=10") == 0
    )
    assert (
        await sink.cli("quotas", "alter", "--ip", "10.0.0.1", "--add-config", "connection_creation_rate=3")
        == 0
    )
    assert sink.quotas == {
        ClientQuotaEntity(DEFAULT, DEFAULT, None): {"producer_byte_rate": 1024.0},
        ClientQuotaEntity("alice", None, None): {"request_percentage": 50.5},
        ClientQuotaEntity(None, DEFAULT, None): {"consumer_byte_rate": 10.0},
        ClientQuotaEntity(None, None, "10.0.0.1"): {"connection_creation_rate": 3.0},
    }
    assert await sink.cli("quotas", "alter", "--user", "alice", "--delete-config", "request_percentage") == 0
    assert ClientQuotaEntity("alice", None, None) not in sink.quotas


async def test_quotas_describe_filters_like_describe_client_quotas(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    await sink.cli("quotas", "alter", "--user-default", "--add-config", "producer_byte_rate=1048576")
    await sink.cli(
        "quotas", "alter", "--user", "alice", "--client-id", "app", "--add-config", "request_percentage=50.5"
    )
    capsys.readouterr()

    def rows() -> list[list[str]]:
        header, *lines = capsys.readouterr().out.splitlines()
        assert header.split() == ["USER", "CLIENT_ID", "IP", "KEY", "VALUE"]
        return sorted(line.split() for line in lines)

    assert await sink.cli("quotas", "describe") == 0
    assert rows() == [
        ["<default>", "-", "-", "producer_byte_rate", "1048576"],
        ["alice", "app", "-", "request_percentage", "50.5"],
    ]
    assert await sink.cli("quotas", "describe", "--user-default") == 0
    assert rows() == [["<default>", "-", "-", "producer_byte_rate", "1048576"]]
    assert await sink.cli("quotas", "describe", "--user", "alice") == 0
    assert rows() == [["alice", "app", "-", "request_percentage", "50.5"]]
    assert await sink.cli("quotas", "describe", "--user", "alice", "--strict") == 0
    assert rows() == []


async def test_a_per_entry_quota_error_exits_1_with_its_message_on_stderr(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("quotas", "alter", "--user", "carol", "--add-config", "producer_byte_rate=-1") == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: INVALID_REQUEST: user=carol: ")
    assert len(line) > len("error: INVALID_REQUEST: user=carol: ")  # the server's reason follows
    assert "Altered" not in captured.out
    assert sink.quotas == {}


async def test_quotas_alter_validate_only_changes_nothing(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        await sink.cli(
            "quotas", "alter", "--user", "alice", "--add-config", "producer_byte_rate=1", "--validate-only"
        )
        == 0
    )
    assert capsys.readouterr().out == "Validated quotas of user=alice (nothing written).\n"
    assert sink.quotas == {}
    assert sink.admin.follower.log.latest_version() == -1


async def test_a_throttled_change_shows_throttle_time_and_retry_after(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    limit = ["quotas", "alter", "--user", "admin", "--add-config", "controller_mutation_rate=1"]
    assert await sink.cli(*limit) == 0
    for i in range(20):  # a burst at 1/s hits the strict mutation quota (burst 11)
        if await sink.cli("subscriptions", "alter", f"s{i}", "--metrics", "*") == 1:
            break
    else:
        pytest.fail("20 changes at 1/s never hit the mutation quota")
    lines = stderr_lines(capsys)
    assert any(line.startswith("throttled: throttle_time_ms=") and "Retry-After: " in line for line in lines)
    assert any(line.startswith("error: THROTTLING_QUOTA_EXCEEDED: ") for line in lines)


# -- client instances and the config log ----------------------------------------------------------


async def test_instances_list_and_describe_show_what_the_replica_knows(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    await sink.cli("subscriptions", "alter", "kafka", "--metrics", "org.apache.kafka.", "--interval", "60000")
    context = ClientContext(client_id="producer-1", client_software_name="librdkafka", principal="User:app")
    response = sink.admin.manager.process_get(
        GetTelemetrySubscriptionsRequest(None), context, sink.clock.now_ms()
    )
    capsys.readouterr()
    assert await sink.cli("instances", "list") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["CLIENT_INSTANCE_ID", "CLIENT_ID", "PRINCIPAL"]
    listed_id = kafka_uuid_string(response.client_instance_id)  # Kafka's form, as its tools show it
    assert row.split()[:6] == [
        listed_id,
        "producer-1",
        "User:app",
        "librdkafka",
        "kafka",
        "60000",
    ]

    assert await sink.cli("instances", "describe", listed_id) == 0
    fields = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert fields["client_instance_id"] == listed_id
    assert fields["client_id"] == "producer-1"
    assert fields["subscriptions"] == "kafka"
    assert await sink.cli("instances", "describe", str(response.client_instance_id)) == 0  # hex too
    assert dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines()) == fields
    assert await sink.cli("instances", "list", "--limit", "0") == 0
    assert "showing 0 of 1 client instances" in capsys.readouterr().err


async def test_an_unknown_instance_exits_1_with_its_message(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("instances", "describe", "00000000-0000-0000-0000-000000000001") == 1
    (line,) = stderr_lines(capsys)
    assert line.startswith("error: INVALID_REQUEST: no client instance")
    assert await sink.cli("instances", "describe", "not-a-uuid") == 1
    assert stderr_lines(capsys)[0].startswith("error: INVALID_REQUEST: ")


async def test_log_lists_the_changes_after_an_offset(sink: Sink, capsys: pytest.CaptureFixture[str]) -> None:
    await sink.cli("subscriptions", "alter", "kafka", "--metrics", "*")
    await sink.cli("quotas", "alter", "--user-default", "--add-config", "producer_byte_rate=10")
    await sink.cli("subscriptions", "delete", "kafka")
    capsys.readouterr()
    assert await sink.cli("log") == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["OFFSET", "WRITTEN", "PRINCIPAL", "REPLICA", "CHANGE"]
    assert [row.split(maxsplit=4)[2:] for row in rows] == [
        ["User:admin", "r0", "subscription kafka: metrics=*"],
        ["User:admin", "r0", "quota user=<default>: producer_byte_rate = 10"],
        ["User:admin", "r0", "subscription kafka deleted"],
    ]
    first_offset = rows[0].split()[0]
    assert await sink.cli("log", "--since", first_offset) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # the header and the two later changes


# -- credentials, transport, JSON -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["subscriptions", "list"],
        ["quotas", "alter", "--user", "a", "--add-config", "producer_byte_rate=1"],
        ["log"],
    ],
)
async def test_anonymous_exits_1_with_cluster_authorization_failed(
    sink: Sink, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert await sink.cli(*argv, token=None) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: CLUSTER_AUTHORIZATION_FAILED: ")
    assert TOKEN_ENV in captured.err  # the hint: no credential was sent
    assert sink.admin.follower.log.latest_version() == -1


async def test_a_principal_that_is_not_a_super_user_exits_1(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("subscriptions", "alter", "s", "--metrics", "*", token="bob-secret") == 1
    (line,) = stderr_lines(capsys)
    assert line.startswith("error: CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed")


async def test_the_token_comes_from_the_environment_when_not_given(
    sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert await sink.cli("subscriptions", "alter", "kafka", "--metrics", "*", token=None) == 0
    (record,) = await sink.admin.follower.history(-1)
    assert record.principal == "User:admin"


async def test_the_token_never_appears_in_any_output(sink: Sink, capsys: pytest.CaptureFixture[str]) -> None:
    commands = [
        ["subscriptions", "alter", "kafka", "--metrics", "*"],
        ["subscriptions", "alter", "kafka", "--interval", "1"],
        ["--json", "subscriptions", "list"],
        ["quotas", "alter", "--user", "a", "--add-config", "producer_byte_rate=-1"],
        ["--json", "log"],
        ["instances", "describe", "nope"],
    ]
    for argv in commands:
        await sink.cli(*argv)
    assert await sink.cli("log", url="http://127.0.0.1:1") == 2
    assert await sink.cli("log", token=f"{TOKEN}\nX-Evil: 1") == 2  # not a header value: refused, not echoed
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err


async def test_json_prints_the_answer_as_parseable_json(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    await sink.cli("subscriptions", "alter", "kafka", "--metrics", "*")
    capsys.readouterr()
    assert await sink.cli("--json", "subscriptions", "list") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["error"] == "NONE"
    assert answer["subscriptions"] == {"kafka": {"metrics": ["*"]}}

    assert (
        await sink.cli("--json", "quotas", "alter", "--user", "a", "--add-config", "producer_byte_rate=-1")
        == 1
    )
    captured = capsys.readouterr()
    refused: dict[str, Any] = json.loads(captured.out)
    assert [e["error"] for e in refused["entries"]] == ["INVALID_REQUEST"]
    assert captured.err.startswith("error: INVALID_REQUEST: ")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_an_unreachable_sink_exits_2_with_one_line(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("subscriptions", "list", url=f"http://127.0.0.1:{closed_port()}") == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("telemetry-sink admin: cannot reach the sink at http://127.0.0.1:")


async def test_an_answer_that_is_not_the_admin_api_exits_2(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await sink.cli("subscriptions", "list", url=sink.url + "/elsewhere") == 2  # aiohttp's text 404
    (line,) = stderr_lines(capsys)
    assert "answered HTTP 404 without an admin API answer" in line


# -- TLS ------------------------------------------------------------------------------------------


def self_signed(tmp_path: Path, name: str, subject: str) -> tuple[Path, Path]:
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", subject,
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_mtls_the_cli_verifies_the_sink_with_cacert_and_presents_cert_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    server_cert, server_key = self_signed(tmp_path, "server", "/CN=127.0.0.1")
    client_cert, client_key = self_signed(tmp_path, "client", "/CN=admin")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_cert, server_key)
    context.load_verify_locations(client_cert)
    context.verify_mode = ssl.CERT_OPTIONAL
    async for sink in serve(tmp_path, context):
        assert sink.url.startswith("https://")
        tls = ["--cacert", str(server_cert), "--cert", str(client_cert), "--key", str(client_key)]
        assert await sink.cli(*tls, "subscriptions", "alter", "s", "--metrics", "*", token=None) == 0
        assert sink.admin.follower.image.store.get("s") is not None  # the certificate named User:admin

        assert await sink.cli("--cacert", str(server_cert), "subscriptions", "list", token=None) == 1
        assert "CLUSTER_AUTHORIZATION_FAILED" in capsys.readouterr().err  # no certificate: anonymous
        assert await sink.cli("subscriptions", "list") == 2  # the system CAs do not know it
        assert "cannot reach the sink" in capsys.readouterr().err
        missing = str(tmp_path / "missing.pem")
        assert await sink.cli("--cacert", missing, "subscriptions", "list") == 2
        assert capsys.readouterr().err.startswith(f"telemetry-sink admin: --cacert {missing}: ")
