"""Delta Lake landing: bronze table schemas, idempotent appends, group commit, maintenance."""

__all__: list[str] = []
