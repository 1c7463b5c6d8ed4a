"""`python -m firepool.bench kubernetes`: its defaults are the issue's scale, and without a
reachable API server it says so in one typed line instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.bench.kubernetes import main, parse


def test_defaults_are_the_target_scale() -> None:
    args = parse(["--kubeconfig", "k"])
    assert (args.nodes, args.pods, args.qps) == (1000, 10_000, 100.0)


def test_unreachable_cluster_is_one_typed_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\n"
        "users: [{name: x, user: {token: t}}]\n"
    )
    assert main(["--kubeconfig", str(kubeconfig), "--nodes", "1", "--pods", "1"]) == 2
    assert "Unavailable" in capsys.readouterr().err
