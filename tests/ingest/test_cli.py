"""The ``telemetry-sink`` console script, run as a user would run it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ingest.cli import main

pytestmark = pytest.mark.integration


def _script() -> str:
    path = shutil.which("telemetry-sink", path=str(Path(sys.executable).parent))
    assert path is not None, "the console script is not installed in this environment"
    return path


def test_version_flag_prints_the_installed_version() -> None:
    result = subprocess.run([_script(), "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == f"telemetry-sink {version('telemetry-sink')}"


def test_help_flag_describes_the_product() -> None:
    result = subprocess.run([_script(), "--help"], capture_output=True, text=True, check=True)
    assert "KIP-714" in result.stdout
    assert "usage: telemetry-sink" in result.stdout


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: telemetry-sink" in capsys.readouterr().err


def test_unknown_option_is_a_usage_error() -> None:
    result = subprocess.run([_script(), "--bogus"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --bogus" in result.stderr
