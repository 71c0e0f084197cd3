"""``service.http.app_state.AppState``: the app's state read as Starlette's ``State`` is, its values also plain
attributes, the two kept the same by every way of setting and deleting them."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.datastructures import State

from service.app import create_app
from service.http.app_state import AppState
from service.settings import Settings


def test_values_are_read_as_state_reads_them_and_found_without_getattr() -> None:
    state = AppState({"given": 1})
    state.searcher = "s"
    state["metrics"] = "m"
    assert (state.given, state.searcher, state.metrics) == (1, "s", "m")
    assert (state["given"], state["searcher"], state["metrics"]) == (1, "s", "m")
    assert vars(state) == {"_state": {"given": 1, "searcher": "s", "metrics": "m"}, "given": 1, "searcher": "s",
                           "metrics": "m"}  # fmt: skip
    state.searcher = "t"  # set again: both views
    assert state.searcher == state["searcher"] == "t"
    del state.searcher
    del state["metrics"]
    assert getattr(state, "searcher", None) is None and getattr(state, "metrics", None) is None
    with pytest.raises(AttributeError, match="'AppState' object has no attribute 'searcher'"):
        _ = state.searcher
    with pytest.raises(KeyError):
        _ = state["metrics"]
    assert vars(state) == {"_state": {"given": 1}, "given": 1}


def test_the_app_has_it_with_what_create_app_set(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    assert isinstance(app.state, AppState) and isinstance(app.state, State)
    assert "settings" in vars(app.state) and app.state.settings.data_dir == tmp_path
