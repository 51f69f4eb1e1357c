"""The project's Kafka broker plugin: ``telemetry.sink.forwarder.TelemetrySinkForwarder`` (its Java
sources in ``java/``), a ``metric.reporters`` entry that forwards every client-telemetry push a broker
accepts to the sink over OTLP/HTTP, naming the client in resource attributes (docs/broker-plugin.md).

``build`` (``python -m broker_plugin``, run by ``make setup``) compiles it with ``javac`` against Kafka
4.4.0's jars (those ``artifacts`` fetched; it uses only ``kafka-clients`` and SLF4J's API, which every
broker has) into one jar, ``JAR``; it does nothing when the jar is newer than every source.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Final

from artifacts import classpath

__all__ = ["CLASS", "JAR", "build"]

SOURCES: Final = Path(__file__).with_name("java")
JAR: Final = SOURCES / "telemetry-sink-broker-plugin.jar"
"""Where ``build`` writes the jar (next to its sources, inside the package)."""
CLASS: Final = "telemetry.sink.forwarder.TelemetrySinkForwarder"
"""The class a broker's ``metric.reporters`` names."""


def build(jar: Path = JAR) -> Path:
    """Compile the plugin into ``jar`` unless it is newer than every source; returns ``jar``."""
    sources = sorted(SOURCES.rglob("*.java"))
    if jar.exists() and jar.stat().st_mtime >= max(source.stat().st_mtime for source in sources):
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac: building the broker plugin needs a JDK (make setup installs one)")
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(
            [javac, "--release", "17", "-Xlint:all", "-Werror", "-d", classes, "-cp", classpath("kafka"),
             *map(str, sources)],
            check=True,
        )  # fmt: skip
        partial = jar.with_suffix(".jar.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: telemetry-sink\n\n")
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)
    return jar
