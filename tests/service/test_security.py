"""Security promises of the service (SECURITY.md): keys, CORS, table names, no pickle, nothing internal leaks."""

from __future__ import annotations

import hmac
import inspect
import itertools
import json
import random
import re
import shutil
import string
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index.build.sources import ReadOptions, gensim_pickle
from index.engine.table import Table
from index.errors import ArtifactError, InputError, InvalidQuery
from index.store import artifact
from service.deps import TABLE_NAME
from service.http import auth
from service.settings import Settings
from tests import REPO
from tests.cli import run_cli
from tests.service import raw_http, real_server
from tests.service.conftest import client_for
from tests.service.documented import check_answer

READ, ADMIN = "read-key-0123456789abcdef", "admin-key-0123456789abcdef"
WRITE = "write-key-0123456789abcdef"
OPENAI_OPERATIONS = [("POST", "/v1/embeddings", "/v1/embeddings"), ("GET", "/v1/models/{model}", "/v1/models/t")]


@pytest.fixture
def data_dir(tmp_path: Path, small_data_dir: Path) -> Path:
    """``t`` (good), ``broken`` (unreadable manifest), ``corrupt`` (a flipped byte), ``truncated`` (short vectors),
    and outside the data directory a real table ``secret/stolen`` that no request may reach."""
    directory = tmp_path / "data"
    for name in ("t", "broken", "corrupt", "truncated"):
        shutil.copytree(small_data_dir / "small", directory / name)
    shutil.copytree(small_data_dir / "small", tmp_path / "secret" / "stolen")
    (directory / "broken" / artifact.MANIFEST).write_text("{not json")
    vectors = directory / "corrupt" / artifact.VECTORS
    data = bytearray(vectors.read_bytes())
    data[-7] ^= 0x10
    vectors.write_bytes(bytes(data))
    truncated = directory / "truncated" / artifact.VECTORS
    truncated.write_bytes(truncated.read_bytes()[:-4096])
    return directory


# --------------------------------------------------------------------------------------------- API keys
def test_read_key_guards_every_read_but_not_health_or_docs(data_dir: Path) -> None:
    with client_for(data_dir=data_dir, tables=["t"], read_api_key=READ, api_key=ADMIN) as client:
        for method, path, body in [
            ("GET", "/v1/tables", None),
            ("GET", "/v1/tables/t", None),
            ("GET", "/v1/limits", None),
            ("GET", "/v1/tables/t/neighbors?token=heart", None),
            ("POST", "/v1/tables/t/search", {"vector": "not even valid"}),  # the key is asked for before the body
            ("GET", "/v1/no/such/path", None),  # closed by default, not only the known routes
        ]:
            missing = client.request(method, path, json=body)
            assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized", path
            wrong = client.request(method, path, json=body, headers={"x-api-key": READ[:-1] + "x"})
            assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "forbidden", path
        for key in (READ, ADMIN):  # the admin key reads too
            assert client.get("/v1/tables/t/neighbors?token=heart", headers={"x-api-key": key}).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics", "/docs", "/docs/files/swagger-ui.css", "/openapi.json", "/"):
            assert client.get(path).status_code == 200, path
        # The read key is not the admin key.
        assert client.post("/v1/admin/reload", headers={"x-api-key": READ}).status_code == 403
        assert client.post("/v1/admin/reload", headers={"x-api-key": ADMIN}).status_code == 200
        schema = client.get("/openapi.json").json()
        answers = {
            (path, bool(headers)): client.request(method, path, json={}, headers=headers)
            for method, _, path in OPENAI_OPERATIONS
            for headers in ({}, {"x-api-key": READ[:-1] + "x"})
        }
    assert schema["components"]["securitySchemes"]["ReadKey"] == {"type": "apiKey", "in": "header", "name": "X-API-Key"}
    neighbors = schema["paths"]["/v1/tables/{table}/neighbors"]["get"]
    assert neighbors["security"] == [{"ReadKey": []}] and {"401", "403"} <= set(neighbors["responses"])
    assert schema["components"]["securitySchemes"]["ReadKeyBearer"]["scheme"] == "bearer"  # OpenAI's clients' way
    for method, template, _ in OPENAI_OPERATIONS:
        operation = schema["paths"][template][method.lower()]
        assert operation["security"] == [{"ReadKey": []}, {"ReadKeyBearer": []}], template
    assert "security" not in schema["paths"]["/healthz"]["get"]
    for path, item in schema["paths"].items():  # refusals in OpenAI's shape on its paths, and declared so
        shape = "OpenAIErrorResponse" if path.startswith(("/v1/embeddings", "/v1/models")) else "ErrorResponse"
        for operation in item.values():
            for status in set(operation["responses"]) & {"401", "403"}:
                declared = operation["responses"][status]["content"]["application/json"]["schema"]
                assert declared == {"$ref": f"#/components/schemas/{shape}"}, (path, status)
    for method, template, path in OPENAI_OPERATIONS:
        for headers in ({}, {"x-api-key": READ[:-1] + "x"}):
            check_answer(schema, method, template, answers[(path, bool(headers))])
    with client_for(data_dir=data_dir, tables=["t"]) as client:  # no read key: reads are open
        assert client.get("/v1/tables/t/neighbors?token=heart").status_code == 200
        assert "securitySchemes" not in client.get("/openapi.json").json().get("components", {})


