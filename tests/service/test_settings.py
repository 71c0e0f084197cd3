"""Settings fail fast; a table that fails to load is skipped while the others serve; CORS, threads, JSON logs."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import mmap
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import faiss
import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.requests import Request

from service import indexing
from service import main as serve
from service.app import app_from_env, create_app
from service.execute import compute
from service.logs import REQUEST_ID, JsonFormatter, LoggedUrls, PlainFormatter
from service.settings import (
    INTERNAL_VARIABLES,
    KEY_FILE_VARIABLES,
    SUPERVISOR_VARIABLE,
    Settings,
    cores,
    describe_error,
    memory,
)
from service.shard_settings import ShardSettings
from tests import REPO
from tests.examples import console_blocks
from tests.service.conftest import client_for

SETTINGS_VARIABLES = [f"EMBEDDING_{name.upper()}" for name in Settings.model_fields]
README = (REPO / "README.md").read_text()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No EMBEDDING_* or thread variables from the outside; whatever a test sets is undone afterwards."""
    for variable in [*SETTINGS_VARIABLES, *KEY_FILE_VARIABLES, *serve.THREAD_VARIABLES, "PROMETHEUS_MULTIPROC_DIR"]:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_settings_from_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv("EMBEDDING_TABLES", "glove-6b-50d, small")
    clean_env.setenv("EMBEDDING_MAX_K", "50")
    clean_env.setenv("EMBEDDING_CORS_ORIGINS", '["https://a.example", "http://b.example:8080"]')
    clean_env.setenv("EMBEDDING_LOG_FORMAT", "json")
    clean_env.setenv("EMBEDDING_API_KEY", "k3y")
    clean_env.setenv("EMBEDDING_MAX_SCORED_ROWS", "1000000")
    clean_env.setenv("EMBEDDING_MAX_ANSWER_BYTES", "5000000")
    settings = Settings()
    assert settings.max_scored_rows == 1_000_000 and settings.max_answer_bytes == 5_000_000
    assert settings.data_dir == tmp_path and settings.tables == ["glove-6b-50d", "small"]
    assert settings.max_k == 50 and settings.max_batch == 1024 and settings.max_body_bytes == 4 << 20
    assert settings.cors_origins == ["https://a.example", "http://b.example:8080"]
    assert settings.log_format == "json" and settings.api_key is not None
    assert "k3y" not in repr(settings)  # the key is a secret
    assert settings.verify_checksums is True and settings.threads is None


def test_an_empty_cache_dir_is_the_default_not_the_working_directory(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    for empty in ("", " "):  # as a compose file or a ConfigMap leaves it
        clean_env.setenv("EMBEDDING_CACHE_DIR", empty)
        assert Settings().cache_dir is None  # <data_dir>/.cache (Path("") would be ".")
    clean_env.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / "layouts"))
    assert Settings().cache_dir == tmp_path / "layouts"


