"""The ``telemetry-sink`` command: the one package that sees both the front end and the Spark side.

``cli`` is the parser (cheap to import); ``commands`` holds one module per subcommand, including the
client-side admin tool (``commands.admin``, an HTTP client of the admin API)."""

__all__: list[str] = []