def test_a_refused_key_is_named_for_what_it_may_do_and_others_are_not_valid(small_data_dir: Path) -> None:
    """A key of the server refused on a route says what it may do and which key to send; an unknown key is only
    "not valid" (nothing said of the server's keys), and no answer echoes a key."""
    send = "; send {} in the X-API-Key header"
    write_key, admin_key = "a write key (EMBEDDING_WRITE_KEYS)", "the admin key (EMBEDDING_API_KEY)"
    any_key = "the read key (EMBEDDING_READ_API_KEY), a write key or the admin key"
    writes, admin, reads = "/v1/tables/small/documents", "/v1/admin/reload", "/v1/tables/small/neighbors?token=heart"
    expected = {
        (writes, READ): (403, "this is the read key: it may read but not write documents" + send.format(write_key)),
        (writes, ADMIN): (
            403,
            "this is the admin key: it may read and use the admin endpoints but not write documents"
            + send.format(write_key),
        ),
        (writes, WRITE): (422, "not documents"),  # let through: ``small`` holds words
        (admin, READ): (
            403,
            "this is the read key: it may read but not use the admin endpoints" + send.format(admin_key),
        ),
        (admin, WRITE): (
            403,
            "this is a write key: it may read and write documents but not use the admin endpoints"
            + send.format(admin_key),
        ),
        (admin, None): (401, f"this endpoint needs {admin_key} in the X-API-Key header"),
        (admin, "x" + ADMIN): (403, f"the API key is not valid: send {admin_key} in the X-API-Key header"),
        (reads, None): (401, f"this endpoint needs {any_key} in the X-API-Key header"),
        (reads, READ[:-1] + "x"): (403, f"the API key is not valid: send {any_key} in the X-API-Key header"),
    }
    settings = {"read_api_key": READ, "api_key": ADMIN, "write_keys": [WRITE]}
    with client_for(data_dir=small_data_dir, tables=["small"], **settings) as client:
        for (path, key), (status, message) in expected.items():
            method = "GET" if path == reads else "POST"
            body = {"documents": [{"id": "x", "text": "a note"}]} if path == writes else None
            answer = client.request(method, path, json=body, headers={"x-api-key": key} if key else {})
            assert answer.status_code == status and message in answer.json()["error"]["message"], (path, key)
            assert not any(sent in answer.text for _, sent in expected if sent), (path, key)
        for key in (READ, ADMIN, WRITE):  # every kind reads
            assert client.get(reads, headers={"x-api-key": key}).status_code == 200
        assert client.post(admin, headers={"x-api-key": ADMIN}).status_code == 200
    with client_for(data_dir=small_data_dir, tables=["small"], write_keys=[WRITE]) as client:  # no read key
        for key, message in (
            (None, f"this endpoint needs {write_key} in the X-API-Key header"),
            (READ, f"the API key is not valid: send {write_key} in the X-API-Key header"),  # no such key here
        ):
            answer = client.post(writes, json={"documents": []}, headers={"x-api-key": key} if key else {})
            assert answer.json()["error"]["message"] == message, key


