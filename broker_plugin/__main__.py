"""``python -m broker_plugin [--maven-repository URL] [--jar PATH]``: build the broker plugin's jar
(``broker_plugin.build``; with a repository, against the jars ``download_compile_jars`` fetches from
it) and print its path."""

import argparse
import tempfile
from pathlib import Path

from broker_plugin import JAR, build, download_compile_jars

parser = argparse.ArgumentParser(prog="python -m broker_plugin", description=__doc__)
parser.add_argument("--maven-repository", help="download the two jars to compile against from here")
parser.add_argument("--jar", type=Path, default=JAR, help=f"where the jar goes (default {JAR})")
options = parser.parse_args()
if options.maven_repository is None:
    print(build(options.jar))
else:
    with tempfile.TemporaryDirectory() as jars:
        print(build(options.jar, download_compile_jars(options.maven_repository, Path(jars))))
