"""The tables a server process answers for, loaded once at start-up and read-only afterwards."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from rapidfuzz import fuzz, process

from index import artifact
from index.errors import EmbeddingError
from index.table import Table
from service.errors import ApiError

log = logging.getLogger(__name__)


@dataclass
class Registry:
    """Loaded tables by name, and the requested tables that could not be loaded (name -> reason)."""

    data_dir: Path
    requested: list[str] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, data_dir: Path, names: list[str] | None = None, checksums: bool = True) -> Registry:
        """Load ``names`` (default: every table in ``data_dir``); a table that fails is logged and skipped."""
        available = artifact.list_tables(data_dir)
        registry = cls(data_dir=Path(data_dir), requested=list(names) if names is not None else available)
        for name in registry.requested:
            directory = Path(data_dir) / name
            if name not in available:
                registry._fail(name, "no table of that name in the data directory")
                continue
            started = time.perf_counter()
            try:
                table = Table.load(directory, checksums=checksums)
            except EmbeddingError as exc:
                registry._fail(name, exc.message)
                continue
            except Exception as exc:  # a corrupt file can fail inside numpy or FAISS
                log.exception("table %r not loaded", name)
                registry._fail(name, f"{type(exc).__name__} while loading (see the server log)")
                continue
            if table.name != name:  # a table copied or renamed on disk is served under its directory name
                log.warning("table directory %r holds a table built as %r; serving it as %r", name, table.name, name)
                table.manifest["name"] = name
            registry.tables[name] = table
            log.info(
                "table %r loaded: %d rows x %d dims, index %s, %.2fs",
                name,
                table.rows,
                table.dim,
                table.summary()["index"].get("kind"),
                time.perf_counter() - started,
            )
        if not registry.requested:
            log.warning("no tables found in %s", data_dir)
        return registry

    def _fail(self, name: str, reason: str) -> None:
        log.error("table %r not loaded, skipped: %s", name, reason)
        self.failed[name] = reason

    @property
    def ready(self) -> bool:
        """Every requested table is loaded (and there is at least one)."""
        return bool(self.tables) and not self.failed

    def get(self, name: str) -> Table:
        """The loaded table ``name``; 422 for an invalid name, 503 if it failed to load, else 404."""
        artifact.check_name(name)
        table = self.tables.get(name)
        if table is not None:
            return table
        if name in self.failed:
            raise ApiError("not_ready", f"table {name!r} failed to load at start-up (see the server log)", table=name)
        raise ApiError(
            "unknown_table",
            f"no table named {name!r}" + (f"; loaded: {', '.join(sorted(self.tables))}" if self.tables else ""),
            suggestions=self.suggest(name),
        )

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        names = sorted(self.tables)
        matches = process.extract(name, names, scorer=fuzz.WRatio, processor=str.casefold, limit=limit)
        return [match for match, score, _ in matches if score >= 40]
