"""The exporter plugin API stays compatible: a third-party exporter, written only against the
``exporters`` facade (``Exporter``, ``ExportResult``, ``TelemetryPush``, ``PushContext``, ``Health``)
and installed as its own distribution, loads by entry point (group ``telemetry_sink.exporters``) and
by dotted path, and receives the pushes a real client sends to the real HTTP front door."""

from __future__ import annotations

import base64
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestServer

from exporters import (
    Exporter,
    ExportResult,
    ForwardedBatch,
    Health,
    PushContext,
    TelemetryPush,
    load_exporter,
)
from exporters.registry import ENTRY_POINT_GROUP
from ingest.transports.http_app import SERVER_OPTIONS, create_http_app
from ingest.wire import GET_PATH, PUSH_PATH
from tests.support.clock import FakeClock
from tests.support.otlp import metrics_data, push
from tests.support.pipeline import kafka_pipeline

pytestmark = pytest.mark.integration

PLUGIN = '''
"""A third party's exporter: it imports nothing from the sink but the exporters facade."""

from exporters import Exporter, ExportResult, Health, PushContext, TelemetryPush


class AcmeExporter(Exporter):
    name = "acme"

    def __init__(self, label: str, result: str = "success") -> None:
        self.label = label
        self.result = ExportResult(result)
        self.received: list[tuple[PushContext, bytes]] = []
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def export(self, push: TelemetryPush) -> ExportResult:
        self.received.append((push.context, push.payload))
        return self.result

    def health(self) -> Health:
        return Health(self.result is ExportResult.SUCCESS, f"{self.label}: {len(self.received)} pushes")
'''
HEADERS = {"x-kafka-client-id": "acme-client", "x-kafka-client-software-name": "librdkafka"}


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The plugin installed as the distribution ``acme-telemetry`` (a package and its dist-info, as
    pip leaves them), declaring the entry point ``acme``; answers the module's name."""
    (tmp_path / "acme_telemetry").mkdir()
    (tmp_path / "acme_telemetry" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "acme_telemetry-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-telemetry\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nacme = acme_telemetry:AcmeExporter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_telemetry", raising=False)
    return "acme_telemetry"


async def _push_once(exporter: Exporter) -> dict[str, Any]:
    """A client's GetTelemetrySubscriptions then PushTelemetry over HTTP to a sink exporting to
    ``exporter``; the push's answer, with ``/readyz``'s beside it."""
    clock = FakeClock()
    pipeline = kafka_pipeline(clock, exporter)
    await exporter.start()
    app = create_http_app(pipeline, ready=exporter.health)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server(**SERVER_OPTIONS)
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url(""))) as client:
            got = (await client.post(GET_PATH, headers=HEADERS)).json()
            clock.advance(1000)
            body = {
                "client_instance_id": got["client_instance_id"],
                "subscription_id": got["subscription_id"],
                "metrics": base64.b64encode(metrics_data()).decode(),
            }
            answer: dict[str, Any] = (await client.post(PUSH_PATH, json=body, headers=HEADERS)).json()
            answer["readyz"] = (await client.get("/readyz")).json()
            return answer
    finally:
        await server.close()


@pytest.mark.parametrize("spec", ["acme", "acme_telemetry:AcmeExporter", "acme_telemetry.AcmeExporter"])
async def test_a_third_party_exporter_loads_by_entry_point_or_dotted_path_and_receives_pushes(
    installed: str, spec: str
) -> None:
    exporter: Any = load_exporter(spec, {"label": "lake-b"})
    assert type(exporter).__module__ == installed
    assert issubclass(type(exporter), Exporter)
    answer = await _push_once(exporter)
    assert answer["error"] == "NONE"
    assert exporter.started
    [(context, payload)] = exporter.received
    assert isinstance(context, PushContext)
    assert context.client_id == "acme-client"
    assert context.client_software_name == "librdkafka"
    assert payload == metrics_data()
    assert answer["readyz"] == {"status": "ready", "detail": "lake-b: 1 pushes"}


@pytest.mark.parametrize(
    ("result", "error"),
    [("retryable", "THROTTLING_QUOTA_EXCEEDED"), ("permanent", "INVALID_RECORD")],
)
async def test_a_third_party_exporters_result_is_the_clients_answer(
    installed: str, result: str, error: str
) -> None:
    exporter: Any = load_exporter("acme", {"label": "lake-b", "result": result})
    answer = await _push_once(exporter)
    assert answer["error"] == error
    assert len(exporter.received) == 1
    assert answer["readyz"]["status"] == "unready"


def test_the_plugin_interface_keeps_its_shape() -> None:
    """What a plugin written today relies on: one abstract method, the optional hooks, the results
    and the push's fields. Changing any of these breaks third-party exporters (adding a hook with a
    default, or a result only that hook answers, does not)."""
    assert Exporter.__abstractmethods__ == frozenset({"export"})
    hooks = {
        name: str(inspect.signature(getattr(Exporter, name)))
        for name in ("start", "export", "export_batch", "force_flush", "shutdown", "health")
    }
    assert hooks == {
        "start": "(self) -> 'None'",
        "export": "(self, push: 'TelemetryPush') -> 'ExportResult'",
        "export_batch": (
            "(self, pushes: 'Sequence[TelemetryPush]', batch: 'ForwardedBatch') -> 'list[ExportResult]'"
        ),
        "force_flush": "(self) -> 'bool'",
        "shutdown": "(self) -> 'None'",
        "health": "(self) -> 'Health'",
    }
    assert {r.name: r.value for r in ExportResult} == {
        "SUCCESS": "success",
        "RETRYABLE": "retryable",
        "PERMANENT": "permanent",
        "DUPLICATE": "duplicate",
    }
    assert Health._fields == ("healthy", "detail")
    assert list(TelemetryPush.__dataclass_fields__) == ["context", "payload"]
    required = [
        name
        for name, parameter in inspect.signature(PushContext).parameters.items()
        if parameter.default is inspect.Parameter.empty
    ]
    assert required == ["client_instance_id", "subscription_id", "received_ms"]
    assert {
        "principal",
        "client_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
        "quota_tags",
        "compression_type",
        "terminating",
        "push_id",
    } <= set(inspect.signature(PushContext).parameters)


async def test_a_third_party_exporter_without_export_batch_takes_each_forwarded_push_alone(
    installed: str,
) -> None:
    exporter: Any = load_exporter("acme", {"label": "lake-b"})
    pushes = [push(n) for n in range(3)]
    batch = ForwardedBatch("User:kafka-broker/b1", 2, resend=True)
    assert await exporter.export_batch(pushes, batch) == [ExportResult.SUCCESS] * 3
    assert [payload for _, payload in exporter.received] == [p.payload for p in pushes]
