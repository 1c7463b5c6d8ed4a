"""The client range rest.py needs: refused outside it with a typed error, and the same range
pyproject.toml installs."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from kubernetes import client as k8s_client
from packaging.requirements import Requirement
from packaging.version import Version

from firepool.backends.kubernetes import rest
from firepool.model import ConfigError, ErrorCode

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def pinned() -> Requirement:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    (requirement,) = (Requirement(r) for r in extras["kubernetes"])
    return requirement


@pytest.mark.parametrize("version", ["29.0.0", "36.1.0", "38.0.0", "not-a-version"])
def test_a_client_outside_the_range_is_a_config_error(version: str) -> None:
    with pytest.raises(ConfigError) as caught:
        rest.check_client(version)
    assert caught.value.code is ErrorCode.CONFIG and caught.value.field == "kubernetes"
    assert version in caught.value.message and "kubernetes>=37,<38" in caught.value.message


def test_the_installed_client_is_accepted_and_has_the_calls_rest_makes() -> None:
    rest.check_client(metadata.version("kubernetes"))
    assert callable(getattr(k8s_client.ApiClient, "param_serialize", None))
    assert callable(getattr(k8s_client.ApiClient, "call_api", None))


def test_an_old_client_is_refused_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest.metadata, "version", lambda name: "36.1.0")
    with pytest.raises(ConfigError, match=r"36\.1\.0"):
        rest.Rest(k8s_client.Configuration())


@pytest.mark.parametrize("version", ["36.99.0", "37.0.0", "37.4.1", "38.0.0", "40.1.0"])
def test_the_range_is_the_one_pyproject_installs(version: str) -> None:
    allowed = Version(version) in pinned().specifier
    try:
        rest.check_client(version)
        accepted = True
    except ConfigError:
        accepted = False
    assert accepted is allowed