def test_a_write_route_names_a_write_key_with_or_without_a_read_key(
    small_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write route without a key, with an unknown key or with the read key is answered alike whether or not a read
    key is set: with what the route needs (a write key), never the keys that only read; the admin route names the
    admin key. On a server without write keys, every refusal of a write route is a 403 saying its tables are
    read-only (no key would do). A
    front's write routes (EMBEDDING_SHARDS) are refused so before anything goes to a shard."""
    write_key, admin_key = "a write key (EMBEDDING_WRITE_KEYS)", "the admin key (EMBEDDING_API_KEY)"
    needs = "this endpoint needs {} in the X-API-Key header"
    not_valid = "the API key is not valid: send {} in the X-API-Key header"
    read_only = (
        "this server's tables are read-only: start it with EMBEDDING_WRITE_KEYS (one or more keys, comma-separated) "
        "to accept writes from clients sending one in the X-API-Key header"
    )
    reader = "this is the read key: it may read but not {}; send {} in the X-API-Key header"
    writes = [
        ("POST", "/v1/tables/{}/documents", {"documents": [{"id": "x", "text": "a note"}]}),
        ("POST", "/v1/tables/{}/documents/delete", {"ids": ["x"]}),
        ("DELETE", "/v1/tables/{}/documents/notes/x", None),
    ]
    unknown = "x" + READ

    def refusals(kind: str, action: str, read_key: str | None) -> dict[str | None, tuple[int, str, str]]:
        """What a route that needs ``kind`` answers no key, a key the server lacks and the read key (a key of the
        server only when it is set)."""
        return {
            None: (401, "unauthorized", needs.format(kind)),
            unknown: (403, "forbidden", not_valid.format(kind)),
            READ: (403, "forbidden", reader.format(action, kind) if read_key else not_valid.format(kind)),
        }

    for read_key in (READ, None):
        expected_writes = refusals(write_key, "write documents", read_key)
        expected_admin = refusals(admin_key, "use the admin endpoints", read_key)
        expected_read_only = dict.fromkeys(expected_writes, (403, "forbidden", read_only))
        keys = {"read_api_key": read_key, "api_key": ADMIN}
        for write_keys, expected in (([WRITE], expected_writes), ([], expected_read_only)):
            with client_for(data_dir=small_data_dir, tables=["small"], write_keys=write_keys, **keys) as client:
                for (method, path, body), key in itertools.product(writes, expected):
                    answer = client.request(
                        method, path.format("small"), json=body, headers={"x-api-key": key} if key else {}
                    )
                    status, code, message = expected[key]
                    assert answer.status_code == status, (read_key, write_keys, path, key, answer.text)
                    assert answer.json()["error"] == {"code": code, "message": message}, (read_key, path, key)
                    assert not any(sent in answer.text for sent in (READ, unknown, ADMIN, WRITE)), (path, key)
                for key, (status, code, message) in expected_admin.items():
                    answer = client.post("/v1/admin/reload", headers={"x-api-key": key} if key else {})
                    assert (answer.status_code, answer.json()["error"]) == (status, {"code": code, "message": message})
                if read_key:  # a read of a document, under the same path as a delete: any key reads
                    answer = client.get("/v1/tables/small/documents/notes/x")
                    assert answer.json()["error"]["message"] == needs.format(auth.ANY_KEY)
    shards = {"sharded": [[f"http://127.0.0.1:{real_server.free_port()}/v1/tables/shard-000"]]}  # never reached
    monkeypatch.setenv("EMBEDDING_SHARDS", json.dumps(shards))
    with client_for(data_dir=small_data_dir, tables=["small"], read_api_key=READ, write_keys=[WRITE]) as client:
        for (method, path, body), key in itertools.product(writes, (None, unknown)):
            headers = {"x-api-key": key} if key else {}
            answer = client.request(method, path.format("sharded"), json=body, headers=headers)
            status, code, message = expected_writes[key]
            assert (answer.status_code, answer.json()["error"]) == (status, {"code": code, "message": message}), path


def test_a_key_sent_where_none_is_read_is_not_logged(tmp_path: Path, small_data_dir: Path) -> None:
    """A key in a query string (``?api_key=``, as some tools send it) or in a path is no key: refused, and the real
    server's access log holds ``[key]`` where it was, in each spelling a URL gives it (as sent, %-escaped in either
    case, ``+`` for a space), never the key itself."""
    odd = "write/key+0123 4567=89&abc"  # characters a URL escapes
    data = tmp_path / "data"
    shutil.copytree(small_data_dir / "small", data / "small")
    keys = {"EMBEDDING_READ_API_KEY": READ, "EMBEDDING_API_KEY": ADMIN, "EMBEDDING_WRITE_KEYS": f"{WRITE},{odd},ow"}
    spelled = [
        quote(odd, safe=""),
        quote(odd, safe="").lower(),  # the letters of odd are lower-case: only the escapes change
        quote_plus(odd),
    ]
    targets = [
        f"/v1/tables?api_key={READ}",
        f"/v1/tables/small/neighbors?token=cat&key={WRITE}",
        f"/v1/tables/{ADMIN}",
        f"/v1/tables/small/tokens/{quote(odd)}",
        f"/v1/tables/small/tokens/{quote(odd, safe='')}",
        "/v1/tables/small/neighbors?token=ow&k=3&words=now",  # a short key: only a whole part is one
        *(f"/v1/tables?api_key={key}" for key in spelled),
    ]
    with real_server.running(data, tmp_path / "server.log", env=keys) as server:
        for target in targets:
            sock = raw_http.connect(server.port)
            with sock:
                sock.sendall(raw_http.request("GET", target, headers={"Connection": "close"}))
                status, _, body = raw_http.read_response(sock)
            assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized", (target, body)
        real_server.wait_for(lambda: server.log().count('" 401') >= len(targets), what="the access lines")
        log = server.log()
    for secret in (READ, WRITE, ADMIN, odd, quote(odd), *spelled, quote(odd, safe="/")):
        assert secret not in log
    lines = [line for line in log.splitlines() if '" 401' in line]
    assert len(lines) == len(targets) and all("[key]" in line for line in lines), lines
    assert "GET /v1/tables/small/neighbors?token=cat&key=[key] HTTP/1.1" in log  # the rest of the line kept
    assert "GET /v1/tables/small/neighbors?token=[key]&k=3&words=now HTTP/1.1" in log
    assert "table 'small' loaded: " in log and " rows x " in log  # the words holding the short key untouched


def test_a_loopback_peer_names_the_logged_client_unless_none_is_trusted(
    tmp_path: Path, small_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn trusts X-Forwarded-For from a loopback peer by default, as docs/operations.md says: the access line
    names the address it gives; ``FORWARDED_ALLOW_IPS=""`` (uvicorn's variable) trusts none, with two workers too."""
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    forwarded = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "Connection": "close"}

    def logged(env: dict[str, str], *args: str) -> list[str]:
        with real_server.running(small_data_dir, tmp_path / f"server-{len(args)}.log", *args, env=env) as server:
            for _ in range(4):
                sock = raw_http.connect(server.port)
                with sock:
                    sock.sendall(raw_http.request("GET", "/v1/tables", headers=forwarded))
                    assert raw_http.read_response(sock)[0] == 200
            real_server.wait_for(lambda: server.log().count("GET /v1/tables HTTP") >= 4, what="the access lines")
            return [line for line in server.log().splitlines() if "GET /v1/tables HTTP" in line]

    assert all('203.0.113.7:0 - "GET /v1/tables HTTP/1.1" 200' in line for line in logged({})), "trusted"
    lines = logged({"FORWARDED_ALLOW_IPS": ""}, "--workers", "2")
    assert len(lines) == 4 and all(re.search(r'127\.0\.0\.1:\d+ - "GET /v1/tables', line) for line in lines), lines


HOSTILE = [
    '<img src=x onerror="window.injected=1">',
    '"><svg onload="window.injected=2">',
    "</script><script>window.injected=3</script>",
]


def test_the_explorer_shows_hostile_tokens_and_texts_as_text(tmp_path: Path, watched: Any) -> None:
    """Tokens and document texts that are markup (an ``onerror`` image, an ``onload`` SVG, a script) are shown by
    the explorer page in Chromium as the text they are: nothing of theirs runs or becomes an element."""
    rng = np.random.default_rng(7)
    words = tmp_path / "hostile.txt"
    tokens = [*HOSTILE, "cat", "dog", *(f"w{i}" for i in range(40))]
    vectors = rng.normal(size=(len(tokens), 10))
    vectors[: len(HOSTILE)] = vectors[len(HOSTILE)] + rng.normal(scale=0.01, size=(len(HOSTILE), 10))  # cat's nearest
    lines = (f"{token} {' '.join(f'{v:.4f}' for v in row)}\n" for token, row in zip(tokens, vectors, strict=True))
    words.write_text("".join(lines))
    documents = tmp_path / "docs.jsonl"
    rows = [{"id": f"d{i}", "text": f"{HOSTILE[i % 3]} cats {i}", "vector": [*rng.normal(size=8)]} for i in range(30)]
    documents.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = tmp_path / "data"
    for source, name, form in ((words, "hostile", "glove"), (documents, "docs", "documents")):
        assert run_cli("import", source, "--format", form, "--name", name, "--data-dir", data).code == 0
    with real_server.running(data, tmp_path / "server.log") as server:
        page = watched.page
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        for query, shown in (
            ("?table=hostile&word=cat", "#neighbours:not([hidden])"),
            (f"?table=hostile&word={quote(HOSTILE[0])}", "#neighbours:not([hidden])"),
            ("?table=docs&text=cats&per=50", "#ds-out:not([aria-busy]) .ds-count"),
            ("?table=docs&doc=d1", "#ds-out:not([aria-busy]) .ds-count"),
        ):
            page.goto(f"{server.base}/{query}")
            page.wait_for_selector(shown)
            page.wait_for_function("t => document.body.innerText.includes(t)", arg=HOSTILE[0])
            text = page.inner_text("body")
            assert all(hostile in text for hostile in HOSTILE), query
            made = "document.querySelectorAll('img[src=x], svg[onload], script:not([src])').length"
            assert page.evaluate(made) == 0 and page.evaluate("window.injected") is None, query
            page.wait_for_load_state("networkidle")  # the next page's load would cut its requests in flight
        assert dialogs == []
        watched.assert_clean(expected_404=("/v1/tables/hostile/",))  # cards asking for man, king, woman


def test_keys_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every configured key goes through hmac.compare_digest, with no early exit on the first match."""
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest
    monkeypatch.setattr(auth.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    keys = (READ.encode(), ADMIN.encode())
    assert auth.matches(READ.encode(), keys) and not auth.matches(b"guess", keys)
    assert calls == [(READ.encode(), k) for k in keys] + [(b"guess", k) for k in keys]


@pytest.mark.parametrize("key", ["  padded  ", "naïve-key", "tab\tkey", "line\nbreak"])
def test_unusable_keys_fail_fast(tmp_path: Path, key: str) -> None:
    for field in ("api_key", "read_api_key"):
        with pytest.raises(ValueError, match="printable ASCII"):
            Settings(data_dir=tmp_path, **{field: key})
    assert Settings(data_dir=tmp_path, api_key="").api_key is None  # EMBEDDING_API_KEY= means no key


# ------------------------------------------------------------------------------------------------- CORS
def test_cors_preflight_from_any_origin_is_not_allowed_by_default(data_dir: Path) -> None:
    rng = random.Random(8)
    origins = ["https://" + "".join(rng.choices(string.ascii_lowercase, k=12)) + ".example" for _ in range(20)]
    origins += ["null", "http://localhost", "https://evil.example"]
    with client_for(data_dir=data_dir, tables=["t"]) as client:
        for origin in origins:
            preflight = client.options(
                "/v1/tables/t/search",
                headers={
                    "origin": origin,
                    "access-control-request-method": "POST",
                    "access-control-request-headers": "x",
                },
            )
            assert not any(h.startswith("access-control-") for h in preflight.headers), origin
            simple = client.get("/v1/tables/t", headers={"origin": origin})
            assert simple.status_code == 200 and "access-control-allow-origin" not in simple.headers
    with client_for(data_dir=data_dir, tables=["t"], cors_origins=["https://app.example"], read_api_key=READ) as client:
        allowed = {"origin": "https://app.example", "access-control-request-method": "POST"}
        preflight = client.options("/v1/tables/t/search", headers=allowed)  # no key needed for a preflight
        assert (
            preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "https://app.example"
        )
        for origin in origins:
            refused = client.options("/v1/tables/t/search", headers={**allowed, "origin": origin})
            assert "access-control-allow-origin" not in refused.headers
        # a page may read the request's id (a proxy's, when one names requests) and Retry-After, which a browser
        # hides unless they are exposed
        asked = {"origin": "https://app.example", "x-api-key": READ, "x-request-id": "req-7"}
        answer = client.get("/v1/tables/t", headers=asked)
        assert answer.status_code == 200 and answer.headers["x-request-id"] == "req-7"
        exposed = {name.strip().lower() for name in answer.headers["access-control-expose-headers"].split(",")}
        assert exposed == {"x-request-id", "retry-after"}


# ------------------------------------------------------------------------------------------- table names
@settings(max_examples=500, derandomize=True, database=None, deadline=None)  # a check, not a timing
@given(st.text(alphabet=st.sampled_from("aZ09._-/\\~ \x00é%"), max_size=70))
def test_the_documented_name_pattern_is_the_check(name: str) -> None:
    try:
        artifact.check_name(name)
        valid = True
    except InvalidQuery:
        valid = False
    assert valid == (re.fullmatch(TABLE_NAME, name) is not None and len(name) <= 64)


@contextmanager
def file_access() -> Iterator[list[str]]:
    """Paths this process opens or lists while the block runs (Python audit events)."""
    seen: list[str] = []
    _WATCHERS.append(seen)
    try:
        yield seen
    finally:
        _WATCHERS.remove(seen)


_WATCHERS: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if _WATCHERS and event in ("open", "os.listdir", "os.scandir", "glob.glob", "os.chdir") and args:
        for seen in _WATCHERS:
            seen.append(str(args[0]))


sys.addaudithook(_audit)

HOSTILE_NAMES = [
    "%2e%2e",
    "%2e%2e%2fsecret%2fstolen",
    "..%2Fsecret%2Fstolen",
    "..%2F..%2F..%2Fetc%2Fpasswd",
    "secret%2Fstolen",
    "%2Fetc%2Fpasswd",
    "stolen",
    "~root",
    "%2e",
    ".hidden",
    "t%00",
    "t%0a",
    "%E2%80%AEt",
    "a" * 65,
    "x" * 5000,
]


def test_table_names_never_reach_the_file_system(data_dir: Path) -> None:
    with client_for(data_dir=data_dir, tables=["t"]) as client:
        client.get("/v1/tables/nosuch/neighbors?token=heart")  # warm up: lazy imports are not requests
        with file_access() as seen:
            for name in HOSTILE_NAMES:
                for method, path, body in [
                    ("GET", f"/v1/tables/{name}", None),
                    ("GET", f"/v1/tables/{name}/neighbors?token=heart", None),
                    ("GET", f"/v1/tables/{name}/tokens/heart", None),
                    ("POST", f"/v1/tables/{name}/search", {"vector": [1.0] * 50}),
                    ("POST", f"/v1/tables/{name}/analogy", {"a": "man", "b": "king", "c": "woman"}),
                ]:
                    response = client.request(method, path, json=body)
                    assert response.status_code in (404, 422), (name, response.text)
                    assert response.json()["error"]["code"] in ("unknown_table", "invalid_request", "not_found")
                    assert "secret" not in response.text
            tokens = client.get("/v1/tables/t/tokens/..%2F..%2Fsecret%2Fstolen%2Fmanifest.json")
            assert tokens.status_code == 404 and tokens.json()["error"]["code"] == "unknown_token"
    # Not one data file opened or listed while answering: at most the server's own source, which FastAPI reads
    # to name the endpoint in validation errors.
    code = [Path(p) for p in seen if p.endswith(".py") and Path(p).is_relative_to(REPO / "service")]
    assert [p for p in seen if Path(p) not in code] == []


# ------------------------------------------------------------------------------------------------ pickle
PICKLE = re.compile(
    r"\bimport\s+(c?pickle|dill|cloudpickle|joblib|shelve|marshal)\b|\bfrom\s+(c?pickle|dill|cloudpickle|joblib)\b"
    r"|\bpickle\.loads?\(|allow_pickle\s*=\s*True|\btorch\.load\(|\byaml\.load\(|read_pickle\("
    r"|\bSaveLoad\.load\(|\b(KeyedVectors|Word2Vec|FastText|Doc2Vec)\.load\("
)
OPT_IN = {"index/build/sources/gensim_pickle.py"}  # gensim .model/.kv: only with --allow-pickle


def test_no_pickle_anywhere_but_the_opt_in_gensim_reader() -> None:
    found = {
        str(path.relative_to(REPO))
        for package in ("index", "service")
        for path in (REPO / package).rglob("*.py")
        if PICKLE.search(path.read_text())
    }
    assert found == OPT_IN
    assert inspect.signature(np.load).parameters["allow_pickle"].default is False  # np.load never unpickles


def test_the_gensim_reader_refuses_without_the_opt_in(tmp_path: Path) -> None:
    model = tmp_path / "vectors.kv"
    model.write_bytes(b"\x80\x04\x95 not even opened")
    with pytest.raises(InputError, match="allow-pickle"):
        gensim_pickle.read(model, ReadOptions())


# ------------------------------------------------------------------------ nothing internal in responses
@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("boom in {data}/t/vectors.npy"),
        OSError(5, "Input/output error", "{data}/t/vectors.npy"),
        ArtifactError("table files under {data}/t disagree"),
    ],
)
def test_internal_errors_are_a_bare_500_envelope(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    error.args = tuple(a.replace("{data}", str(data_dir)) if isinstance(a, str) else a for a in error.args)
    if isinstance(error, ArtifactError):
        error.message = error.args[0]

    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(Table, "run", fail)
    monkeypatch.setattr(Table, "similarity", fail)
    with client_for(data_dir=data_dir, tables=["t"]) as client:
        for response in (
            client.get("/v1/tables/t/neighbors", params={"token": "heart"}),
            client.post("/v1/tables/t/search", json={"vectors": [[1.0] * 50]}),
            client.get("/v1/tables/t/similarity", params={"a": "red", "b": "blue"}),
        ):
            assert response.status_code == 500
            assert response.json() == {"error": {"code": "internal", "message": "internal server error"}}
            assert str(data_dir) not in response.text and "Traceback" not in response.text
        assert client.get("/healthz").status_code == 200


def test_no_memory_left_is_a_503_that_names_nothing_internal(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose arrays find no memory is refused as overloaded (``test_errors``), with nothing of the server's
    own in the answer."""

    def fail(*args: object, **kwargs: object) -> None:
        raise MemoryError(f"cannot map {data_dir}/t/vectors.npy")

    monkeypatch.setattr(Table, "run", fail)
    with client_for(data_dir=data_dir, tables=["t"]) as client:
        response = client.get("/v1/tables/t/neighbors", params={"token": "heart"})
        assert response.status_code == 503 and response.json()["error"]["code"] == "overloaded"
        assert str(data_dir) not in response.text and "Traceback" not in response.text


def test_bad_artifacts_are_reported_without_paths(data_dir: Path, tmp_path: Path) -> None:
    with client_for(data_dir=data_dir, api_key=ADMIN) as client:
        responses = [
            client.get("/readyz"),
            client.get("/v1/tables"),
            client.post("/v1/admin/reload", headers={"x-api-key": ADMIN}),
        ]
        for name in ("broken", "corrupt", "truncated"):
            responses += [
                client.get(f"/v1/tables/{name}"),
                client.get(f"/v1/tables/{name}/neighbors", params={"token": "heart"}),
                client.post(f"/v1/tables/{name}/search", json={"vector": [1.0] * 50}),
            ]
        assert responses[0].status_code == 503
        assert responses[0].json()["error"]["missing"] == ["broken", "corrupt", "truncated"]
        assert all(r.status_code == 503 for r in responses[3:])
        table = client.get("/v1/tables/t").json()
    for response in responses:
        assert str(tmp_path) not in response.text and "/tmp/" not in response.text, response.text
    assert "/" not in table["source"]["path"]  # the source file's name, not where it was on the build machine
