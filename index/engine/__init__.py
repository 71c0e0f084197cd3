"""The query engine: a loaded table and what is asked of it (search, analogy, keyword and hybrid search, filters,
diagnostics, layouts, text encoders). Imports the store, never the builder."""
