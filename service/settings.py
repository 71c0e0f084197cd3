"""Service configuration: every setting comes from an ``EMBEDDING_*`` environment variable (or the constructor).

List settings (``EMBEDDING_TABLES``, ``EMBEDDING_CORS_ORIGINS``) accept a comma-separated string or a JSON list.
Validators fail fast, so a bad value stops the server at start-up with one clear line.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidatorFunctionWrapHandler, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from index import threads
from index.errors import InvalidQuery
from service.secret_files import SecretFiles, file_variable, key_files

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
YEAR_SECONDS = 365 * 24 * 3600
SUPERVISOR_VARIABLE = "EMBEDDING_SERVE_SUPERVISOR_PID"  # set by embedding-serve --workers N for its workers
# What embedding-serve sets for its own processes, beside the settings
STATUS_VARIABLE = "EMBEDDING_INDEX_STATUS_DIR"  # for its app: where the background builds' status files are
INTERNAL_VARIABLES = frozenset({SUPERVISOR_VARIABLE, STATUS_VARIABLE})
KEY_SETTINGS = ("api_key", "read_api_key", "write_keys")  # each may be read from a file: EMBEDDING_API_KEY_FILE, ...
KEY_FILE_VARIABLES = frozenset(file_variable(name) for name in KEY_SETTINGS)
MIN_CLIENT_SECONDS = 1  # the least a client is given for a request's head or body, an answer or its next request
MAP_TSNE = {"perplexity": 30.0, "n_iter": 500, "seed": 42}  # the explorer's t-SNE map, recorded in its layout's params
MAX_MAP_TSNE_ROWS = 100_000
OUT_OF_RANGE = "out_of_range"  # a check's refusal saying what its setting takes, named with the value as pydantic's


def _split_list(value: Any) -> Any:
    """Accept ``"a,b"`` or ``'["a", "b"]'`` from the environment, or a list from Python."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.replace("\n", ",").split(",") if item.strip()]  # a file's lines too
    return value


