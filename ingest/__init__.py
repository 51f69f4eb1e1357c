"""The ingest front end: servers, identity, payload checks, quotas, and the ``telemetry-sink`` CLI."""

__all__: list[str] = []
