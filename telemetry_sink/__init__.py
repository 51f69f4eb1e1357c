"""The ``telemetry-sink`` command: the one place that sees both the front end and the Spark side."""

__all__: list[str] = []
