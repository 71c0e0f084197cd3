"""The stored format: a table's artifact (manifest, checksums, publishing, recovery), its tokens, unit rows, per-row
metadata, a documents table's payload, and its write log. Imports nothing else of ``index`` but ``errors``,
``progress`` and ``lazy``."""
