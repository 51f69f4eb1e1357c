"""The ``telemetry-sink`` command line. Subcommands (serve, rollup, dashboard, admin, loadgen,
maintain) arrive with the issues that build them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

__all__ = ["build_parser", "main"]


def _version() -> str:
    try:
        return version("telemetry-sink")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="telemetry-sink",
        description=(
            "A Kafka KIP-714 client-telemetry sink with Kafka-grade quotas: clients ask which "
            "metrics to send and push OTLP payloads, which land durably in Delta Lake tables."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line; with no command, print the help and exit 2."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
