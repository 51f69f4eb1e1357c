"""The pinned Kafka jars: fetched by setup, exactly the locked ones, and a fetch that does not match its
lock fails naming the jar and leaves the cache as it was. Maven runs for real, offline, from the
repository setup filled (nothing downloads in a test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from artifacts import CACHE, FetchError, classpath, fetch
from artifacts.maven import Artifacts, _sums

pytestmark = pytest.mark.integration

KAFKA = Artifacts("kafka")


def _list_copy(tmp_path: Path, lock: str) -> tuple[Path, Path]:
    """A copy of the kafka list with ``lock`` as its lock, and a cache sharing setup's repository."""
    lists = tmp_path / "lists"
    (lists / "kafka").mkdir(parents=True)
    shutil.copy(KAFKA.pom, lists / "kafka" / "pom.xml")
    (lists / "kafka" / "jars.sha256").write_text(lock)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "repository").symlink_to(CACHE / "repository")
    return lists, cache


def test_setup_fetched_exactly_the_locked_kafka_jars_and_a_second_fetch_runs_nothing() -> None:
    locked = KAFKA.locked()
    assert {"kafka_2.13-4.4.0.jar", "kafka-tools-4.4.0.jar", "kafka-clients-4.4.0.jar"} <= locked.keys()
    assert _sums(KAFKA.lib) == locked
    before = {jar: jar.stat().st_mtime_ns for jar in KAFKA.lib.iterdir()}
    assert fetch("kafka") == KAFKA.lib
    assert {jar: jar.stat().st_mtime_ns for jar in KAFKA.lib.iterdir()} == before
    assert classpath("kafka").split(":") == [str(KAFKA.lib / name) for name in sorted(locked)]


def test_a_fetch_whose_jars_differ_from_the_lock_fails_naming_them_and_keeps_no_jar(tmp_path: Path) -> None:
    lines = KAFKA.lock.read_text().splitlines()
    changed = [
        "0" * 64 + "  kafka-clients-4.4.0.jar" if line.endswith(" kafka-clients-4.4.0.jar") else line
        for line in lines
        if not line.endswith(" HdrHistogram-2.2.2.jar")
    ]
    lists, cache = _list_copy(tmp_path, "\n".join([*changed, "0" * 64 + "  forged-1.0.jar"]) + "\n")
    with pytest.raises(FetchError) as refused:
        fetch("kafka", offline=True, cache=cache, lists=lists)
    said = str(refused.value)
    assert "forged-1.0.jar is missing" in said
    assert "HdrHistogram-2.2.2.jar is not in the lock" in said
    assert "kafka-clients-4.4.0.jar has SHA-256" in said
    assert not (cache / "kafka" / "lib").exists()
    assert [p.name for p in (cache / "kafka").iterdir()] == []  # no staging directory left


def test_a_changed_jar_in_the_cache_is_fetched_again(tmp_path: Path) -> None:
    lists, cache = _list_copy(tmp_path, KAFKA.lock.read_text())
    lib = fetch("kafka", offline=True, cache=cache, lists=lists)
    (lib / "kafka-clients-4.4.0.jar").write_bytes(b"not a jar")
    assert fetch("kafka", offline=True, cache=cache, lists=lists) == lib
    assert _sums(lib) == KAFKA.locked()


def test_without_a_lock_or_a_fetch_the_answer_says_what_to_run(tmp_path: Path) -> None:
    lists, cache = _list_copy(tmp_path, "")
    (lists / "kafka" / "jars.sha256").unlink()
    with pytest.raises(FetchError, match="python -m artifacts kafka --lock"):
        fetch("kafka", offline=True, cache=cache, lists=lists)
    with pytest.raises(FetchError, match="make setup"):
        classpath("kafka", cache=cache)
