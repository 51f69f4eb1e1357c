"""The project's Kafka broker plugin: ``telemetry.sink.forwarder.TelemetrySinkForwarder`` (its Java
sources in ``java/``), a ``metric.reporters`` entry that forwards every client-telemetry push a broker
accepts to the sink over OTLP/HTTP, naming the client in resource attributes (docs/broker-plugin.md).

``build`` (``python -m broker_plugin``, run by ``make setup``) compiles it with ``javac`` against Kafka
4.4.0's jars (those ``artifacts`` fetched; it uses only ``kafka-clients`` and SLF4J's API, which every
broker has) into one jar, ``JAR``; it does nothing when the jar is newer than every source.
``python -m broker_plugin --maven-repository URL --jar PATH`` (the image's build stage, which has no
Maven) compiles against just those two jars (``COMPILE_JARS``), downloaded from the repository and
checked against the ``kafka`` list's lock of SHA-256 sums.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Final

from artifacts import Artifacts, FetchError, classpath

__all__ = ["CLASS", "COMPILE_JARS", "JAR", "build", "download_compile_jars"]

SOURCES: Final = Path(__file__).with_name("java")
JAR: Final = SOURCES / "telemetry-sink-broker-plugin.jar"
"""Where ``build`` writes the jar (next to its sources, inside the package)."""
CLASS: Final = "telemetry.sink.forwarder.TelemetrySinkForwarder"
"""The class a broker's ``metric.reporters`` names."""
COMPILE_JARS: Final = {
    "kafka-clients-4.4.0.jar": "org/apache/kafka/kafka-clients/4.4.0",
    "slf4j-api-1.7.36.jar": "org/slf4j/slf4j-api/1.7.36",
}
"""What the plugin is compiled against, by file name: its path in a Maven repository."""


def download_compile_jars(repository: str, directory: Path) -> str:
    """``COMPILE_JARS`` downloaded from the Maven ``repository`` (a URL) into ``directory``, each
    checked against the ``kafka`` list's lock; their class path. FetchError when one differs."""
    locked = Artifacts("kafka").locked()
    jars = []
    for name, path in COMPILE_JARS.items():
        target = directory / name
        with urllib.request.urlopen(f"{repository.rstrip('/')}/{path}/{name}", timeout=120) as answer:
            target.write_bytes(answer.read())
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        if digest != locked.get(name):
            raise FetchError(f"{name} has SHA-256 {digest}, the kafka list's lock says {locked.get(name)}")
        jars.append(str(target))
    return os.pathsep.join(jars)


def build(jar: Path = JAR, compile_classpath: str | None = None) -> Path:
    """Compile the plugin into ``jar`` (against ``compile_classpath``, by default the ``kafka``
    list's jars) unless it is newer than every source; returns ``jar``."""
    sources = sorted(SOURCES.rglob("*.java"))
    if jar.exists() and jar.stat().st_mtime >= max(source.stat().st_mtime for source in sources):
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac: building the broker plugin needs a JDK (make setup installs one)")
    compile_classpath = compile_classpath or classpath("kafka")
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(
            [javac, "--release", "17", "-Xlint:all", "-Werror", "-d", classes, "-cp", compile_classpath,
             *map(str, sources)],
            check=True,
        )  # fmt: skip
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_suffix(".jar.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: telemetry-sink\n\n")
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)
    return jar
