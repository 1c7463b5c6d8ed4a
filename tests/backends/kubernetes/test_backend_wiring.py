"""`firepool serve --backend kubernetes` builds the right backend from its flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from firepool.backends.kubernetes import KubernetesBackend
from firepool.cli.main import app
from firepool.cli.serve import kubernetes_settings
from firepool.composition import build_backend
from firepool.model import ConfigError


def test_flags_become_settings(tmp_path: Path) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text("pools:\n  cpu:\n    priority_class: warm\n")
    settings = kubernetes_settings("team-a", "/etc/kube", templates, 50.0, 8080)
    assert settings.namespace == "team-a" and settings.kubeconfig == "/etc/kube"
    assert settings.qps == 50.0 and settings.burst == 50 and settings.agent_port == 8080
    assert settings.templates.for_pool("cpu").priority_class == "warm"


def test_build_backend_by_kind(tmp_path: Path) -> None:
    settings = kubernetes_settings("ns", None, None, 100.0, 7070)
    backend = build_backend("kubernetes", tmp_path, kubernetes=settings)
    assert isinstance(backend, KubernetesBackend)
    assert backend.capabilities.name == "kubernetes"
    with pytest.raises(ConfigError) as err:
        build_backend("nomad", tmp_path)
    assert err.value.field == "backend"


def test_bad_namespace_flag_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["serve", "--backend", "kubernetes", "--namespace", "Not_A_Namespace",
         "--data-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "namespace" in result.output


def test_unknown_backend_flag_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--backend", "nomad", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
