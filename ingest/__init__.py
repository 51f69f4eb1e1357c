"""The ingest front end: servers, identity, payload checks, quotas, the admin plane, and the front
end's subcommands (``ingest.cli``; the ``telemetry-sink`` command itself is ``telemetry_sink``)."""

__all__: list[str] = []
