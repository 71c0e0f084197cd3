"""The sharded overlay (deploy/k8s/overlays/sharded), rendered by kustomize and validated with the others in
test_k8s.py: here, that it is the base once per shard and once for the front, wired together.

- each shard's Deployment loads only its shard of the sharded table, from the claim, read-only;
- each Service, autoscaler and disruption budget selects or targets its own Deployment's pods only;
- the front loads no table, and its ``EMBEDDING_SHARDS`` parses as the front's settings and names, in shard order,
  each shard's Service and the shard's table;
- every ConfigMap key is a setting of the server or of the front;
- the ``embedding-index`` commands the manifests suggest need nothing the image does not install.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from service.settings import Settings
from service.shard_settings import ShardSettings
from tests.deploy.support import REPO
from tests.deploy.test_k8s import render

SHARDS = 3


def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in render("overlays/sharded")}


def config_of(found: dict[tuple[str, str], dict[str, Any]], deployment: dict[str, Any]) -> dict[str, str]:
    (source,) = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    data: dict[str, str] = found["ConfigMap", source["configMapRef"]["name"]]["data"]
    return data


def test_one_api_per_shard_and_the_front() -> None:
    found = objects()
    names = {name for kind, name in found if kind == "Deployment"}
    assert names == {f"embedding-search-shard-{s}" for s in range(SHARDS)} | {"embedding-search-front"}
    for kind in ("Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"):
        assert {name for k, name in found if k == kind} == names


def test_each_shard_serves_its_shard_from_the_claim() -> None:
    found = objects()
    claims = {name for kind, name in found if kind == "PersistentVolumeClaim"}
    for s in range(SHARDS):
        deployment = found["Deployment", f"embedding-search-shard-{s}"]
        config = config_of(found, deployment)
        assert config["EMBEDDING_DATA_DIR"] == "/data/passages" and config["EMBEDDING_TABLES"] == f"shard-00{s}"
        pod = deployment["spec"]["template"]["spec"]
        (tables,) = [v for v in pod["volumes"] if v["name"] == "tables"]
        assert tables["persistentVolumeClaim"]["claimName"] in claims and tables["persistentVolumeClaim"]["readOnly"]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tables"]
        assert mount == {"name": "tables", "mountPath": "/data", "readOnly": True}


def test_each_service_and_policy_selects_its_own_pods() -> None:
    found = objects()
    pods = {
        name: deployment["spec"]["template"]["metadata"]["labels"]
        for (kind, name), deployment in found.items()
        if kind == "Deployment"
    }
    for name in pods:
        selector = found["Deployment", name]["spec"]["selector"]["matchLabels"]
        for other, other_labels in pods.items():
            picks = selector.items() <= other_labels.items()
            assert picks == (other == name), (name, other)
            for kind in ("Service", "PodDisruptionBudget"):
                spec = found[kind, name]["spec"]
                chosen = spec["selector"] if kind == "Service" else spec["selector"]["matchLabels"]
                assert (chosen.items() <= other_labels.items()) == (other == name), (kind, name, other)
        assert found["HorizontalPodAutoscaler", name]["spec"]["scaleTargetRef"]["name"] == name


def test_the_front_names_every_shards_service() -> None:
    found = objects()
    deployment = found["Deployment", "embedding-search-front"]
    config = config_of(found, deployment)
    assert "EMBEDDING_TABLES" not in config and config["EMBEDDING_PARTIAL"] == "false"
    pod = deployment["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == config["EMBEDDING_DATA_DIR"]]
    (empty,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in empty  # an empty data directory that exists: no table loaded, none missing
    settings = ShardSettings.model_validate({"shards": json.loads(config["EMBEDDING_SHARDS"])})
    assert list(settings.shards) == ["passages"] and len(settings.shards["passages"]) == SHARDS
    for s, replicas in enumerate(settings.shards["passages"]):
        port = found["Service", f"embedding-search-shard-{s}"]["spec"]["ports"][0]["port"]
        assert replicas == [f"http://embedding-search-shard-{s}:{port}/v1/tables/shard-00{s}"]


def test_every_config_key_is_a_setting() -> None:
    known = {f"EMBEDDING_{name.upper()}" for name in (*Settings.model_fields, *ShardSettings.model_fields)}
    for (kind, _), doc in objects().items():
        if kind == "ConfigMap":
            assert set(doc["data"]) <= known, set(doc["data"]) - known


def test_suggested_commands_run_on_the_image() -> None:
    """The image installs the project's base dependencies only (the Dockerfile): ``--ray`` needs the ray extra."""
    installed = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(dependency.startswith("ray") for dependency in installed)
    suggested = [
        f"{path.relative_to(REPO)}: {line.strip()}"
        for path in sorted((REPO / "deploy").rglob("*.yaml"))
        for line in path.read_text().splitlines()
        if "embedding-index" in line
    ]
    assert suggested and not [line for line in suggested if "--ray" in line]
