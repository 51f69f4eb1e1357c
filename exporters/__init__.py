"""Exporter plugins: where accepted pushes go (default: durable Delta landing). Arrives with issue 4."""

__all__: list[str] = []
