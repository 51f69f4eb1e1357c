"""Pure transforms of the Spark jobs: Arrow/DataFrame in, Arrow/DataFrame out."""

__all__: list[str] = []
