"""Spark jobs: decode landed OTLP payloads and roll them up for Spark SQL."""

__all__: list[str] = []
