"""The builder: one reader per input format (``sources``), cleaning, the index's choice and construction, training,
documents' import, compaction and the ``embedding-index`` command. Imports the engine and the store."""
