"""The ``telemetry-sink`` command line as a whole: cheap ``--version``/``--help``, and one ``--config``
file that every subcommand reads, under its own flags."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporters import DeltaLandingExporter
from ingest.config import KafkaListenerConfig, ServerConfig
from spark_jobs.session import SparkSettings
from telemetry_sink.cli import _read_lake_settings, build_parser, main
from telemetry_sink.commands.admin import TOKEN_ENV
from telemetry_sink.commands.spark import _spark_settings as spark_settings
from tests.support.otlp import push

HEAVY = ("pyspark", "grpc", "plotly", "deltalake", "aiohttp")


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_none_of_the_heavy_dependencies(flag: str) -> None:
    probe = (
        "import sys\n"
        "from telemetry_sink.cli import main\n"
        f"try:\n    main([{flag!r}])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"
    assert "telemetry-sink" in result.stdout


def test_serve_help_gives_the_configs_default_ports(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    server, kafka = ServerConfig(), KafkaListenerConfig()
    for port in (server.grpc_port, server.http_port, kafka.port):
        assert f" {port}" in text


def _config(path: Path, body: str) -> str:
    path.write_text(body, encoding="utf-8")
    return str(path)


def _land(table: Path) -> None:
    async def land() -> None:
        exporter = DeltaLandingExporter(str(table), max_batch_rows=1)
        await exporter.start()
        for n in range(2):
            await exporter.export(push(n))
        await exporter.shutdown()

    asyncio.run(land())


@pytest.mark.integration
def test_maintain_reads_the_data_root_from_config_and_the_flag_overrides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "lake"
    _land(root / "telemetry_pushes")
    config = _config(tmp_path / "sink.yaml", f"data_root: {root}\nstorage_options: {{}}\n")
    assert main(["maintain", "--config", config, "--table", "telemetry_pushes"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["table_uri"] == f"{root}/telemetry_pushes"
    assert report["files_removed_by_compaction"] == 2
    other = tmp_path / "other"
    assert main(["maintain", "--config", config, "--data-root", str(other), "--table", "quota_samples"]) == 0
    assert json.loads(capsys.readouterr().out)["table_uri"] == f"{other}/quota_samples"


@pytest.mark.parametrize("command", ["maintain", "rollup", "dashboard"])
def test_the_lake_commands_refuse_a_bad_config_file_before_starting(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "sink.yaml", "data_root: ''\nserver: {grpc_port: lots}\n")
    assert main([command, "--config", config]) == 2
    err = capsys.readouterr().err
    assert f"telemetry-sink {command}: invalid configuration" in err
    assert "data_root must be a non-empty string" in err
    assert "server.grpc_port must be a port number" in err


def test_admin_talks_to_the_http_port_of_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "sink.yaml", "server: {http_port: 1, grpc_port: 2}\n")
    assert main(["admin", "--config", config, "--timeout", "2", "log"]) == 2
    assert "cannot reach the sink at http://localhost:1:" in capsys.readouterr().err
    assert main(["admin", "--config", config, "--url", "localhost:3", "--timeout", "2", "log"]) == 2
    assert "cannot reach the sink at http://localhost:3:" in capsys.readouterr().err


def test_loadgen_targets_the_ports_of_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path / "sink.yaml", "server: {http_port: 1, grpc_port: 2}\n")
    argv = ["loadgen", "--config", config, "--target", "http", "--duration", "1", "--connect-timeout", "2"]
    assert main(argv) == 1
    assert "localhost:1" in capsys.readouterr().err
    assert main([*argv, "--http", "localhost:3"]) == 1
    assert "localhost:3" in capsys.readouterr().err


def test_issue20_the_admin_token_in_the_environment_does_not_stop_the_lake_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, ``TELEMETRY_SINK_ADMIN_TOKEN`` was read as a setting: every command that loads the config
    refused to start ("unknown setting"); now the command goes on to check its own flags."""
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    config = _config(tmp_path / "sink.yaml", f"data_root: {tmp_path}\n")
    assert main(["rollup", "--config", config, "--every", "0"]) == 2
    assert capsys.readouterr().err.strip() == "telemetry-sink rollup: --every must be positive"


def _spark_settings(argv: list[str]) -> SparkSettings | None:
    """The Spark settings ``rollup`` would start Spark with, from its command line and ``--config``."""
    args = build_parser().parse_args(argv)
    assert _read_lake_settings(args) is None
    return spark_settings(args, "rollup")


def test_issue20_rollup_and_dashboard_read_the_spark_section_under_their_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(
        tmp_path / "sink.yaml",
        "spark:\n"
        "  master: spark://m:7077\n"
        "  conf: {spark.executor.memory: 4g, spark.sql.shuffle.partitions: 16}\n"
        "  delta_connector: on\n",
    )
    assert _spark_settings(["rollup", "--config", config]) == SparkSettings(
        master="spark://m:7077",
        settings={"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": "16"},
        delta_connector="on",
    )
    flags = ["--master", "local[2]", "--conf", "spark.executor.memory=1g", "--delta-connector", "off"]
    assert _spark_settings(["dashboard", "--config", config, *flags]) == SparkSettings(
        master="local[2]",
        settings={"spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "16"},
        delta_connector="off",
    )
    assert _spark_settings(["rollup"]) == SparkSettings()  # no file: Spark's defaults of the commands
    refused = _config(tmp_path / "utc.yaml", "spark: {conf: {spark.sql.session.timeZone: PST}}\n")
    assert main(["rollup", "--config", refused, "--once"]) == 2
    assert "spark.sql.session.timeZone is set by telemetry-sink to UTC" in capsys.readouterr().err