def test_a_cache_dir_that_cannot_keep_the_layouts_stops_the_server(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file, or a directory this user can neither write nor make: accepted, the first map request of each worker
    warned that its layout was not kept, and every worker computed it again after every restart (a t-SNE map:
    minutes). Refused at start-up, naming what is wrong."""
    (tmp_path / "file").write_text("")
    (tmp_path / "locked").mkdir()
    clean_env.setattr(os, "access", lambda path, mode: Path(path) != tmp_path / "locked")  # root may write anything
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    refusals = {
        "file": "file is not a directory",
        "file/layouts": "file/layouts cannot be made: {0}/file is not a directory",
        "locked": "locked is not writable by this user",
        "locked/a/b": "locked/a/b cannot be made: {0}/locked is not writable by this user",
    }
    for given, refusal in refusals.items():
        clean_env.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / given))
        assert serve.main(["--data-dir", str(tmp_path)]) == 2
        expected = f"embedding-serve: invalid settings: EMBEDDING_CACHE_DIR: {tmp_path}/{refusal.format(tmp_path)}"
        assert errors(capsys) == [expected]
    clean_env.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / "new" / "layouts"))  # made at the first layout kept
    assert Settings().cache_dir == tmp_path / "new" / "layouts"


# Root looks into any directory: the server is then run without the capabilities that let it (as a service's user).
AS_A_USER = () if os.geteuid() else ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


@pytest.mark.skipif(bool(AS_A_USER) and shutil.which("setpriv") is None, reason="root, and no setpriv to drop it")
def test_a_directory_under_one_this_user_cannot_look_into_is_refused_in_one_line(tmp_path: Path) -> None:
    """A data or cache directory under one this user may not search (mode 700, another's): the check's look at it
    raised PermissionError, and the server stopped with a traceback instead of naming the setting."""
    (tmp_path / "data").mkdir()
    (tmp_path / "closed" / "inside").mkdir(parents=True)
    (tmp_path / "closed").chmod(0)
    environment = {k: v for k, v in os.environ.items() if not k.upper().startswith("EMBEDDING_")}
    closed = tmp_path / "closed" / "inside"
    cases = {
        "EMBEDDING_CACHE_DIR": f"EMBEDDING_CACHE_DIR: {closed / 'cache'} cannot be looked at: Permission denied",
        "EMBEDDING_DATA_DIR": f"EMBEDDING_DATA_DIR: {closed} cannot be looked at: Permission denied",
    }
    try:
        for variable, refusal in cases.items():
            given = {"EMBEDDING_DATA_DIR": str(tmp_path / "data"), variable: str(closed)}
            if variable == "EMBEDDING_CACHE_DIR":
                given[variable] = str(closed / "cache")
            done = subprocess.run(
                [*AS_A_USER, sys.executable, "-m", "service.main", "--port", "0"],
                capture_output=True,
                text=True,
                timeout=120,
                env={**environment, **given},
            )
            lines = [line for line in done.stderr.splitlines() if not line.startswith("embedding-serve: warning")]
            assert (done.returncode, lines) == (2, [f"embedding-serve: invalid settings: {refusal}"]), done.stderr
    finally:
        (tmp_path / "closed").chmod(0o755)  # for pytest to remove it


def test_keys_from_files(clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """EMBEDDING_<KEY>_FILE, as Docker and Kubernetes mount secrets: the file's contents without the trailing
    newline; the key and its file both given, or a file that cannot be read or is empty, stop the server."""
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    (tmp_path / "admin").write_text("adm1n-key\n")
    (tmp_path / "read").write_bytes(b"re4d-key\r\n")
    (tmp_path / "write").write_text("first-key-123\nsecond-key-456\n")  # one per line, or as the variable
    clean_env.setenv("EMBEDDING_API_KEY_FILE", str(tmp_path / "admin"))
    clean_env.setenv("embedding_read_api_key_file", str(tmp_path / "read"))  # any case, as the variables
    clean_env.setenv("EMBEDDING_WRITE_KEYS_FILE", str(tmp_path / "write"))
    clean_env.setenv("EMBEDDING_API_KEY", "")  # empty: no key, so the file's
    settings = Settings()
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "adm1n-key"
    assert settings.read_api_key is not None and settings.read_api_key.get_secret_value() == "re4d-key"
    assert settings.write_keys == ["first-key-123", "second-key-456"]
    assert not [line for line in serve.unknown_variables(os.environ) if "_FILE" in line]

    clean_env.setenv("EMBEDDING_API_KEY", "adm1n-key")
    both = "EMBEDDING_API_KEY and EMBEDDING_API_KEY_FILE are both set: give the key in one of them"
    with pytest.raises(ValueError, match=f"^{both}$"):
        Settings()
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a start-up past the check would stop at its port
        port = str(taken.getsockname()[1])
        assert serve.main(["--data-dir", str(tmp_path), "--port", port]) == 2
        assert errors(capsys) == [f"embedding-serve: invalid settings: {both}"]
        clean_env.delenv("EMBEDDING_API_KEY")
        (tmp_path / "empty").write_text("\n")
        for name, why in [("absent", "cannot read {}: No such file or directory"), ("empty", "{} is empty")]:
            clean_env.setenv("EMBEDDING_API_KEY_FILE", str(tmp_path / name))
            assert serve.main(["--data-dir", str(tmp_path), "--port", port]) == 2
            expected = "EMBEDDING_API_KEY_FILE: " + why.format(tmp_path / name)
            assert errors(capsys) == [f"embedding-serve: invalid settings: {expected}"]
    with pytest.raises(SystemExit, match=r"^embedding-serve: invalid settings: EMBEDDING_API_KEY_FILE: .* is empty$"):
        app_from_env()  # under plain uvicorn: one line too
    (tmp_path / "spaced").write_text(" adm1n-key\n")  # the key is checked as the variable's
    clean_env.setenv("EMBEDDING_API_KEY_FILE", str(tmp_path / "spaced"))
    with pytest.raises(ValidationError, match="printable ASCII"):
        Settings()
    # and refused under the name of the variable given, with its file (EMBEDDING_API_KEY is not set)
    (tmp_path / "accented").write_text("first-key-123\nr\u00e9ad-key\n")
    clean_env.setenv("embedding_read_api_key_file", str(tmp_path / "accented"))
    clean_env.setenv("EMBEDDING_WRITE_KEYS_FILE", str(tmp_path / "accented"))
    refused = "an API key must be printable ASCII without surrounding spaces (it is sent in a header)"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        assert serve.main(["--data-dir", str(tmp_path), "--port", str(taken.getsockname()[1])]) == 2
    files = [("API_KEY", "spaced"), ("READ_API_KEY", "accented"), ("WRITE_KEYS", "accented")]
    named = [f"EMBEDDING_{key}_FILE: {tmp_path / file}: {refused}" for key, file in files]
    assert errors(capsys) == [f"embedding-serve: invalid settings: {'; '.join(named)}"]


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("EMBEDDING_DATA_DIR", "/no/such/dir", "EMBEDDING_DATA_DIR"),
        ("EMBEDDING_TABLES", "../etc", "EMBEDDING_TABLES"),
        ("EMBEDDING_TABLES", ",", "EMBEDDING_TABLES"),
        ("EMBEDDING_MAX_K", "0", "EMBEDDING_MAX_K"),
        ("EMBEDDING_MAX_K", "ten", "EMBEDDING_MAX_K"),
        ("EMBEDDING_MAX_BATCH", "-5", "EMBEDDING_MAX_BATCH"),
        ("EMBEDDING_MAX_BODY_BYTES", "10", "EMBEDDING_MAX_BODY_BYTES"),
        ("EMBEDDING_MAX_SCORED_ROWS", "0", "EMBEDDING_MAX_SCORED_ROWS"),
        ("EMBEDDING_MAX_ANSWER_BYTES", "-1", "EMBEDDING_MAX_ANSWER_BYTES"),
        ("EMBEDDING_CORS_ORIGINS", "example.com", "EMBEDDING_CORS_ORIGINS"),
        ("EMBEDDING_CORS_ORIGINS", "http://localhost:99999", "EMBEDDING_CORS_ORIGINS"),
        ("EMBEDDING_CORS_ORIGINS", "https://", "EMBEDDING_CORS_ORIGINS"),
        ("EMBEDDING_LOG_FORMAT", "xml", "EMBEDDING_LOG_FORMAT"),
        ("EMBEDDING_THREADS", "0", "EMBEDDING_THREADS"),
        ("EMBEDDING_VERIFY_CHECKSUMS", "maybe", "EMBEDDING_VERIFY_CHECKSUMS"),
    ],
)
def test_bad_settings_fail_fast(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, named: str
) -> None:
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv(variable, value)
    with pytest.raises(ValidationError) as info:
        Settings()
    line = describe_error(info.value)
    assert "\n" not in line and named in line


INT64_MAX = (1 << 63) - 1  # the largest integer JSON answers (orjson) hold


@pytest.mark.parametrize("name", [name for name, field in Settings.model_fields.items() if field.annotation is int])
def test_every_count_has_a_bound_the_answers_can_hold(clean_env: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    """A count past every sensible value (EMBEDDING_MAX_BODY_BYTES=99999999999999999999999) is refused at start-up,
    naming it: accepted, it made GET /v1/limits a 500 (an integer past 64 bits, which JSON answers cannot hold)."""
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv(f"EMBEDDING_{name.upper()}", str(INT64_MAX + 1))
    with pytest.raises(ValidationError) as info:
        Settings()
    refused = f"invalid settings: EMBEDDING_{name.upper()}='{INT64_MAX + 1}': must be a whole number from "
    assert describe_error(info.value).startswith(refused)


@pytest.mark.parametrize("name", [name for name, field in Settings.model_fields.items() if field.annotation is float])
def test_every_time_has_a_bound(clean_env: pytest.MonkeyPatch, tmp_path: Path, name: str) -> None:
    """A number of seconds past every sensible value is refused at start-up, naming it: accepted, an infinite
    EMBEDDING_COMPACT_SECONDS (meant as "never by age") also kept a failed compaction from ever being tried again."""
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv(f"EMBEDDING_{name.upper()}", "inf")
    with pytest.raises(ValidationError) as info:
        Settings()
    assert describe_error(info.value).startswith(f"invalid settings: EMBEDDING_{name.upper()}='inf': must be a number ")


@pytest.mark.parametrize(
    ("variable", "value", "refusal"),
    [
        (
            "EMBEDDING_MAX_BODY_BYTES",
            "10MB",
            "EMBEDDING_MAX_BODY_BYTES='10MB': must be a whole number from 1024 to 1073741824",
        ),
        ("EMBEDDING_MAX_K", "", "EMBEDDING_MAX_K='': must be a whole number from 1 to 100000"),
        (
            "EMBEDDING_HEADER_TIMEOUT",
            "10s",
            "EMBEDDING_HEADER_TIMEOUT='10s': must be a number from 1 to 3600",
        ),
        ("EMBEDDING_COMPACT_SECONDS", "-1", "EMBEDDING_COMPACT_SECONDS='-1': must be a number from 0 to 31536000"),
        ("EMBEDDING_WRITE_SYNC", "enabled", "EMBEDDING_WRITE_SYNC='enabled': must be true or false"),
        (
            "EMBEDDING_MAP_TSNE_ROWS",
            "90",
            "EMBEDDING_MAP_TSNE_ROWS='90': must be a whole number from 91 (what a t-SNE map of perplexity 30 needs) "
            "to 100000, or 0 (t-SNE maps off)",
        ),
        ("EMBEDDING_PARTIAL", "", "EMBEDDING_PARTIAL='': must be true or false"),
        (
            "EMBEDDING_SHARD_TIMEOUT",
            "0",
            "EMBEDDING_SHARD_TIMEOUT='0': must be a number from 0.1 to 600",
        ),
        (
            "EMBEDDING_LOG_LEVEL",
            "warn",
            "EMBEDDING_LOG_LEVEL='warn': Input should be 'critical', 'error', 'warning', 'info' or 'debug'",
        ),
        (
            "EMBEDDING_WRITE_KEYS",
            '["s3cret", 7]',
            "EMBEDDING_WRITE_KEYS.1: Input should be a valid string",
        ),  # no key shown
    ],
)
def test_a_refused_value_is_named_with_what_is_allowed(
    clean_env: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    refusal: str,
) -> None:
    """The refusal names the variable, the value given and what the setting takes: pydantic's own words named
    neither the value nor, for a value that is no number at all (10MB for bytes), the range."""
    clean_env.setenv(variable, value)
    assert serve.main(["--data-dir", str(tmp_path)]) == 2
    assert errors(capsys) == [f"embedding-serve: invalid settings: {refusal}"]


@pytest.mark.parametrize(
    ("variable", "least"),
    [
        ("EMBEDDING_HEADER_TIMEOUT", "1"),
        ("EMBEDDING_BODY_TIMEOUT", "1"),
        ("EMBEDDING_SEND_TIMEOUT", "1"),
        ("EMBEDDING_KEEP_ALIVE_TIMEOUT", "1"),
        ("EMBEDDING_SHARD_TIMEOUT", "0.1"),
    ],
)
def test_a_timeout_too_short_to_work_is_refused_at_the_start(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], variable: str, least: str
) -> None:
    """A time-out of 0.001 s was taken: every request then timed out (408 before its head arrived, a shard's
    answer never in time). Refused in one line naming the value and the range; the least value is taken."""
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    clean_env.setenv(variable, "0.001")
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    most = "600" if variable == "EMBEDDING_SHARD_TIMEOUT" else "3600"
    refusal = f"embedding-serve: invalid settings: {variable}='0.001': must be a number from {least} to {most}"
    assert errors(capsys) == [refusal]
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv(variable, least)
    settings = ShardSettings() if variable == "EMBEDDING_SHARD_TIMEOUT" else Settings()
    assert getattr(settings, variable.removeprefix("EMBEDDING_").lower()) == float(least)


def test_the_tsne_map_rows_are_checked_at_the_start(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """EMBEDDING_MAP_TSNE_ROWS from 1 to 90 (fewer rows than a t-SNE map of perplexity 30 takes) is refused when the
    server starts: it started, and refused every request for a t-SNE map. 0 (off) and 91 are taken. Every value
    refused names the one range taken: 'abc' was told "from 0 to 100000", and 50 then refused."""
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    taken = "must be a whole number from 91 (what a t-SNE map of perplexity 30 needs) to 100000, or 0 (t-SNE maps off)"
    for rows in ("1", "90", "abc", "-1", "100001"):
        clean_env.setenv("EMBEDDING_MAP_TSNE_ROWS", rows)
        with pytest.raises(ValidationError) as info:
            Settings()
        assert describe_error(info.value) == f"invalid settings: EMBEDDING_MAP_TSNE_ROWS={rows!r}: {taken}"
    for rows in ("0", "91", "100000"):
        clean_env.setenv("EMBEDDING_MAP_TSNE_ROWS", rows)
        assert Settings().map_tsne_rows == int(rows)


def test_max_hits_below_max_k_is_refused(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hits are items x k: with EMBEDDING_MAX_HITS below EMBEDDING_MAX_K, a k that max_k allows was refused at every
    request, though GET /v1/limits advertised it."""
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv("EMBEDDING_MAX_HITS", "500")
    with pytest.raises(ValidationError) as info:
        Settings()
    assert describe_error(info.value) == (
        "invalid settings: EMBEDDING_MAX_HITS=500 is less than EMBEDDING_MAX_K=1000: one query at k 1000 would "
        "always be refused; raise EMBEDDING_MAX_HITS or lower EMBEDDING_MAX_K"
    )
    clean_env.setenv("EMBEDDING_MAX_K", "500")
    assert Settings().max_hits == 500  # a query at EMBEDDING_MAX_K fits


def test_the_limits_are_answered_at_their_largest_values(small_data_dir: Path) -> None:
    """Every limit at the largest value its setting takes: GET /v1/limits answers them."""
    largest = {
        name: max(bound.le for bound in field.metadata if hasattr(bound, "le"))
        for name, field in Settings.model_fields.items()
        if field.annotation is int
    }
    assert all(value <= INT64_MAX for value in largest.values()), largest
    with client_for(data_dir=small_data_dir, **largest) as client:
        answer = client.get("/v1/limits")
    assert answer.status_code == 200, answer.text
    assert answer.json()["max_body_bytes"] == largest["max_body_bytes"]


def test_embedding_serve_exits_non_zero_on_bad_settings(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve.main(["--data-dir", "/no/such/dir"]) == 2
    assert errors(capsys) == ["embedding-serve: invalid settings: --data-dir: /no/such/dir is not a directory"]
    assert serve.main(["--workers", "0"]) == 2
    capsys.readouterr()
    assert serve.main(["--port", "84246"]) == 2  # past 65535: refused, not wrapped round to another port
    assert "--port must be from 0 to 65535" in capsys.readouterr().err
    for threads in ("abc", "0", "-3", ""):  # never replaced by a default without a word
        clean_env.setenv("EMBEDDING_THREADS", threads)
        assert serve.main(["--data-dir", "/tmp"]) == 2, threads
        assert "EMBEDDING_THREADS" in capsys.readouterr().err
    clean_env.delenv("EMBEDDING_THREADS")
    assert serve.main(["--data-dir", "/tmp", "--threads", "0"]) == 2
    assert "--threads='0'" in capsys.readouterr().err
    clean_env.delenv("EMBEDDING_THREADS")  # the option is passed on as the variable
    assert serve.main(["--data-dir", ""]) == 2  # not the working directory
    assert "--data-dir: is empty" in capsys.readouterr().err


def test_an_empty_host_is_refused_not_every_interface(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--host ""`` (as ``--host "$HOST"`` leaves it with HOST unset) is every interface to a socket: the server
    listened on 0.0.0.0 and ::, open to the network, where the default is the loopback alone."""
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    for empty in ("", " "):
        assert serve.main(["--data-dir", str(tmp_path), "--host", empty, "--port", "0"]) == 2
        expected = (
            "embedding-serve: --host is empty: name an interface (the default is 127.0.0.1; 0.0.0.0 for all of them)"
        )
        assert errors(capsys) == [expected]


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines on stderr but warnings (of the variables the tests' environment may hold: EMBEDDING_TEST_CACHE)."""
    return [line for line in capsys.readouterr().err.splitlines() if not line.startswith("embedding-serve: warning")]


def test_a_port_it_cannot_listen_on_stops_it_before_the_tables_load(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port in use, or an address of no interface here: one line and exit 2 at once, not uvicorn's error line
    among others once every table is loaded (minutes for large ones), with one worker or several."""
    loaded: list[object] = []
    clean_env.setattr(serve, "start_deferred_builds", loaded.append)  # what comes after the check
    refused = "embedding-serve: cannot listen on {}:{}: {}"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            assert serve.main(["--data-dir", str(tmp_path), "--port", str(port), "--workers", workers]) == 2
            in_use = (  # the port suggested is another one (a fixed 9000 was the one in use when --port 9000)
                "Address already in use; another process listens there: stop it, or choose another port (--port "
                f"{port + 1}, make run PORT={port + 1})"
            )
            assert errors(capsys) == [refused.format("127.0.0.1", port, in_use)]
    assert serve.main(["--data-dir", str(tmp_path), "--host", "192.0.2.1", "--port", str(port)]) == 2  # TEST-NET-1
    assert errors(capsys) == [refused.format("192.0.2.1", port, "Cannot assign requested address")]
    assert loaded == []
    assert serve.listen_problem("127.0.0.1", port) == ""  # free again
    with contextlib.ExitStack() as highest:
        with contextlib.suppress(OSError):  # another process may hold it: in use all the same
            highest.enter_context(socket.create_server(("127.0.0.1", 65535)))
        assert serve.listen_problem("127.0.0.1", 65535).endswith("(--port 65534, make run PORT=65534)")


def test_a_metrics_directory_that_cannot_hold_the_metrics_stops_it(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PROMETHEUS_MULTIPROC_DIR set (prometheus_client then keeps every metric in files there): a directory that is
    not there or not writable would fail every request (and the app's start-up, so no table would load)."""
    (tmp_path / "file").write_text("")
    unwritable = tmp_path / "unwritable"
    unwritable.mkdir()
    clean_env.setattr(os, "access", lambda path, mode: Path(path) != unwritable)  # root may write anything
    with socket.create_server(("127.0.0.1", 0)) as taken:  # a start-up past the check stops at its port
        port = str(taken.getsockname()[1])
        for directory, why in [("absent", "is not a directory"), ("file", "is not a directory"), ("unwritable", "")]:
            for variable in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):  # its older name too
                clean_env.setenv(variable, str(tmp_path / directory))
                for workers in ("1", "2"):
                    assert serve.main(["--data-dir", str(tmp_path), "--port", port, "--workers", workers]) == 2
                    expected = f"{variable}: {tmp_path / directory} {why or 'is not writable by this user'}"
                    assert errors(capsys) == [f"embedding-serve: {expected} (where the workers keep their metrics)"]
                clean_env.delenv(variable)
    environ = {"PROMETHEUS_MULTIPROC_DIR": "", "OTHER": "x"}
    assert serve.metrics_dir_problem(environ) == "" and environ == {"OTHER": "x"}  # empty: unset, not "."


def test_a_variable_that_is_no_setting_is_named_at_start_up(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The settings ignore other EMBEDDING_* variables: a misspelt one is named, with the setting meant."""
    clean_env.setenv("EMBEDDING_READ_KEY", "s3cret-read-key")  # ignored: every read would stay open
    clean_env.setenv("EMBEDDING_MAXK", "5")
    clean_env.setenv("embedding_max_k", "5")  # a setting: their names are not case-sensitive
    clean_env.setenv(SUPERVISOR_VARIABLE, "1")  # embedding-serve's own
    with socket.create_server(("127.0.0.1", 0)) as taken:  # and then the start-up stops, at its port
        assert serve.main(["--data-dir", str(tmp_path), "--port", str(taken.getsockname()[1])]) == 2
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    ignored = "embedding-serve: warning: {} is not a setting of embedding-serve and is ignored (did you mean {}?)"
    assert ignored.format("EMBEDDING_MAXK", "EMBEDDING_MAX_K") in warnings
    assert ignored.format("EMBEDDING_READ_KEY", "EMBEDDING_READ_API_KEY") in warnings
    assert not [line for line in warnings if "max_k " in line or SUPERVISOR_VARIABLE in line or "s3cret" in line]
    clean_env.setenv("EMBEDDING_MAX_K", "0")  # refused: named after the warning that may explain it
    clean_env.delenv("embedding_max_k")
    assert serve.main(["--data-dir", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    refusal = "embedding-serve: invalid settings: EMBEDDING_MAX_K='0': must be a whole number from 1 to 100000"
    assert ignored.format("EMBEDDING_READ_KEY", "EMBEDDING_READ_API_KEY") in lines and lines[-1] == refusal
    assert indexing.STATUS_VARIABLE in INTERNAL_VARIABLES
    for name in Settings.model_fields:  # every setting is documented, by its variable
        assert f"`EMBEDDING_{name.upper()}`" in README, name


# The defaults the tables give in words, not as the value (None: unset).
WORDED_DEFAULTS = {"tables": "all", "threads": "OMP_NUM_THREADS", "cache_dir": "<data_dir>/.cache"}


def documented_defaults(path: Path) -> dict[str, str]:
    """Each variable of ``path``'s tables with a Default column, and the default shown (its first code span)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        if re.match(r"\| (Variable|Setting) \| Default \|", line):
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                variable, default = (cell.strip() for cell in row.split("|")[1:3])
                code = re.search(r"`([^`]*)`", default)
                found[variable.strip("`")] = code.group(1) if code else default.split()[0]
    return found


def shown_default(name: str, value: object) -> str:
    if value is None or value == [] or value == {}:
        return WORDED_DEFAULTS.get(name, "none")
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_documented_defaults_are_the_settings_defaults() -> None:
    """README's configuration table names every setting, the front's too, with its real default; so does the
    table of docs/operations.md's "Facing clients directly" for the settings it names."""
    fields = {**Settings.model_fields, **ShardSettings.model_fields}
    for path in (REPO / "README.md", REPO / "docs" / "operations.md"):
        documented = documented_defaults(path)
        assert documented, path.name
        for variable, shown in documented.items():
            name = variable.removeprefix("EMBEDDING_").lower()
            assert name in fields, f"{path.name}: {variable} is not a setting"
            default = fields[name].get_default(call_default_factory=True)
            if name == "data_dir":
                assert Path(shown) == default, (path.name, variable, shown)
            else:
                assert shown == shown_default(name, default), (path.name, variable, shown, default)
    readme = documented_defaults(REPO / "README.md")
    assert sorted(readme) == sorted(f"EMBEDDING_{name.upper()}" for name in fields)


def test_start_up_lines_are_json_lines_in_json_format(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With JSON logs, each line embedding-serve writes before its logging is configured (a refusal of the command
    line or of the settings, a warning) is one object as the JsonFormatter writes them; plain lines are unchanged."""

    def lines() -> list[dict[str, str]]:
        entries = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
        assert all(list(entry) == ["time", "level", "logger", "message"] for entry in entries)
        return [{"level": entry["level"], "message": entry["message"]} for entry in entries]

    clean_env.setenv("EMBEDDING_LOG_FORMAT", "json")
    with pytest.raises(SystemExit, match="2"):
        serve.main(["--port", "x"])
    assert lines() == [{"level": "error", "message": "argument --port: invalid int value: 'x'"}]
    assert serve.main(["--workers", "0"]) == 2
    assert lines() == [{"level": "error", "message": "--workers must be at least 1"}]
    clean_env.delenv("EMBEDDING_TEST_CACHE", raising=False)  # of the tests: the only misspelt variable is this one
    clean_env.setenv("EMBEDDING_MAXK", "5")
    misspelt = "EMBEDDING_MAXK is not a setting of embedding-serve and is ignored (did you mean EMBEDDING_MAX_K?)"
    clean_env.setenv("EMBEDDING_MAX_K", "0")  # refused: after the warning, which may say why
    assert serve.main(["--data-dir", str(tmp_path)]) == 2
    refused = {"level": "error", "message": serve.settings_problem(Settings)}
    assert lines() == [{"level": "warning", "message": misspelt}, refused]
    clean_env.delenv("EMBEDDING_MAX_K")
    clean_env.setattr(serve, "cores", lambda: 1)
    clean_env.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # not one made for the workers, and undone after
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # stops after the warnings
    with pytest.raises(SystemExit, match="3"):
        serve.main(["--data-dir", str(tmp_path), "--port", "0", "--workers", "2"])
    overcommitted = "2 workers x 1 threads exceeds 1 cores"
    assert lines() == [{"level": "warning", "message": misspelt}, {"level": "warning", "message": overcommitted}]
    clean_env.delenv("EMBEDDING_LOG_FORMAT")  # the option alone, and a plain refusal without it
    with pytest.raises(SystemExit, match="2"):
        serve.main(["--log-format", "json", "--port", "x"])
    assert lines() == [{"level": "error", "message": "argument --port: invalid int value: 'x'"}]
    assert serve.main(["--data-dir", str(tmp_path), "--workers", "0"]) == 2
    assert capsys.readouterr().err == "embedding-serve: --workers must be at least 1\n"
    assert serve.main(["--data-dir", str(tmp_path), "--workers", "5"]) == 2  # cores() is 1 here
    assert capsys.readouterr().err == (
        "embedding-serve: --workers must be at most 4 (4 x the 1 core this process may use), not 5: each worker is "
        "a process of its own, and more than the cores only take memory and share them\n"
    )


def test_help_says_which_variable_each_option_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    """An option that overrides a setting names its variable; the others are said to be options only."""
    with pytest.raises(SystemExit):
        serve.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    actions = [action for action in serve.parser()._actions if action.dest != "help"]
    overriding = {action.option_strings[0]: re.findall(r"EMBEDDING_\w+", action.help or "") for action in actions}
    assert {option for option, named in overriding.items() if not named} == {
        "--host",
        "--port",
        "--workers",
        "--no-access-log",
    }
    assert "--host, --port, --workers and --no-access-log are options only" in text
    for option, named in overriding.items():
        assert named in ([], [f"EMBEDDING_{option[2:].replace('-', '_').upper()}"]), option
    assert set(re.findall(r"EMBEDDING_\w+", text)) <= set(SETTINGS_VARIABLES)


def test_the_app_factory_refuses_bad_settings_in_one_line_without_their_values(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under plain ``uvicorn --factory service.app:app_from_env``: pydantic's error would show each value, keys
    included, in a traceback. The line is embedding-serve's own, in either log format."""
    clean_env.delenv("EMBEDDING_TEST_CACHE", raising=False)  # of the tests: embedding-serve would warn of it
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv("EMBEDDING_API_KEY", "s3cret-admin-k\u00e9y")
    clean_env.setenv("EMBEDDING_MAX_K", "0")
    for log_format in ("plain", "json"):
        clean_env.setenv("EMBEDDING_LOG_FORMAT", log_format)
        with pytest.raises(SystemExit) as info:
            app_from_env()
        line = str(info.value.code)
        assert "\n" not in line and "s3cret" not in line and info.value.__suppress_context__
        assert serve.main([]) == 2
        said = capsys.readouterr().err
        if log_format == "json":  # the same object but for its time
            line, said = (re.sub(r'^\{"time":"[^"]*",', "{", text) for text in (line, said))
        assert said == line + "\n"
    message = json.loads(line)["message"]
    assert (
        message.startswith("invalid settings: EMBEDDING_MAX_K='0': ")
        and "EMBEDDING_API_KEY: an API key must" in message
    )


def test_a_data_dir_this_user_cannot_read_is_refused(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the user cannot list (as root, everything can be: the check is asked of the system, faked here)."""
    clean_env.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    with pytest.raises(ValidationError) as info:
        Settings()
    assert "EMBEDDING_DATA_DIR" in describe_error(info.value) and "not readable" in describe_error(info.value)


BAD = {"EMBEDDING_MAX_K": "0", "EMBEDDING_SHARDS": "nonsense"}  # one of the server's settings, one of a front's


def test_bad_settings_stop_the_server_before_the_http_stack_is_imported(tmp_path: Path) -> None:
    """In a fresh interpreter, as ``embedding-serve`` starts: the settings are checked before uvicorn, FastAPI and
    the engine are imported, so a wrong value costs the process a fraction of its start-up."""
    script = f"""
import os, sys
from service.main import main
for variable, value in {BAD!r}.items():
    os.environ[variable] = value
    code = main(["--data-dir", {str(tmp_path)!r}])
    del os.environ[variable]
    loaded = {{m.split(".")[0] for m in sys.modules}} & {{"fastapi", "uvicorn", "starlette", "faiss"}}
    print(variable, code, *sorted(loaded))
"""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, env=environment
    )
    assert done.stdout.splitlines() == [f"{variable} 2" for variable in BAD], (done.stdout, done.stderr[-3000:])
    refusals = done.stderr.splitlines()  # one line each, naming the variable
    assert [line.split(":")[:2] for line in refusals] == [["embedding-serve", " invalid settings"]] * 2, refusals
    assert all(variable in line for line, variable in zip(refusals, BAD, strict=True)), refusals


REFUSAL_PAGES = ("README.md", "docs/api.md")


def documented_refusals() -> list[tuple[str, str, list[str]]]:
    """The ``$ ... embedding-serve ...`` examples of :data:`REFUSAL_PAGES` that show the settings refused: each
    page's name, its command and the lines shown after it."""
    found = []
    for page in REFUSAL_PAGES:
        for _, block in console_blocks(REPO / page):
            for i, line in enumerate(block):
                shown = list(itertools.takewhile(lambda after: not after.startswith("$ "), block[i + 1 :]))
                if line.startswith("$ ") and "embedding-serve " in line and "invalid settings:" in " ".join(shown):
                    found.append((page, line.removeprefix("$ "), shown))
    return found


def test_the_documented_refusals_print_what_the_docs_show(tmp_path: Path) -> None:
    """README.md's and docs/api.md's settings that ``embedding-serve`` refuses, run as written in bash (in a folder
    with ``./data``; the key file in a folder of the test's own, written with a leading space where the example says
    the key begins with one): each exits 2 printing the lines shown, and nothing else."""
    runs = documented_refusals()
    assert len(runs) >= 5, runs
    (tmp_path / "data").mkdir()
    (tmp_path / "bin").mkdir()
    serve_command = tmp_path / "bin" / "embedding-serve"
    serve_command.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m service.main "$@"\n')
    serve_command.chmod(0o755)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    environment["PATH"] = f"{tmp_path / 'bin'}:{environment['PATH']}"
    environment["PYTHONPATH"] = str(REPO)
    for page, command, shown in runs:
        key_file = secrets / "api_key"
        key_file.unlink(missing_ok=True)
        if "begins with a space" in command:
            key_file.write_text(" s3cret\n")
        done = subprocess.run(
            ["bash", "-c", command.replace("/run/secrets/", f"{secrets}/")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=environment,
            cwd=tmp_path,
        )
        real = (done.stdout + done.stderr).replace(f"{secrets}/", "/run/secrets/").splitlines()
        assert (done.returncode, real) == (2, shown), (page, command)


def test_a_refusal_names_the_option_that_gave_the_setting(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--data-dir ""`` was refused as "EMBEDDING_DATA_DIR: is empty", a variable the user had not set: a setting
    an option gave is named by that option, one the environment gave by its variable, both in one line."""
    for variable in serve.THREAD_VARIABLES:  # main sets them: undone after the test
        clean_env.setenv(variable, "1")
    clean_env.setenv("EMBEDDING_DATA_DIR", "")
    assert serve.main(["--data-dir", "", "--port", "0"]) == 2
    assert errors(capsys) == [
        "embedding-serve: invalid settings: --data-dir: is empty: name a directory (the default is ./data)"
    ]
    clean_env.setenv("EMBEDDING_DATA_DIR", "")  # main wrote the option's value there: the environment's again
    assert serve.main(["--port", "0"]) == 2
    assert errors(capsys) == [
        "embedding-serve: invalid settings: EMBEDDING_DATA_DIR: is empty: name a directory (the default is ./data)"
    ]
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv("EMBEDDING_MAX_K", "0")
    for written in ("EMBEDDING_TABLES", "EMBEDDING_THREADS"):  # main writes the options there: undone after the test
        clean_env.setenv(written, "")
    assert serve.main(["--threads", "0", "--tables", " , ", "--port", "0"]) == 2
    assert errors(capsys) == [
        "embedding-serve: invalid settings: --tables: give at least one table name, or leave it unset to load every "
        "table; EMBEDDING_MAX_K='0': must be a whole number from 1 to 100000; --threads='0': must be a whole number "
        "from 1 to 512"
    ]


def test_threads_per_worker(clean_env: pytest.MonkeyPatch) -> None:
    assert serve.threads_per_worker(None) == 1
    clean_env.setenv("OMP_NUM_THREADS", "3")
    assert serve.threads_per_worker(None) == 3
    assert serve.threads_per_worker(2) == 2


# EMBEDDING_THREADS as given -> the number of threads every reader takes, None for a value each refuses
THREADS_GIVEN = {
    "2": 2,
    " 2": 2,
    "+2": 2,
    "2.0": 2,
    "\t512\n": 512,
    "1": 1,
    "0": None,
    "513": None,
    "-1": None,
    "": None,
    "abc": None,
    "2.5": None,
    "2.": None,
    "1e1": None,
    "1_0": None,
    "0x2": None,
    "\uff12": None,  # a full-width 2: Python's int() took it, the settings did not
}


def test_the_threads_variable_is_read_alike_by_every_reader(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """EMBEDDING_THREADS is read by embedding-serve's start-up (before numpy loads), its settings, embedding-index
    and a transformer table's encoder: each took its own values ("2.0" the server's, a full-width "2" the builder's);
    all of them take the same ones, and refuse the others in the same words, naming the value and the range."""
    from index.engine.transformer_encoder import threads
    from tests.cli import run_cli

    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    for given, number in THREADS_GIVEN.items():
        clean_env.setenv("EMBEDDING_THREADS", given)
        refusal = f"EMBEDDING_THREADS={given!r}: must be a whole number from 1 to 512"
        built = run_cli("list", "--data-dir", tmp_path)
        assert serve.threads_given({"embedding_threads": given}) == number, given  # the name in any case
        if number is None:
            with pytest.raises(ValidationError) as info:
                Settings()
            assert describe_error(info.value) == f"invalid settings: {refusal}"
            assert (built.code, built.err) == (1, f"embedding-index: error: {refusal}\n")
            with pytest.raises(ValueError, match="must be a whole number from 1 to 512"):
                threads()
        else:
            assert Settings().threads == number, given
            assert built.code == 0 and os.environ["EMBEDDING_THREADS"] == str(number)  # written back as a number
            assert threads() == number
    clean_env.setenv("EMBEDDING_THREADS", "0")
    clean_env.setenv("EMBEDDING_MAX_K", "0")
    with pytest.raises(ValidationError) as info:  # named beside the other settings refused, as before
        Settings()
    assert describe_error(info.value) == (
        "invalid settings: EMBEDDING_MAX_K='0': must be a whole number from 1 to 100000; EMBEDDING_THREADS='0': "
        "must be a whole number from 1 to 512"
    )


def stopped_after_threads(clean_env: pytest.MonkeyPatch) -> list[tuple[int | None, str]]:
    """``serve.main`` stopped (exit 3) just after the threads' setting is read: each start's (settings.threads,
    OMP_NUM_THREADS as main set it), in the list returned."""
    started: list[tuple[int | None, str]] = []

    def stop(settings: Settings) -> None:  # what follows the threads' setting
        started.append((settings.threads, os.environ["OMP_NUM_THREADS"]))
        sys.exit(3)

    clean_env.setattr(serve, "start_deferred_builds", stop)
    for variable in serve.THREAD_VARIABLES:  # main sets them: undone after the test
        clean_env.setenv(variable, "1")
    return started


def test_the_threads_setting_is_the_number_the_settings_read(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """EMBEDDING_THREADS as the settings accept it (" 2", "2.0", "+2"): its number of threads, not 1. The start-up
    read it again by its digits alone and gave the workers 1 thread each without a word."""
    started = stopped_after_threads(clean_env)
    for given in (" 2", "2.0", "+2", "2"):
        clean_env.setenv("EMBEDDING_THREADS", given)
        with pytest.raises(SystemExit, match="3"):
            serve.main(["--data-dir", str(tmp_path), "--port", "0"])
    assert started == [(2, "2")] * 4


OMP_REFUSAL = (
    "must be a whole number from 1 to 512, or OpenMP's comma-separated list of them whose first is a worker's "
    "threads (or set EMBEDDING_THREADS)"
)


def test_omp_threads_past_the_bound_are_refused_in_one_line(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OMP_NUM_THREADS, the threads per worker without EMBEDDING_THREADS, past what EMBEDDING_THREADS takes: it was
    written as EMBEDDING_THREADS after the settings' check, and the server stopped with pydantic's traceback."""
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    for variable in serve.THREAD_VARIABLES:  # main sets them: undone after the test
        clean_env.setenv(variable, "1")
    clean_env.setenv("OMP_NUM_THREADS", "1000")
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    assert errors(capsys) == [f"embedding-serve: OMP_NUM_THREADS='1000': {OMP_REFUSAL}"]
    clean_env.setenv("EMBEDDING_THREADS", "0")  # which wins: its own refusal, not OMP_NUM_THREADS's
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    assert errors(capsys) == [
        "embedding-serve: invalid settings: EMBEDDING_THREADS='0': must be a whole number from 1 to 512"
    ]
    clean_env.setenv("EMBEDDING_THREADS", "2")
    with pytest.raises(SystemExit, match="3"):
        serve.main(["--data-dir", str(tmp_path), "--port", "0"])


# OMP_NUM_THREADS as given: libgomp's reading of each (spaces around a number, a list's first number) or its refusal
OMP_VALUES = (" 4", "4,2", "4 , 2", "\t3\n", "+3", "4, +2", "2,1,1", "", " ", "0", "-1", "abc", "4,", "4,,2", "4,0")


def test_omp_threads_are_read_as_libgomp_reads_them(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OMP_NUM_THREADS=" 4" or "4,2" (OpenMP's list, one number per nesting level) gave a worker 1 thread without a
    word. Each value is read as FAISS's own OpenMP runtime reads it, in a process of its own: the same number of
    threads, or a refusal in one line where the runtime calls the value invalid (and would run on every core)."""
    for value in OMP_VALUES:
        done = subprocess.run(
            [sys.executable, "-c", "import faiss; print(faiss.omp_get_max_threads())"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": value},
        )
        if "Invalid value for environment variable OMP_NUM_THREADS" in done.stderr:
            with pytest.raises(ValueError) as info:
                serve.omp_threads(value)
            assert str(info.value) == f"OMP_NUM_THREADS={value!r}: {OMP_REFUSAL}"
        else:
            assert serve.omp_threads(value) == int(done.stdout), repr(value)
    assert [serve.omp_threads(value) for value in (" 4", "4,2", "\t3\n")] == [4, 4, 3]  # the runtime took them

    started = stopped_after_threads(clean_env)
    for value in (" 3", "4,2", "", " "):  # empty: unset, as an environment file's OMP_NUM_THREADS= means
        clean_env.delenv("EMBEDDING_THREADS", raising=False)  # main writes it
        clean_env.setenv("OMP_NUM_THREADS", value)
        with pytest.raises(SystemExit, match="3"):
            serve.main(["--data-dir", str(tmp_path), "--port", "0"])
    assert started == [(3, "3"), (4, "4"), (1, "1"), (1, "1")]
    clean_env.delenv("EMBEDDING_THREADS")
    clean_env.setenv("OMP_NUM_THREADS", "4,")
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    assert errors(capsys) == [f"embedding-serve: OMP_NUM_THREADS='4,': {OMP_REFUSAL}"]


def test_blas_starts_with_the_threads_setting_when_tables_are_named(tmp_path: Path) -> None:
    """In a fresh interpreter, as ``embedding-serve --threads 1`` starts one worker in its own process: the check of
    EMBEDDING_TABLES loads numpy, which fixed BLAS's threads at every core before the start-up set them (concurrent
    exact queries then fight over the cores). With the tables named or not, BLAS runs on the threads asked for (a
    machine of one core could not tell the two apart)."""
    script = f"""
import os, sys
import threadpoolctl
from service import main as serve

def stop(settings):
    print(sorted({{pool["num_threads"] for pool in threadpoolctl.threadpool_info()}}))
    sys.exit(3)

serve.start_deferred_builds = stop
serve.main(["--data-dir", {str(tmp_path)!r}, "--port", "0", "--threads", "1", *sys.argv[1:]])
"""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_") and "NUM_THREADS" not in k}
    for tables in ([], ["--tables", "small"]):
        done = subprocess.run(
            [sys.executable, "-c", script, *tables], capture_output=True, text=True, timeout=120, env=environment
        )
        assert (done.returncode, done.stdout) == (3, "[1]\n"), (tables, done.stdout, done.stderr[-2000:])


# ------------------------------------------------------------------------------------------- registry
@pytest.fixture
def mixed_data_dir(tmp_path: Path, small_data_dir: Path) -> Path:
    """``good`` (a copy of the small table), ``corrupt`` (one value changed), ``broken`` (unreadable manifest)."""
    for name in ("good", "corrupt", "broken"):
        shutil.copytree(small_data_dir / "small", tmp_path / name)
    vectors = tmp_path / "corrupt" / "vectors.npy"
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0xFF  # same size, different sha256
    vectors.write_bytes(bytes(data))
    (tmp_path / "broken" / "manifest.json").write_text("{not json")
    return tmp_path


def test_failed_tables_are_skipped_and_reported(mixed_data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="service.registry"), client_for(data_dir=mixed_data_dir) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503
        error = ready.json()["error"]
        assert (
            error["code"] == "not_ready" and error["loaded"] == ["good"] and error["missing"] == ["broken", "corrupt"]
        )
        listing = client.get("/v1/tables").json()
        assert [t["name"] for t in listing["tables"]] == ["good"]  # served under its directory name
        assert listing["unavailable"] == ["broken", "corrupt"]
        assert client.get("/v1/tables/good/neighbors", params={"token": "heart"}).status_code == 200
        unknown = client.get("/v1/tables/good/neighbors", params={"token": "zzqxv"}).json()["error"]["message"]
        assert "table 'good'" in unknown, unknown
        failed = client.get("/v1/tables/corrupt/neighbors", params={"token": "heart"})
        assert failed.status_code == 503 and failed.json()["error"]["code"] == "not_ready"
        assert client.get("/healthz").status_code == 200
    logged = [r.getMessage() for r in caplog.records]
    assert any("'corrupt' not loaded" in m and "sha256" in m for m in logged)
    assert any("'broken' not loaded" in m for m in logged)


def test_only_the_requested_tables_are_loaded(mixed_data_dir: Path) -> None:
    with client_for(data_dir=mixed_data_dir, tables=["good"]) as client:
        assert client.get("/readyz").json() == {"status": "ready", "loaded": ["good"], "missing": []}
        assert client.get("/v1/tables/corrupt").status_code == 404
    with client_for(data_dir=mixed_data_dir, tables=["good", "absent"]) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["absent"]


def test_corrupt_table_loads_when_checksums_are_off(mixed_data_dir: Path) -> None:
    with client_for(data_dir=mixed_data_dir, tables=["corrupt"], verify_checksums=False) as client:
        assert client.get("/readyz").status_code == 200


def test_empty_data_dir_is_not_ready(tmp_path: Path) -> None:
    with client_for(data_dir=tmp_path) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "no tables" in ready.json()["error"]["message"]
        assert client.get("/v1/tables").json() == {"tables": [], "unavailable": []}


# --------------------------------------------------------------------------------------- CORS, threads, logs
def test_cors_closed_unless_configured(small_data_dir: Path) -> None:
    preflight = {"origin": "https://app.example", "access-control-request-method": "POST"}
    with client_for(data_dir=small_data_dir) as client:
        response = client.get("/healthz", headers={"origin": "https://app.example"})
        assert "access-control-allow-origin" not in response.headers
        assert "access-control-allow-origin" not in client.options("/v1/tables/small/search", headers=preflight).headers
    with client_for(data_dir=small_data_dir, cors_origins=["https://app.example"]) as client:
        allowed = client.options("/v1/tables/small/search", headers=preflight)
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = client.get("/healthz", headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        refused = client.options("/v1/tables/small/search", headers={**preflight, "origin": "https://evil.example"})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "bad_request"  # the envelope
        assert refused.json()["error"]["message"] == "Disallowed CORS origin"
        delete = {**preflight, "access-control-request-method": "DELETE"}  # DELETE .../documents/{id}, a write
        allowed = client.options("/v1/tables/small/documents/x", headers=delete)
        assert allowed.status_code == 200 and "DELETE" in allowed.headers["access-control-allow-methods"]


@pytest.mark.parametrize(
    ("written", "sent"),
    [
        ("https://app.example/", "https://app.example"),
        ("https://app.example/page", "https://app.example"),
        ("https://App.Example", "https://app.example"),
        ("HTTP://localhost:5500", "http://localhost:5500"),
        ("https://app.example:443", "https://app.example"),
        ("http://localhost:80", "http://localhost"),
        ("http://user@localhost:5500", "http://localhost:5500"),
    ],
)
def test_a_cors_origin_no_browser_sends_is_refused(tmp_path: Path, written: str, sent: str) -> None:
    """Origins are compared as browsers send them (scheme://host[:port], lower case, no default port): one written
    otherwise would leave CORS closed without a word. Refused at start-up, naming the form that matches."""
    with pytest.raises(ValidationError) as info:
        Settings(data_dir=tmp_path, cors_origins=[written])
    line = describe_error(info.value)
    assert line.startswith("invalid settings: EMBEDDING_CORS_ORIGINS: ") and f"write it {sent!r}" in line, line
    with client_for(data_dir=tmp_path, cors_origins=[sent]) as client:  # what a browser on that page sends
        allowed = client.get("/healthz", headers={"origin": sent})
        assert allowed.headers["access-control-allow-origin"] == sent
    origins = ["http://[::1]:5500", "http://localhost:5500", "https://app.example", "*"]
    assert Settings(data_dir=tmp_path, cors_origins=origins).cors_origins == origins


async def connected() -> dict[str, object]:
    """An ASGI receive whose client is still there (its request had no body)."""
    return {"type": "http.request", "body": b"", "more_body": False}


def test_threads_setting_applies_where_the_engine_runs(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir, threads=1) as client:
        app = client.app
        table = app.state.registry.tables["small"]
        request = Request({"type": "http", "app": app}, receive=connected)
        before = faiss.omp_get_max_threads()
        try:
            for light in (True, False):  # on the event loop (here: this thread), and in a worker thread
                assert anyio.run(compute, request, table, "test", faiss.omp_get_max_threads, light) == 1
        finally:
            faiss.omp_set_num_threads(before)


def test_json_log_lines() -> None:
    record = logging.LogRecord("service.registry", logging.ERROR, __file__, 1, "table %r not loaded", ("x",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "error" and entry["logger"] == "service.registry"
    assert entry["message"] == "table 'x' not loaded" and entry["time"].endswith("Z")


def test_a_decoded_path_cannot_begin_a_line_of_its_own() -> None:
    """A path as the app reads it is decoded (``scope["path"]``, ``request.url.path``): its ``%0A`` is a newline,
    which would begin a forged line of its own in the plain format, and its ``%1B`` an escape a terminal obeys. The
    lines that log it (an unexpected error's, a request cut at the shutdown, work whose client left) write such
    characters %-escaped again, keys or none."""
    forged = "/v1/tables/small/documents/x\n2026-12-07 02:00:00,000 ERROR service.registry: forged\x1b[2J\u2028\x85"
    for keys in ((), ("s3cret-admin-key",)):
        record = logging.LogRecord("service.errors", logging.ERROR, __file__, 1, "unhandled error on %s %s", None, None)
        record.args = ("GET", forged)  # as logging.Logger.error sets them
        assert LoggedUrls(keys).filter(record)
        [line] = PlainFormatter().format(record).splitlines()
        assert line.endswith(
            " ERROR service.errors: unhandled error on GET /v1/tables/small/documents/x%0A2026-12-07 02:00:00,000 "
            "ERROR service.registry: forged%1B[2J%E2%80%A8%C2%85"
        )
        [line] = JsonFormatter().format(record).splitlines()
        assert json.loads(line)["message"].endswith("forged%1B[2J%E2%80%A8%C2%85")


def test_log_lines_name_the_request_id() -> None:
    """While a request that sent an X-Request-ID is handled, every line names it: a field of the JSON object, the
    end of the plain line (before a traceback). Other lines are as before."""
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        failure = sys.exc_info()
    record = logging.LogRecord("service.errors", logging.ERROR, __file__, 1, "unhandled error", (), failure)
    assert "request_id=" not in PlainFormatter().format(record)
    assert "request_id" not in json.loads(JsonFormatter().format(record))
    token = REQUEST_ID.set("req-7f3a")
    try:
        first, *rest = PlainFormatter().format(record).splitlines()
        entry = json.loads(JsonFormatter().format(record))
    finally:
        REQUEST_ID.reset(token)
    assert first.endswith(" ERROR service.errors: unhandled error request_id=req-7f3a")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ZeroDivisionError: division by zero"
    assert entry["request_id"] == "req-7f3a" and entry["message"] == "unhandled error"


def test_tables_are_memory_mapped_read_only(api: TestClient) -> None:
    table = api.app.state.registry.tables["small"]
    for array in (table.vectors, table.norms):
        base = array
        while base is not None and not isinstance(base, mmap.mmap):
            base = getattr(base, "base", None) if not isinstance(base, np.memmap) else base._mmap
        assert isinstance(base, mmap.mmap) and not array.flags.writeable  # a view of the file, not a copy


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, option: int, value: int) -> int:
        self.calls.append((option, value))
        return 1


def test_malloc_is_tuned_unless_its_environment_says_otherwise(clean_env: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    clean_env.setattr(serve.ctypes, "CDLL", lambda *args, **kwargs: libc)
    clean_env.delenv("MALLOC_ARENA_MAX", raising=False)
    clean_env.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    serve.tune_malloc()
    assert libc.calls == [(serve.M_ARENA_MAX, 2), (serve.M_MMAP_THRESHOLD, 128 << 10)]
    libc.calls.clear()
    clean_env.setenv("MALLOC_ARENA_MAX", "4")  # glibc reads its own variables; embedding-serve leaves them be
    serve.tune_malloc()
    assert libc.calls == [(serve.M_MMAP_THRESHOLD, 128 << 10)]


def test_fastapi_telemetry_only_when_asked(clean_env: pytest.MonkeyPatch, small_data_dir: Path) -> None:
    clean_env.setenv("EMBEDDING_DATA_DIR", str(small_data_dir))
    assert Settings().telemetry is False
    clean_env.setenv("EMBEDDING_TELEMETRY", "true")
    assert Settings().telemetry is True
    for value in (False, True):
        app = create_app(Settings(data_dir=small_data_dir, telemetry=value))
        assert [app._telemetry[part] for part in ("tracing", "metrics", "logs")] == [value] * 3


def test_a_key_of_two_kinds_is_refused_without_showing_it(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read key that is also the admin key or a write key gave every reader the right to reload or to write (a write
    key that is the admin key, every writer the admin's): refused at start-up, naming the settings (a key's file by
    its variable), never the key."""
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    shared = "s3cret-shared-key"
    (tmp_path / "admin").write_text(shared + "\n")
    cases = [
        (
            {"EMBEDDING_API_KEY": shared, "EMBEDDING_READ_API_KEY": shared},
            "EMBEDDING_API_KEY and EMBEDDING_READ_API_KEY",
        ),
        (
            {"EMBEDDING_READ_API_KEY": shared, "EMBEDDING_WRITE_KEYS": f"w1,{shared}"},
            "EMBEDDING_READ_API_KEY and EMBEDDING_WRITE_KEYS",
        ),
        (
            {"EMBEDDING_API_KEY_FILE": str(tmp_path / "admin"), "EMBEDDING_WRITE_KEYS": shared},
            "EMBEDDING_API_KEY_FILE and EMBEDDING_WRITE_KEYS",
        ),
    ]
    for variables, named in cases:
        for variable, value in variables.items():
            clean_env.setenv(variable, value)
        assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
        said = errors(capsys)
        assert said == [
            f"embedding-serve: invalid settings: {named} share a key: each kind of key must be its own (whoever holds "
            "it would have the rights of both)"
        ]
        assert shared not in said[0]
        for variable in variables:
            clean_env.delenv(variable)
    clean_env.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    clean_env.setenv("EMBEDDING_WRITE_KEYS", "w1,w1,w2")  # a write key given twice is still a write key
    assert Settings().write_keys == ["w1", "w1", "w2"]


def test_a_sharded_table_this_server_also_loads_is_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """EMBEDDING_SHARDS naming a table of the server's own (its data directory's, or EMBEDDING_TABLES'): the table
    was loaded and checked, then every request naming it went to the shards, and GET /v1/tables listed it as
    unavailable. Refused at start-up, naming the table and where this server would load it from."""
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the checks
    (tmp_path / "lee").mkdir()
    (tmp_path / "lee" / "manifest.json").write_text("{}")  # a table to the listing (its load comes later)
    clean_env.setenv("EMBEDDING_SHARDS", json.dumps({"lee": [["http://127.0.0.1:9/v1/tables/shard-000"]]}))
    refused = (
        "embedding-serve: EMBEDDING_SHARDS names 'lee', which this server also loads from {}: a table is answered "
        "from its shards or from here, not both; leave it out of one"
    )
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    assert errors(capsys) == [refused.format(tmp_path)]
    clean_env.setenv("EMBEDDING_TABLES", "other,lee")  # not --tables: main would leave it in this process's environ
    assert serve.main(["--data-dir", str(tmp_path), "--port", "0"]) == 2
    assert errors(capsys) == [refused.format("EMBEDDING_TABLES")]
    clean_env.setenv("EMBEDDING_TABLES", "other")
    with pytest.raises(SystemExit, match="3"):  # the front of lee, serving only other tables of its own
        serve.main(["--data-dir", str(tmp_path), "--port", "0"])


def test_write_keys(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, write_keys="first-key-123, second-key-456")  # type: ignore[arg-type]
    assert settings.write_keys == ["first-key-123", "second-key-456"] and settings.write_sync is True
    assert Settings(data_dir=tmp_path, write_keys='["", "only-key-789"]').write_keys == ["only-key-789"]  # type: ignore[arg-type]
    assert Settings(data_dir=tmp_path).write_keys == []
    with pytest.raises(ValidationError, match="printable ASCII"):
        Settings(data_dir=tmp_path, write_keys=["cl\u00e9-not-ascii"])


def test_start_up_objects_are_kept_out_of_the_collectors_scans(tmp_path: Path) -> None:
    """Once its tables are loaded, a server freezes what start-up made (the collector no longer walks it) and
    collects its youngest generation less often: what the searched GET route's requests/s depend on."""
    import gc

    from service.app import GC_YOUNG_THRESHOLD

    before = gc.get_threshold()
    try:
        with client_for(data_dir=tmp_path):
            assert gc.get_freeze_count() > 0
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


# ------------------------------------------------------------------------------------------- CPU limits
@pytest.mark.parametrize("directory", ["cpu", "cpu,cpuacct"])  # the cpu controller's directory, by either name
@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [
        ("-1", "100000", None),  # no limit: the CPUs it may run on
        ("100000", "100000", 1),
        ("50000", "100000", 1),  # half a CPU: still one
        ("150000", "100000", 2),  # 1.5 CPUs: rounded up
        ("garbage", "100000", None),
    ],
)
def test_cores_follow_a_cgroup_v1_quota(
    tmp_path: Path, directory: str, quota: str, period: str, expected: int | None
) -> None:
    """A cgroup v1 node (no cpu.max): the CPU limit is cpu.cfs_quota_us over cpu.cfs_period_us."""
    cpu = tmp_path / directory
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (cpu / "cpu.cfs_period_us").write_text(f"{period}\n")
    dirs = (tmp_path / "cpu", tmp_path / "cpu,cpuacct")
    affinity = len(os.sched_getaffinity(0))
    assert cores(tmp_path / "cpu.max", dirs) == (affinity if expected is None else min(affinity, expected))


def test_cores_take_the_lower_of_both_cgroup_versions(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cores(tmp_path / "cpu.max", (tmp_path / "cpu",)) == 1
    assert cores(tmp_path / "cpu.max", (tmp_path / "missing",)) == len(os.sched_getaffinity(0))


def test_a_cache_larger_than_the_memory_stops_the_server(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """EMBEDDING_CACHE_BYTES is per worker (at most 1 TiB): the workers' caches together past the memory the server
    may use were accepted, and each worker filled its cache until the machine, or the container's limit, killed it.
    Refused at start-up, with this machine's memory; the memory a container's cgroup allows counts when lower."""
    total = serve.memory()
    assert total < 1 << 41, total  # the caches of two workers at the largest setting exceed it
    clean_env.setattr(serve, "cores", lambda: 2)
    clean_env.setattr(serve, "start_deferred_builds", lambda settings: sys.exit(3))  # what follows the check
    clean_env.setenv("EMBEDDING_CACHE_BYTES", str(total // 2 + 1))
    assert serve.main(["--data-dir", str(tmp_path), "--workers", "2", "--port", "0"]) == 2  # 8000 may be taken
    assert errors(capsys) == [
        f"embedding-serve: EMBEDDING_CACHE_BYTES={total // 2 + 1} x 2 workers is more than the {total} bytes of "
        "memory this process may use: each worker fills its cache up to it; lower it"
    ]
    with pytest.raises(SystemExit, match="3"):  # one worker's cache fits
        serve.main(["--data-dir", str(tmp_path), "--port", "0"])
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")  # no limit
    v1.write_text("536870912\n")
    assert memory((v2, v1)) == min(total, 512 << 20)
    v2.write_text("268435456\n")
    assert memory((v2, tmp_path / "absent")) == min(total, 256 << 20)


def test_the_descriptor_limit_is_raised_for_the_connections_and_what_it_lacks_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server allowed EMBEDDING_MAX_CONNECTIONS connections needs a descriptor for each beside its tables' files:
    the soft limit is raised to that (up to the hard one), and a hard limit short of it is said, since a connection
    opened with no descriptor left is closed unanswered rather than answered 503."""
    limits = {"soft": 1024, "hard": 4096}

    def getrlimit(which: int) -> tuple[int, int]:
        assert which == serve.resource.RLIMIT_NOFILE
        return limits["soft"], limits["hard"]

    def setrlimit(which: int, values: tuple[int, int]) -> None:
        assert which == serve.resource.RLIMIT_NOFILE and values[1] == limits["hard"]  # the hard limit left as it is
        limits["soft"] = values[0]

    monkeypatch.setattr(serve.resource, "getrlimit", getrlimit)
    monkeypatch.setattr(serve.resource, "setrlimit", setrlimit)
    assert serve.descriptors_for(1000) == ""
    assert limits["soft"] == 1000 + serve.SPARE_DESCRIPTORS
    assert serve.descriptors_for(100) == "" and limits["soft"] == 1000 + serve.SPARE_DESCRIPTORS  # never lowered
    limits.update(soft=64, hard=64)  # ulimit -n 64
    said = serve.descriptors_for(1000)
    assert said.startswith("the descriptor limit (ulimit -n) is 64, short of the 1128 that EMBEDDING_MAX_CONNECTIONS")
    assert "closed unanswered, not answered 503" in said and limits["soft"] == 64
    limits.update(soft=64, hard=400)
    assert "is 400, short of the 1128" in serve.descriptors_for(1000) and limits["soft"] == 400
