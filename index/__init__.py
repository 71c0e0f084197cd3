"""Embedding tables: import, train, index and query them (offline builder and query engine)."""

__version__ = "0.1.0"
