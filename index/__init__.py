"""Embedding tables: import, train, index and query them (offline builder and query engine)."""
