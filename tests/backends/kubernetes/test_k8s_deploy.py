"""deploy/: the manifests parse, reference what exists, ask for the least RBAC, and the catalog
and templates they ship load with the same code the broker uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main
import yaml

from firepool.backends.kubernetes.codec import AnnotationCodec
from firepool.backends.kubernetes.settings import KubernetesSettings, load_templates
from firepool.cli.main import app
from firepool.service.catalog import load_catalog

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_kustomize_resource_exists_and_parses() -> None:
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        spec = docs(kustomization)[0]
        for entry in spec.get("resources", []):
            target = kustomization.parent / entry
            assert target.exists(), f"{kustomization}: {entry}"
            if target.is_file():
                assert all("kind" in d for d in docs(target))
        for generator in spec.get("configMapGenerator", []):
            for name in generator.get("files", []):
                assert (kustomization.parent / name).is_file()


def test_shipped_catalog_and_templates_load() -> None:
    catalog = load_catalog(DEPLOY / "base" / "catalog.yaml")
    templates = load_templates(DEPLOY / "base" / "pod-templates.yaml")
    names = {p.name for p in catalog.pools}
    assert set(templates.pools) <= names
    assert any(p.is_gpu for p in catalog.pools)


def test_role_is_namespaced_and_minimal() -> None:
    (role,) = docs(DEPLOY / "base" / "role.yaml")
    assert role["kind"] == "Role"
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in role["rules"]}
    assert rules == {
        ("pods",): {"get", "list", "watch", "create", "delete", "patch"},
        ("secrets",): {"get", "list", "create", "delete"},
        ("events",): {"list"},  # the scheduler's reason for a pod left pending
    }


def test_deployment_flags_exist_in_firepool_serve() -> None:
    (deployment,) = docs(DEPLOY / "base" / "deployment.yaml")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    flags = {opt for p in serve.params for opt in getattr(p, "opts", [])}
    for arg in container["args"]:
        assert arg.split("=", 1)[0] in flags, arg
    env = {e["name"] for e in container["env"]}
    store = next(p for p in serve.params if p.name == "store")
    assert store.envvar in env
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]


def test_images_are_pinned_and_non_root() -> None:
    for dockerfile in (DEPLOY / "docker").glob("*.Dockerfile"):
        text = dockerfile.read_text()
        froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
        assert froms and all(":" in f and not f.endswith(":latest") for f in froms)
        assert all(f.split(":")[1][0].isdigit() for f in froms), froms
        assert "USER 10001:10001" in text


def policies() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs(DEPLOY / "base" / "networkpolicies.yaml")}


def test_pool_pods_talk_only_to_the_broker_on_its_ports() -> None:
    """The isolating policy selects every pool pod (the backend's pool label), admits the
    broker's pods (the Deployment's labels) on the agent's port only, and lets pods reach the
    broker's port and the cluster DNS, nothing else."""
    settings = KubernetesSettings()
    isolated = policies()["firepool-pods-isolated"]["spec"]
    codec = AnnotationCodec(settings.prefix)
    pools, networks = isolated["podSelector"]["matchExpressions"]
    assert pools == {"key": codec.own("pool"), "operator": "Exists"}
    # a `network: host` pool's pods (a gang's ranks talk to each other) are left alone
    assert networks == {"key": codec.own("network"), "operator": "NotIn", "values": ["host"]}
    assert set(isolated["policyTypes"]) == {"Ingress", "Egress"}
    (deployment,) = docs(DEPLOY / "base" / "deployment.yaml")
    broker = deployment["spec"]["template"]["metadata"]["labels"]
    (ingress,) = isolated["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": broker}}]
    assert ingress["ports"] == [{"protocol": "TCP", "port": settings.agent_port}]
    to_broker, to_dns = isolated["egress"]
    (served,) = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert to_broker["to"] == [{"podSelector": {"matchLabels": broker}}]
    assert to_broker["ports"] == [{"protocol": "TCP", "port": served["containerPort"]}]
    assert {p["port"] for p in to_dns["ports"]} == {53}


def test_egress_reaches_no_private_or_link_local_address() -> None:
    egress = policies()["firepool-pods-egress"]["spec"]
    assert egress["policyTypes"] == ["Egress"] and "ingress" not in egress
    blocks = [peer["ipBlock"] for rule in egress["egress"] for peer in rule["to"]]
    refused = {cidr for block in blocks for cidr in block["except"]}
    assert {b["cidr"] for b in blocks} == {"0.0.0.0/0", "::/0"}
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= refused
    assert {"fc00::/7", "fe80::/10"} <= refused
