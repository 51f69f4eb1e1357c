"""Spark jobs: decode landed OTLP payloads and roll them up for Spark SQL. Arrives with issue 6."""

__all__: list[str] = []
