"""``python -m telemetry_sink``: the ``telemetry-sink`` command."""

import sys

from telemetry_sink.cli import main

sys.exit(main())
