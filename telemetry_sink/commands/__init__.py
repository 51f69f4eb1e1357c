"""The subcommands of ``telemetry-sink``, one module each (``spark`` holds ``rollup`` and ``dashboard``,
which share their Spark options). A module declares its command with ``add_arguments(name, parser)``,
setting the ``run`` function as the parser's default; ``telemetry_sink.cli`` imports a module only
when its command is on the command line, and a module imports what its command runs only when it
runs, so that ``--help`` stays cheap."""

__all__: list[str] = []
