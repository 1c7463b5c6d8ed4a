"""Templates and settings: typos and bad values are ConfigErrors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from firepool.backends.kubernetes.settings import (
    KubernetesSettings,
    PodTemplate,
    Templates,
    load_templates,
)
from firepool.model import ConfigError


def test_load_yaml_templates_and_merge_defaults(tmp_path: Path) -> None:
    path = tmp_path / "templates.yaml"
    path.write_text(
        "defaults:\n"
        "  image: registry.local/firepool/base:0.1.0\n"
        "  node_selector: {pool-tier: warm}\n"
        "  env: {HF_HOME: /cache}\n"
        "pools:\n"
        "  h100:\n"
        "    node_selector: {gpu: h100}\n"
        "    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
        "    priority_class: firepool-gpu\n"
        "    checkpoint_pvc: ckpt\n"
    )
    templates = load_templates(path)
    h100 = templates.for_pool("h100")
    assert h100.image == "registry.local/firepool/base:0.1.0"
    assert h100.node_selector == {"pool-tier": "warm", "gpu": "h100"}
    assert h100.env == {"HF_HOME": "/cache"} and h100.checkpoint_pvc == "ckpt"
    assert h100.tolerations[0].operator == "Exists"
    assert templates.for_pool("cpu") == templates.defaults


def test_toml_templates(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[pools.cpu]\nservice_account = "runner"\n')
    assert load_templates(path).for_pool("cpu").service_account == "runner"


def test_typo_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("pools:\n  cpu:\n    node_selectr: {a: b}\n")
    with pytest.raises(ConfigError) as err:
        load_templates(path)
    assert err.value.field == "pools.cpu.node_selectr"


def test_bad_toleration_operator() -> None:
    with pytest.raises(ConfigError) as err:
        Templates.model_validate({"defaults": {"tolerations": [{"operator": "Maybe"}]}})
    assert err.value.field is not None and "operator" in err.value.field


def test_backend_owned_env_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        PodTemplate(env={"FIREPOOL_AGENT_SECRET": "x"})
    assert err.value.field == "env.FIREPOOL_AGENT_SECRET"
    with pytest.raises(ConfigError) as err:
        PodTemplate(env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert err.value.field == "env.NVIDIA_VISIBLE_DEVICES"


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([{"host_path": "cache", "mount_path": "/cache"}], "host_mounts.0.host_path"),
        ([{"host_path": "/cache", "mount_path": "cache"}], "host_mounts.0.mount_path"),
        (
            [{"host_path": "/cache", "mount_path": "/c", "read_only": False}],
            "host_mounts.0.read_only",
        ),
        ([{"host_path": "/a", "mount_path": "/var/lib/firepool/pod"}], "host_mounts.0.mount_path"),
        ([{"host_path": "/a", "mount_path": "/checkpoints"}], "host_mounts.0.mount_path"),
        (
            [{"host_path": "/a", "mount_path": "/m"}, {"host_path": "/b", "mount_path": "/m"}],
            "host_mounts.1.mount_path",
        ),
    ],
)
def test_bad_host_mounts_are_refused_by_name(mounts: list[dict[str, object]], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        PodTemplate.model_validate({"host_mounts": mounts})
    assert err.value.field == field, err.value


def test_relative_checkpoint_mount_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        PodTemplate(checkpoint_mount="ckpt")
    assert err.value.field == "checkpoint_mount"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"qps": 0}, "qps"),
        ({"gpu_resource": "nvidia com/gpu"}, "gpu_resource"),
        ({"agent_port": 70000}, "agent_port"),
        ({"qpss": 5}, "qpss"),
    ],
)
def test_settings_errors(values: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        KubernetesSettings.model_validate(values)
    assert err.value.field == field


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_templates(path)
    assert err.value.field == "templates"