class Settings(BaseSettings):
    """Server settings. Environment variables: the field name upper-cased with the ``EMBEDDING_`` prefix."""

    model_config = SettingsConfigDict(env_prefix="EMBEDDING_", extra="ignore", validate_default=True)

    data_dir: Path = Field(Path("./data"), description="directory holding one sub-directory per built table")
    tables: Annotated[list[str] | None, NoDecode] = Field(
        None, description="names of the tables to load (default: every table in data_dir)"
    )
    max_k: int = Field(1000, ge=1, le=100_000, description="largest k a query may ask for")
    max_batch: int = Field(1024, ge=1, le=100_000, description="most items in one batch request")
    max_hits: int = Field(
        102_400,
        ge=1,
        le=100_000_000,
        description="most hits one batch request may ask for: items x k (offset + k), e.g. 1,024 queries at k 100; "
        "more is a 422 before any work",
    )
    max_filter_conditions: int = Field(
        4096,
        ge=1,
        le=10_000_000,
        description="most conditions (one per operator on a field, and per and/or/not) in all the filters of one "
        "request; more is a 422 before any work",
    )
    max_words: int = Field(
        20_000,
        ge=1,
        le=100_000_000,
        description="most words in all the word lists of one doesnt-match or n-similarity batch, and in all the "
        "positive and negative lists of one neighbours request; more is a 422",
    )
    max_scored_rows: int = Field(
        20_000_000,
        ge=1,
        le=1_000_000_000_000,
        description="most rows one analogy batch scores one by one: its questions that score every row searched "
        "(all of them with method 3cosmul, those with expect otherwise) x those rows, e.g. 50 questions over "
        "400,000 rows; more is a 422 before any work (a single question is always answered). Also what one "
        "request scores or tests one by one beyond its searches, together: the documents the words of its keyword "
        "queries add up (a word given twice counts twice), the rows each condition of its filters tests (conditions "
        "x the table's rows, e.g. 20 conditions over a million rows), and the candidates diversity (MMR) compares "
        "with each hit it chooses (hits x (candidates + 500)); more is a 422 (before any filter is evaluated; "
        "diversity's before the query that would pass it)",
    )
    max_exact_rows: int = Field(
        102_400_000,
        ge=1,
        le=1_000_000_000_000,
        description="most rows one request's exact searches score: their queries x the rows each scores (a search "
        "with exact, or restrict, or of a table without an approximate index, or filtered to few rows; rank's pairs, "
        "each scoring every row), e.g. a batch "
        "of 1,024 queries over 100,000 rows, the largest table an import leaves without one (1,024 exact queries over "
        "GloVe's 400,000 rows took a core for 3.3 s); more is a 422 before they are scored",
    )
    max_answer_bytes: int = Field(
        64_000_000,
        ge=1,
        le=100_000_000_000,
        description="most bytes of text and vectors one search answers: the text and string fields of all the hits "
        "of a documents table, and with include vector every hit's vector at 12 bytes a value (64 MB: 1,024 "
        "queries at k 10 of 6 KB documents); more is a 422 before the answer is built",
    )
    max_layout_work: int = Field(
        32_768,
        ge=1,
        le=100_000_000,
        description="largest t-SNE or UMAP projection: tokens x perplexity (t-SNE) or tokens x n_neighbors (UMAP), "
        "e.g. 1,024 tokens at perplexity 32; more is a 422",
    )
    max_encode_tokens: int = Field(
        16_384,
        ge=1,
        le=100_000_000,
        description="most tokens one request has a transformer table's model run: the texts of an embed, embeddings, "
        "contextual or documents write request, or the text queries of a search, each cut at the model's length, "
        "[CLS] and [SEP] included; counted once they are tokenised, more is a 422 before the model runs. 16,384: 64 "
        "of the encoder's runs of 256 tokens, so a batch of 128 texts of 128 tokens (paragraphs of about 100 words), "
        "or of 64 texts at all-MiniLM-L6-v2's longest (256 tokens)",
    )
    layout_slots: int = Field(
        1,
        ge=1,
        le=512,
        description="long computations (t-SNE and UMAP projections, t-SNE map layouts) running at once per "
        "worker, in slots of their own: searches never wait behind them",
    )
    layout_queue: int = Field(
        4,
        ge=0,
        le=100_000,
        description="long computations waiting for a slot per worker; one more is answered 503 overloaded at once",
    )
    max_body_bytes: int = Field(
        4 * MIB, ge=1 * KIB, le=1 * GIB, description="largest request body; larger bodies get 413"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed by CORS (default none: CORS closed)"
    )
    log_format: Literal["plain", "json"] = Field("plain", description="log lines as plain text or one JSON object")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    threads: int | None = Field(
        None, description="FAISS/BLAS threads per worker, 1 to 512 (embedding-serve: OMP_NUM_THREADS, else 1)"
    )
    searcher_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="how much lower the CPU priority of each worker's searcher thread is than its event loop's "
        "(Linux nice; 0, the default: the same; a higher value starves the searches whenever other processes "
        "want the cores)",
    )
    api_key: SecretStr | None = Field(
        None, description="key for the admin endpoints (X-API-Key header); unset: admin endpoints are disabled"
    )
    read_api_key: SecretStr | None = Field(
        None,
        description="key every /v1 read must carry (X-API-Key header; a write key or the admin key works too); "
        "unset: open",
    )
    write_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="keys that may write to documents tables (X-API-Key header; comma-separated); none: read-only",
    )
    write_sync: bool = Field(
        True, description="fsync the write log before a write is answered; off, a crash of the machine may lose writes"
    )
    compact_rows: int = Field(
        10_000,
        ge=0,
        le=1_000_000_000_000,
        description="compact a documents table in the background once this many documents were written or deleted "
        "since its version; 0: not by count",
    )
    compact_seconds: float = Field(
        0.0,
        ge=0,
        le=YEAR_SECONDS,
        description="compact a documents table in the background once its oldest write since its version is this "
        "many seconds old (at most a year); 0: not by age. Also the first wait before a failed compaction is tried "
        "again (a minute when 0), doubled after each failure in a row up to an hour",
    )
    verify_checksums: bool = Field(True, description="check every table file's sha256 against its manifest on load")
    build_deferred: bool = Field(
        True,
        description="build the approximate index a table's build deferred (embedding-index build --defer-index) in a "
        "background process, at start-up and for a table published later, serving exact answers until it is published",
    )
    cache_bytes: int = Field(
        8 * MIB,
        ge=0,
        le=1 * TIB,
        description="memory per worker for repeated GET answers (service.http.cache); 0 turns it off",
    )
    cache_dir: Path | None = Field(
        None,
        description="where whole-table map layouts are kept (default <data_dir>/.cache, or a temporary directory "
        "when the data directory is read-only)",
    )
    map_tsne_rows: int = Field(
        0,
        ge=0,
        le=MAX_MAP_TSNE_ROWS,
        description="rows (the most frequent) of the explorer's t-SNE map, at least the 91 its perplexity of 30 needs; "
        "0 turns t-SNE off",
    )
    telemetry: bool = Field(
        False,
        description="FastAPI's OpenTelemetry spans, metrics and logs (needs an OpenTelemetry SDK set up); off, no "
        "request pays its checks (more searched requests/s, BENCHMARKS.md); /metrics is there either way",
    )

    # The connection: what a replica that clients reach directly (no proxy in front) needs (service.http.protocol).
    max_header_bytes: int = Field(
        32 * KIB,
        ge=1 * KIB,
        le=1 * MIB,
        description="largest request line plus headers; a larger one gets 431 (414 when the URL is most of it)",
    )
    header_timeout: float = Field(
        10.0,
        ge=MIN_CLIENT_SECONDS,
        le=3600,
        description="seconds a client has for a request line and headers, from connecting or from the first byte of "
        "the next request on a kept-alive connection: then 408 (or the connection closed, if nothing came)",
    )
    body_timeout: float = Field(
        30.0,
        ge=MIN_CLIENT_SECONDS,
        le=3600,
        description="seconds a client has for a request body once its head has arrived (a body that stalls): then 408",
    )
    send_timeout: float = Field(
        30.0,
        ge=MIN_CLIENT_SECONDS,
        le=3600,
        description="seconds an answer may wait with not a byte of it read by the client (it reads none): then the "
        "connection is closed, freeing its slot and the answer's memory (between one and two times this)",
    )
    keep_alive_timeout: float = Field(
        75.0,
        ge=MIN_CLIENT_SECONDS,
        le=3600,
        description="seconds an idle kept-alive connection stays open; longer than clients and load balancers keep "
        "theirs (nginx: 60 s), so the server never closes one at the moment a client reuses it",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="open connections per worker; a connection opened beyond them is answered 503 (Retry-After) and "
        "closed",
    )
    drain_seconds: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="on SIGTERM or SIGINT, seconds the server keeps serving with /readyz answering 503 before it "
        "stops accepting connections",
    )
    watch_seconds: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="how often the data directory is checked for new, rebuilt or removed tables (a stat of each "
        "table's files, so a file written over in place withdraws its table), which are then reloaded as on SIGHUP; "
        "0 turns the watching off",
    )
    shutdown_timeout: float = Field(
        20.0,
        ge=0,
        le=3600,
        description="after the drain, seconds requests in flight have to finish before they are cancelled",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The key files before the variables: an empty EMBEDDING_API_KEY beside EMBEDDING_API_KEY_FILE is no key.
        return (
            init_settings,
            SecretFiles(settings_cls, KEY_SETTINGS),
            env_settings,
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="after")
    def _hits_reachable(self) -> Settings:
        """A single query at EMBEDDING_MAX_K must fit in EMBEDDING_MAX_HITS (items x k): else a k its own limit
        allows (and GET /v1/limits advertises) is always refused."""
        if self.max_hits < self.max_k:
            raise ValueError(
                f"EMBEDDING_MAX_HITS={self.max_hits} is less than EMBEDDING_MAX_K={self.max_k}: one query at k "
                f"{self.max_k} would always be refused; raise EMBEDDING_MAX_HITS or lower EMBEDDING_MAX_K"
            )
        return self

    @model_validator(mode="after")
    def _keys_of_one_kind(self) -> Settings:
        """Each key is of one kind: a read key that is also the admin key or a write key gave every reader the right
        to reload the tables or to write (a write key the admin's rights), without a word. Refused naming the
        settings (or their files), never a key."""
        files = key_files(KEY_SETTINGS)
        kinds = {
            "api_key": {self.api_key.get_secret_value()} if self.api_key else set(),
            "read_api_key": {self.read_api_key.get_secret_value()} if self.read_api_key else set(),
            "write_keys": set(self.write_keys),
        }
        for one, other in itertools.combinations(KEY_SETTINGS, 2):
            if kinds[one] & kinds[other]:
                named = [files.get(field, "").split(":")[0] or f"EMBEDDING_{field.upper()}" for field in (one, other)]
                raise ValueError(
                    f"{named[0]} and {named[1]} share a key: each kind of key must be its own (whoever holds it "
                    "would have the rights of both)"
                )
        return self

    @field_validator("threads", mode="before")
    @classmethod
    def _threads(cls, value: Any) -> Any:
        """EMBEDDING_THREADS read as the builder and the start-up read it (index.threads), refused in its words."""
        try:
            return None if value is None else threads.parsed(value)
        except ValueError:
            raise PydanticCustomError(OUT_OF_RANGE, threads.RANGE) from None

    @field_validator("tables", "cors_origins", "write_keys", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_given(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # Path("") is ".": the working directory, not meant
            raise ValueError("is empty: name a directory (the default is ./data)")
        return value

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _cache_dir_given(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # EMBEDDING_CACHE_DIR= (empty): the default, not "."
            return None
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_dir_exists(cls, value: Path) -> Path:
        with _looked_at(value):
            if not value.is_dir():
                raise ValueError(f"{value} is not a directory")
            if not os.access(value, os.R_OK | os.X_OK):
                raise ValueError(f"{value} is not readable by this user")
        return value

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir_usable(cls, value: Path | None) -> Path | None:
        """A directory this user may write, or one it may make (at the first layout kept): one given that cannot
        keep the layouts would have every worker compute each again after every restart (a t-SNE map: minutes)."""
        if value is None:
            return None
        with _looked_at(value):
            found = next((path for path in (value, *value.parents) if path.exists()), Path("."))
            where = str(value) if found == value else f"{value} cannot be made: {found}"
            if not found.is_dir():
                raise ValueError(f"{where} is not a directory")
            if not os.access(found, os.W_OK | os.X_OK):
                raise ValueError(f"{where} is not writable by this user")
        return value

    @field_validator("tables")
    @classmethod
    def _table_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one table name, or leave it unset to load every table")
        # Imported here: index.store loads numpy, whose BLAS threads are fixed at import, and embedding-serve
        # sets their number (OPENBLAS_NUM_THREADS, ...) only after importing this module.
        from index.store import check_name

        for name in value:
            try:
                check_name(name)
            except InvalidQuery as exc:
                raise ValueError(exc.message) from None
        return list(dict.fromkeys(value))

    @field_validator("map_tsne_rows", mode="wrap")
    @classmethod
    def _tsne_rows(cls, value: Any, as_int: ValidatorFunctionWrapHandler) -> int:
        """0, or enough rows for the t-SNE map's perplexity (fewer failed every request for the map, not the start)
        up to MAX_MAP_TSNE_ROWS; any other value refused naming that one range, with its value."""
        try:
            rows: int = as_int(value)
        except ValidationError:
            rows = -1
        if rows == 0:
            return rows
        from index.engine.door import tsne_least_rows  # the engine (numpy) only once t-SNE maps are on

        least = tsne_least_rows(MAP_TSNE["perplexity"])
        if not least <= rows <= MAX_MAP_TSNE_ROWS:
            raise PydanticCustomError(
                OUT_OF_RANGE,
                f"must be a whole number from {least} (what a t-SNE map of perplexity {MAP_TSNE['perplexity']:g} "
                f"needs) to {MAX_MAP_TSNE_ROWS}, or 0 (t-SNE maps off)",
            )
        return rows

    @field_validator("api_key", "read_api_key", mode="before")
    @classmethod
    def _key(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or (isinstance(value, str) and not value.strip()):
            return None  # EMBEDDING_API_KEY= (empty) means no key
        if not isinstance(value, str) or not value.isascii() or not value.isprintable() or value != value.strip():
            raise ValueError("an API key must be printable ASCII without surrounding spaces (it is sent in a header)")
        return value

    @field_validator("write_keys")
    @classmethod
    def _write_keys(cls, value: list[str]) -> list[str]:
        return [key for key in (cls._key(given) for given in value) if key is not None]  # empty entries dropped

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin != "*" and not origin.lower().startswith(("http://", "https://")):
                raise ValueError(f"CORS origin {origin!r} must be '*' or start with http:// or https://")
            if origin != "*" and _browser_origin(origin) != origin:  # compared as sent: it would never match
                raise ValueError(
                    f"CORS origin {origin!r} is not one a browser sends: write it {_browser_origin(origin)!r} "
                    "(scheme://host[:port] in lower case, no path, no default port)"
                )
        return value


@contextlib.contextmanager
def _looked_at(path: Path) -> Iterator[None]:
    """A directory setting's check: a look the system refuses (under a directory this user may not search) is the
    setting's refusal, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise ValueError(f"{path} cannot be looked at: {exc.strerror or exc}") from None


DEFAULT_PORTS = {"http": 80, "https": 443}


def _browser_origin(url: str) -> str:
    """The origin of ``url`` as a browser's ``Origin`` header gives it: scheme, host and port (when not the
    scheme's default) in lower case, nothing else."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        raise ValueError(f"CORS origin {url!r}: its port is not a number from 0 to 65535") from None
    host = parts.hostname or ""
    if not host:
        raise ValueError(f"CORS origin {url!r} names no host")
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    scheme = parts.scheme.lower()
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else "")


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" or "max PERIOD" (a container's CPU limit)
# cgroup v1: the cpu controller's directory (named either way) holds cpu.cfs_quota_us (-1: no limit) and
# cpu.cfs_period_us
CFS_DIRS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"))


def cores(cpu_max: Path = CPU_MAX, cfs_dirs: tuple[Path, ...] = CFS_DIRS) -> int:
    """The CPUs this process may use: those it may run on, fewer when its cgroup's CPU quota allows less (a
    container's CPU limit, e.g. Kubernetes' ``resources.limits.cpu``; cgroup v2 or v1), rounded up, at least 1."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    limits = [_quota_cores(cpu_max)] + [_quota_cores(d / "cpu.cfs_quota_us", d / "cpu.cfs_period_us") for d in cfs_dirs]
    return min([usable, *(limit for limit in limits if limit is not None)])


def _quota_cores(quota_file: Path, period_file: Path | None = None) -> int | None:
    """The CPUs a cgroup's quota allows, rounded up (at least 1): a quota and a period in one file (v2's
    ``cpu.max``) or in two (v1's); None without a quota ("max", -1) or a file we can read."""
    try:
        if period_file is None:
            quota, period = quota_file.read_text().split()[:2]
        else:
            quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
        if quota == "max" or int(quota) <= 0 or int(period) <= 0:
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):  # no such file (the other cgroup version), or not one we can read
        return None


# The memory limit of this process's cgroup, in bytes: v2's (or "max") and v1's (a huge number without a limit)
MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory(limit_files: tuple[Path, ...] = MEMORY_LIMITS) -> int:
    """The bytes of memory this process may use: the machine's, less when its cgroup's limit is lower (a
    container's memory limit, e.g. Kubernetes' ``resources.limits.memory``; cgroup v2 or v1)."""
    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    for path in limit_files:
        with contextlib.suppress(OSError, ValueError):  # no such file (the other version), or "max": no limit
            limits.append(int(path.read_text().strip()))
    return min(limits)


def describe_error(
    exc: ValidationError,
    fields: Mapping[str, FieldInfo] = Settings.model_fields,
    *,
    options: Mapping[str, str] | None = None,
) -> str:
    """One line naming each bad setting by its environment variable, a key read from a file by that file, one given
    by a command-line option by that option (``options``: setting -> option); the value given where the check's own
    words do not name it (never a key's), and a number's range."""
    files = key_files(KEY_SETTINGS)
    parts = []
    for error in exc.errors():
        if not error["loc"]:  # a check of several settings, whose words name them
            parts.append(error["msg"].removeprefix("Value error, "))
            continue
        field = ".".join(str(p) for p in error["loc"])
        name = field.split(".")[0]
        message = error["msg"].removeprefix("Value error, ")
        variable = f"EMBEDDING_{name.upper()}{field[len(name) :]}"  # a table's name as given
        variable = (options or {}).get(name) or files.get(name) or variable
        if error["type"] != "value_error" and name not in KEY_SETTINGS:  # pydantic's words, without the value
            variable += f"={without_passwords(repr(error['input']))}"
            if error["type"] != OUT_OF_RANGE:  # else the check's own words say what the setting takes
                message = (allowed(fields[name]) if name in fields else "") or message
        parts.append(f"{variable}: {message}")
    return "invalid settings: " + "; ".join(parts)


# A URL's user and password (``http://user:password@host``): up to the authority's last "@", as urlsplit splits it
# (either may hold a quote, which a refusal's quotes around the URL must not cut short)
URL_PASSWORD = re.compile(r"(://[^/:@\s]*):[^/\s]*@")


def without_passwords(text: str) -> str:
    """``text`` as a refusal shows it: the password of each URL in it (``http://user:password@host/...``) as
    ``***``."""
    return URL_PASSWORD.sub(r"\1:***@", text)


def allowed(field: FieldInfo) -> str:
    """What a yes-or-no or a number setting takes ("must be a whole number from 1 to 100000", from its bounds); ""
    for another setting, whose check says it."""
    if field.annotation is bool:
        return "must be true or false"
    kinds = {int: "a whole number", float: "a number"}
    kind = next((kinds[t] for t in (field.annotation, *get_args(field.annotation)) if t in kinds), "")
    bounds = {key: _shown(getattr(m, key)) for m in field.metadata for key in ("ge", "le") if hasattr(m, key)}
    if not kind or "le" not in bounds:
        return ""
    return f"must be {kind} from {bounds['ge']} to {bounds['le']}"


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)
