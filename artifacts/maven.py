"""Fetching a pinned list of Maven artifacts into the project's cache, checked against its lock.

A list is a directory of this package holding ``pom.xml`` (the pinned dependencies; Maven resolves what
they need) and ``jars.sha256`` (the lock: ``sha256sum``'s format, one line per jar). ``fetch`` runs
Maven once, with a local repository inside the cache (``CACHE/repository``, never ``~/.m2``) and
checksums strict, copies the resolved jars into ``CACHE/<name>/lib``, and accepts them only if they are
exactly the locked ones: a jar missing, added or changed fails the fetch and leaves no half-filled
directory. Once fetched, ``fetch`` checks the sums and runs nothing, so setup can run it every time and
the tests and tools need no network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["CACHE", "DEPENDENCY_PLUGIN", "Artifacts", "FetchError", "classpath", "fetch"]

HERE: Final = Path(__file__).resolve().parent
CACHE: Final = Path(os.environ.get("TELEMETRY_SINK_MAVEN_CACHE", HERE.parent / ".venv" / "maven"))
"""The project's Maven cache: its own local repository and a ``lib`` directory per list."""
DEPENDENCY_PLUGIN: Final = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
"""Pinned, so that the copy does not depend on the Maven installation's default plugin version."""


class FetchError(RuntimeError):
    """The artifacts could not be fetched, or are not the locked ones."""


@dataclass(frozen=True)
class Artifacts:
    """One pinned list (``name`` is its directory in this package) and where its jars go."""

    name: str
    cache: Path = CACHE
    lists: Path = HERE
    """Where the list's directory is (this package)."""

    @property
    def pom(self) -> Path:
        return self.lists / self.name / "pom.xml"

    @property
    def lock(self) -> Path:
        return self.lists / self.name / "jars.sha256"

    @property
    def lib(self) -> Path:
        return self.cache / self.name / "lib"

    def locked(self) -> dict[str, str]:
        """Jar file name -> its SHA-256, from the lock (empty when there is none yet)."""
        if not self.lock.is_file():
            return {}
        sums = {}
        for line in self.lock.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                digest, name = line.split(maxsplit=1)
                sums[name.lstrip("*")] = digest
        return sums


def _sums(directory: Path) -> dict[str, str]:
    return {jar.name: hashlib.sha256(jar.read_bytes()).hexdigest() for jar in sorted(directory.glob("*.jar"))}


def _differences(found: dict[str, str], locked: dict[str, str]) -> list[str]:
    """What differs between the jars ``found`` and the ``locked`` ones, each as a phrase."""
    problems = [f"{name} is missing" for name in sorted(locked.keys() - found.keys())]
    problems += [f"{name} is not in the lock" for name in sorted(found.keys() - locked.keys())]
    problems += [
        f"{name} has SHA-256 {found[name]}, the lock says {locked[name]}"
        for name in sorted(found.keys() & locked.keys())
        if found[name] != locked[name]
    ]
    return problems


def fetch(
    name: str, *, lock: bool = False, offline: bool = False, cache: Path = CACHE, lists: Path = HERE
) -> Path:
    """The directory holding list ``name``'s jars, fetched with Maven unless already there and locked.
    ``lock``: write the lock from what Maven resolved instead of checking against it; ``offline``: from
    the cache's repository alone. FetchError when Maven fails or the jars are not the locked ones."""
    artifacts = Artifacts(name, cache, lists)
    locked = artifacts.locked()
    if not lock and not locked:
        raise FetchError(f"{artifacts.lock} is missing: run `python -m artifacts {name} --lock` once")
    if not lock and artifacts.lib.is_dir() and not _differences(_sums(artifacts.lib), locked):
        return artifacts.lib
    if shutil.which("mvn") is None:
        raise FetchError("mvn is not on PATH: Maven fetches the pinned jars (Debian: apt-get install maven)")
    artifacts.lib.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="lib-", dir=artifacts.lib.parent))
    try:
        command = [
            "mvn", "--batch-mode", "--quiet", "--strict-checksums", *(["--offline"] if offline else []),
            "-f", str(artifacts.pom),
            f"-Dmaven.repo.local={cache / 'repository'}", f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip().splitlines()
            raise FetchError(f"mvn failed ({done.returncode}): " + " / ".join(said[-5:]))
        found = _sums(staging)
        if lock:
            lines = [f"{digest}  {jar}" for jar, digest in found.items()]
            artifacts.lock.write_text(
                f"# {name}: the jars {artifacts.pom.name} resolves to (python -m artifacts {name} --lock)\n"
                + "\n".join(lines)
                + "\n",
                encoding="utf-8",
            )
        else:
            problems = _differences(found, locked)
            if problems:
                raise FetchError(f"{name}: the fetched jars are not the locked ones: " + "; ".join(problems))
        shutil.rmtree(artifacts.lib, ignore_errors=True)
        staging.rename(artifacts.lib)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return artifacts.lib


def classpath(name: str, cache: Path = CACHE) -> str:
    """List ``name``'s jars as a Java class path, or FetchError if they are not fetched (``make setup``)."""
    lib = Artifacts(name, cache).lib
    jars = sorted(lib.glob("*.jar"))
    if not jars:
        raise FetchError(f"{lib} holds no jars: `make setup` fetches them (python -m artifacts {name})")
    return os.pathsep.join(str(jar) for jar in jars)
