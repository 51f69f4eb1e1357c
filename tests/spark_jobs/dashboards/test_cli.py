"""``telemetry-sink dashboard`` as a user runs it: its own process and Spark, a file or a server."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.spark_jobs.dashboards.conftest import Dataset
from tests.support.process import line_matching

COMMAND = (sys.executable, "-m", "telemetry_sink", "dashboard")
SPARK = ("--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=2")


def _window(dataset: Dataset) -> list[str]:
    return ["--from", dataset.window.start.isoformat(), "--to", dataset.window.end.isoformat()]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--from", "2026-11-22", "--to", "2026-11-21"],
            "telemetry-sink dashboard: the window is empty: from 2026-11-22 00:00:00.000000 is not before to "
            "2026-11-21 00:00:00.000000",
        ),
        (["--top", "0"], "telemetry-sink dashboard: top must be between 1 and 100000, got 0"),
        (["--serve", "--refresh", "0"], "telemetry-sink dashboard: --refresh must be positive"),
        (["--conf", "spark.executor.cores"], None),
        (
            ["--out", "/no/such/folder/fleet.html"],
            "telemetry-sink dashboard: --out: the folder /no/such/folder does not exist",
        ),
    ],
)
def test_bad_options_are_refused_with_a_clear_message_before_spark_starts(
    options: list[str], message: str | None
) -> None:
    done = subprocess.run([*COMMAND, *options], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    if message is None:
        assert "expected spark.KEY=VALUE, got 'spark.executor.cores'" in done.stderr
    else:
        assert done.stderr.strip() == message


@pytest.mark.spark
def test_out_writes_one_self_contained_page(dataset: Dataset, tmp_path: Path) -> None:
    out = tmp_path / "fleet.html"
    done = subprocess.run(
        [*COMMAND, "--data-root", dataset.root, *_window(dataset), *SPARK, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"telemetry-sink dashboard: 11 queries, \d+ rows, [\d.]+ MiB page in [\d.]+ s -> ", done.stderr
    )
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "client-5" in page
    assert not list(tmp_path.glob(".*.tmp"))
    assert "no data for --metric" not in done.stderr


@pytest.mark.integration
def test_a_render_that_fails_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """A table whose Delta log cannot be read (a storage fault): the first query fails. (Its Spark is
    the command's own, not the tests' session: it runs beside the Spark tests.)"""
    log = tmp_path / "data" / "rollup_client_1m" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text("not a Delta commit\n")
    out = tmp_path / "fleet.html"
    done = subprocess.run(
        [*COMMAND, "--data-root", str(tmp_path / "data"), *SPARK, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    [said] = [line for line in done.stderr.splitlines() if line.startswith("telemetry-sink dashboard:")]
    assert said.startswith("telemetry-sink dashboard: the render failed: ")
    assert "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.spark
def test_serve_answers_with_the_page_until_sigterm(dataset: Dataset) -> None:
    process = subprocess.Popen(
        [
            *COMMAND,
            "--data-root",
            dataset.root,
            *_window(dataset),
            *SPARK,
            "--serve",
            "--port",
            "0",
            "--metric",
            "no.such",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        serving = line_matching(process.stderr, r"serving (http://127\.0\.0\.1:\d+/)")
        line_matching(process.stderr, r"telemetry-sink dashboard: 11 queries")  # the first render is done
        line_matching(process.stderr, r"dashboard: no data for --metric no\.such in the window")
        deadline = time.monotonic() + 10  # the server keeps the page just after the line
        while (answer := httpx.get(serving.group(1), timeout=10)).status_code == 503:
            assert time.monotonic() < deadline
        assert answer.status_code == 200
        assert '<meta http-equiv="refresh" content="60">' in answer.text
        assert "client-5" in answer.text
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert "telemetry-sink dashboard: stopping" in rest
    assert "Traceback" not in rest
