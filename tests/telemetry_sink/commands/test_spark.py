"""``telemetry-sink rollup`` as a user runs it: its own process and Spark, progress on stderr, a JSON
summary per run on stdout, SIGTERM honoured between runs."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_jobs.tables import ACTIVITY_TABLES, ROLLUP_TABLES
from telemetry_sink.commands.spark import RUN_DELAY_S, next_run_at, parse_since
from tests.support.fleet import kafka_pushes, land

# its Spark runs in processes of its own, not the tests' session: beside the Spark tests (scripts/unit.sh)
pytestmark = pytest.mark.integration


def test_rollup_every_runs_until_sigterm_and_reports_each_run(tmp_path: Path) -> None:
    land(kafka_pushes(clients=2, pushes=3), str(tmp_path))
    command = [sys.executable, "-m", "telemetry_sink", "rollup", "--every", "0.5", "--master", "local[1]"]
    process = subprocess.Popen(
        [*command, "--data-root", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        with ThreadPoolExecutor(1) as reader:  # a deadline: a run that keeps failing prints no summary
            line = reader.submit(process.stdout.readline)
            try:
                first = json.loads(line.result(timeout=300))
            finally:
                if not line.done():
                    process.kill()  # which ends the readline
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert first["points"] > 0
    assert first["lag_s"] == 0  # nothing landed while it ran
    assert first["quarantined"] == 0
    assert first["compacted"] == []  # one commit: nothing to compact
    assert first["logs_expired"] == []  # no table has a checkpoint yet, let alone a day of log
    assert set(first["tables"]) == {*ROLLUP_TABLES, *ACTIVITY_TABLES}
    assert "rollup_client_1m: recomputing" in stderr
    assert "stopping after this run" in stderr
    assert "Traceback" not in stderr
    for table in ROLLUP_TABLES:
        assert DeltaTable(str(tmp_path / table)).version() >= 1


def test_rollup_refuses_bad_options_with_a_clear_message() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "telemetry_sink", "rollup", "--every", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "telemetry-sink rollup: --every must be positive"


@pytest.mark.parametrize(
    ("now", "every", "expected"),
    [
        (600.0, 60.0, 600.0 + RUN_DELAY_S),  # just after a minute: this minute's start
        (600.0 + RUN_DELAY_S, 60.0, 660.0 + RUN_DELAY_S),  # at a start: the next one
        (659.0, 60.0, 660.0 + RUN_DELAY_S),
        (727.5, 60.0, 780.0 + RUN_DELAY_S),  # a run that overran skips the start it missed
        (10.2, 0.5, 10.625),  # a short period starts a quarter of it past each multiple
    ],
)
def test_every_starts_runs_at_a_fixed_rate_past_each_multiple_of_the_period(
    now: float, every: float, expected: float
) -> None:
    assert next_run_at(now, every) == pytest.approx(expected)


def test_since_reads_iso_dates_and_times_as_utc_unless_told() -> None:
    assert parse_since("2026-11-22") == datetime(2026, 11, 22, tzinfo=UTC)
    assert parse_since("2026-11-22T03:30+01:00") == datetime(2026, 11, 22, 2, 30, tzinfo=UTC)
    with pytest.raises(argparse.ArgumentTypeError, match="ISO 8601"):
        parse_since("yesterday")


def test_a_failed_run_is_one_line_on_stderr_and_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "metric_points" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("this is not a Delta log\n")
    land(kafka_pushes(clients=1, pushes=1), str(tmp_path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "telemetry_sink",
            "rollup",
            "--master",
            "local[1]",
            "--data-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    failure = [line for line in done.stderr.splitlines() if line.startswith("telemetry-sink rollup:")]
    assert len(failure) == 1
    assert failure[0].startswith("telemetry-sink rollup: the run failed: ")
    assert "Traceback" not in done.stderr
