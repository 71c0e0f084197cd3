"""Keys from files: ``EMBEDDING_<KEY>_FILE`` names a file holding the value of ``EMBEDDING_<KEY>``, as Docker and
Kubernetes secrets mount them (``/run/secrets/...``), so the key never sits in the environment.

The file's trailing newline is dropped. Both variables given, or a file that cannot be read or is empty, is a
ValueError naming them: the server stops at start-up with that line. A key the settings refuse is named by its file
(``key_files``), not by the variable the user did not set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

PREFIX = "EMBEDDING_"
SUFFIX = "_FILE"


def file_variable(field: str) -> str:
    return f"{PREFIX}{field.upper()}{SUFFIX}"


def key_files(fields: Iterable[str]) -> dict[str, str]:
    """The settings of ``fields`` given by files: for each, its ``*_FILE`` variable and the path it names."""
    environ = {name.upper(): value for name, value in os.environ.items()}  # as the settings: any case
    given = {field: environ.get(file_variable(field), "").strip() for field in fields}
    return {field: f"{file_variable(field)}: {path}" for field, path in given.items() if path}


def read_secret(variable: str, path: str) -> str:
    """The contents of the file ``variable`` names, without its trailing newline."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"{variable}: cannot read {path}: {reason}") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value.strip():
        raise ValueError(f"{variable}: {path} is empty")
    return value


class SecretFiles(PydanticBaseSettingsSource):
    """The settings in ``fields`` read from the files their ``*_FILE`` variables name (unset or empty: not)."""

    def __init__(self, settings_cls: type[BaseSettings], fields: tuple[str, ...]) -> None:
        super().__init__(settings_cls)
        self.fields = fields

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads them all

    def __call__(self) -> dict[str, Any]:
        environ = {name.upper(): value for name, value in os.environ.items()}  # as the settings: any case
        values = {}
        for field in self.fields:
            variable = file_variable(field)
            path = environ.get(variable, "").strip()
            if not path:
                continue
            plain = variable.removesuffix(SUFFIX)
            if environ.get(plain, "").strip():
                raise ValueError(f"{plain} and {variable} are both set: give the key in one of them")
            values[field] = read_secret(variable, path)
        return values
