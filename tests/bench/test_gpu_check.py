"""The GPU check (`tools/gpu_check.sh`, `bench gpu-check`) in fake mode, end to end on real
local pods, as CI runs it: its JSON's shape, the real-card steps reported skipped and never
passed, and a step that fails (a wrong expectation) making the script exit non-zero. The
real-card judging (NVML's compute list, the promoted job's CUDA report) is run here on
synthetic observations, since no card is here: what it decides from them is what it would
decide on a lent device. The probe job and the NVML readers are tested without a driver."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from firepool.backends import gpus
from firepool.bench import gpu_check, standby
from firepool.bench.gpu_check import (
    FAKE_SKIP,
    NEEDS_CARD,
    STEPS,
    Card,
    Observation,
    Session,
    Step,
    choose_mode,
)
from firepool.testing import gpu_probe

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def _script(*args: str, out: Path | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHON"] = sys.executable
    if out is not None:
        env["OUT"] = str(out)
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in doc["steps"]}


def test_fake_mode_runs_what_a_fake_card_can_show_and_skips_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    rc, output = _script("--fake", "--json", str(path))
    assert rc == 0, output
    doc = json.loads(path.read_text())
    assert (doc["mode"], doc["mode_reason"], doc["complete"]) == ("fake", "--fake given", True)
    assert [s["name"] for s in doc["steps"]] == list(STEPS)
    steps = _steps(doc)
    for name, st in steps.items():
        assert set(st) >= {"status", "passed", "skipped", "duration_s", "checks", "figures"}
        assert st["duration_s"] >= 0
        if name in NEEDS_CARD:
            # Never passed: skipped, saying why, with no check recorded.
            assert (st["status"], st["passed"], st["skipped"]) == ("skipped", False, FAKE_SKIP)
            assert st["checks"] == {}
        else:
            assert (st["status"], st["passed"], st["skipped"]) == ("passed", True, None), st
            assert st["checks"] and all(st["checks"].values())
    # What the fake run did show: both jobs on one card, the next one on the standby only
    # after the first had ended, with the whole card's limit in each job's environment.
    placement = steps["standby_placement"]["figures"]
    assert placement["next"]["pods"][0]["acquisition"] == "standby"
    env = steps["memory_limit_env"]["figures"]["envs"]["next"]
    assert env["CUDA_VISIBLE_DEVICES"] == gpu_check.FAKE_UUID
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{gpu_check.FAKE_MEMORY_MIB}m"
    assert steps["promotion"]["figures"]["handovers_per_arm"] == 1
    assert doc["summary"] == {"passed": 3, "failed": 0, "skipped": 3, "ok": True}


def test_a_failing_step_makes_the_script_exit_non_zero(tmp_path: Path) -> None:
    path = tmp_path / "check.json"
    # No promotion takes less than 0 s: the step runs and its expectation cannot hold.
    rc, output = _script(
        "--fake", "--steps", "promotion", "--expect-promotion-below", "0", "--json", str(path)
    )
    assert rc == 1, output
    doc = json.loads(path.read_text())
    promotion = _steps(doc)["promotion"]
    assert (promotion["status"], promotion["passed"]) == ("failed", False)
    assert promotion["checks"]["promotion_below_expectation"] is False
    assert promotion["checks"]["every_next_job_on_the_standby"] is True
    assert doc["summary"]["ok"] is False and doc["summary"]["failed"] == 1
    others = [s for s in doc["steps"] if s["name"] != "promotion"]
    assert all(s["status"] == "skipped" and not s["passed"] for s in others)


def test_the_json_goes_to_out_when_no_path_is_given(tmp_path: Path) -> None:
    rc, output = _script("--fake", "--steps", "discovery", out=tmp_path)
    assert rc == 0, output
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert _steps(doc)["discovery"]["skipped"] == FAKE_SKIP


def test_the_mode_follows_what_discovery_found() -> None:
    card = gpus.Device(uuid="GPU-1", model="H200", memory_mib=143771, index=0, name="NVIDIA H200")
    assert choose_mode("auto", [card], "nvml") == ("real", "1 NVIDIA card(s) found via nvml")
    assert choose_mode("auto", [], "none")[0] == "fake"
    assert choose_mode("fake", [card], "nvml") == ("fake", "--fake given")
    with pytest.raises(ValueError, match="no NVIDIA device"):
        choose_mode("real", [], "none")


def test_a_step_passes_only_on_checks_that_held() -> None:
    empty = Step("x")
    empty.settle()
    assert (empty.status, empty.error) == ("failed", "no check ran")
    mixed = Step("x")
    mixed.check("a", True)
    mixed.check("b", False)
    mixed.settle()
    assert mixed.status == "failed"
    skipped = Step("x", skipped=FAKE_SKIP)
    skipped.settle()
    assert skipped.as_json()["passed"] is False and skipped.status == "skipped"


# --------------------------------------------------------------------------- real-card judging

CARD = Card("GPU-aaaa", "H200", "NVIDIA H200", 143771, "nvml")


def _observation(at: str, listed: dict[int, int], touching: set[int]) -> Observation:
    pods = {"active": [10, 11], "standby": [20, 21]}
    handles = {
        role: {
            str(p): {
                "device_files": ["/dev/nvidia0"] if p in touching else [],
                "libcuda": p in touching,
                "readable": True,
            }
            for p in pids
        }
        for role, pids in pods.items()
    }
    return Observation(
        at,
        "nvml",
        [{"pid": p, "used_mib": m} for p, m in listed.items()],
        {
            role: {"agent_pid": pids[0], "pids": pids, "handles": handles[role]}
            for role, pids in pods.items()
        },
    )


def _session(promoted_listed: dict[int, int], claimed_listed: dict[int, int]) -> Session:
    s = Session(CARD)
    s.observations = {
        "holding": _observation("holding", {11: 1500}, {11}),
        "claimed": _observation("claimed", {11: 1500, **claimed_listed}, {11}),
        "promoted": _observation("promoted", promoted_listed, set(promoted_listed)),
    }
    return s


def test_zero_vram_passes_when_nvml_sees_the_holder_and_then_the_promoted_job() -> None:
    step = Step("standby_zero_vram")
    gpu_check.step_zero_vram(step, _session({21: 1500}, {}))
    step.settle()
    assert step.status == "passed", step.checks


def test_zero_vram_fails_when_the_standby_holds_a_context_or_the_holder_lingers() -> None:
    step = Step("standby_zero_vram")
    gpu_check.step_zero_vram(step, _session({21: 1500}, {20: 300}))
    step.settle()
    assert step.checks["standby_no_context_claimed"] is False and step.status == "failed"
    lingering = Step("standby_zero_vram")
    gpu_check.step_zero_vram(lingering, _session({21: 1500, 11: 1500}, {}))
    assert lingering.checks["holder_gone_before_promotion"] is False
    # NVML could not be read: nothing is proven, so nothing passes.
    unread = _session({21: 1500}, {})
    unread.observations["claimed"].apps = None
    blind = Step("standby_zero_vram")
    gpu_check.step_zero_vram(blind, unread)
    assert blind.checks["nvml_read"] is False


def _cuda_session(cuda: dict[str, Any], interception: list[str]) -> Session:
    s = Session(CARD)
    s.reports["next"] = {"cuda": cuda, "limit_mib": 143771, "interception": interception}
    return s


def test_cuda_job_reports_what_enforces_the_limit() -> None:
    cuda = {
        "via": "driver",
        "device_uuid": "GPU-aaaa",
        "allocated_mib": 1024,
        "total_mib": 143771,
        "over_limit_refused": True,
    }
    step = Step("cuda_job_under_limit")
    gpu_check.step_cuda_job(step, _cuda_session(cuda, []), 1024)
    step.settle()
    assert step.status == "passed", step.checks
    assert step.figures["enforced_by"].startswith("the card's size only")
    wrong_card = Step("cuda_job_under_limit")
    gpu_check.step_cuda_job(wrong_card, _cuda_session({**cuda, "device_uuid": "GPU-b"}, []), 1024)
    assert wrong_card.checks["device_is_pods_card"] is False
    no_cuda = Step("cuda_job_under_limit")
    gpu_check.step_cuda_job(no_cuda, _cuda_session({"via": None, "error": "no libcuda"}, []), 1)
    no_cuda.settle()
    assert (no_cuda.status, no_cuda.error) == ("failed", "no libcuda")


# --------------------------------------------------------------------------- probe and NVML


def test_the_probe_reports_the_limit_and_fails_without_cuda(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "CUDA_DEVICE_MEMORY_LIMIT_0": "2g",
        "CUDA_VISIBLE_DEVICES": "GPU-none",
        "LD_LIBRARY_PATH": str(tmp_path),
    }
    plain = subprocess.run(
        gpu_probe.command(sys.executable, "--cuda", "none"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert plain.returncode == 0, plain.stderr
    report = json.loads(plain.stderr)
    assert report["limit_mib"] == 2048 and report["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-none"
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a driver is here: the probe would take a context")
    # The driver first (torch may be there); with neither usable the job says so and fails.
    driver = subprocess.run(
        gpu_probe.command(sys.executable, "--cuda", "driver"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert driver.returncode == 3
    failed = json.loads(driver.stderr.strip().splitlines()[-1])["cuda"]
    assert failed["via"] is None and "libcuda" in failed["error"]


def test_probe_helpers() -> None:
    assert gpu_probe.limit_mib("143771m") == 143771
    assert gpu_probe.limit_mib("1g") == 1024
    assert gpu_probe.limit_mib(str(3 * 1024 * 1024)) == 3
    assert gpu_probe.limit_mib("lots") is None and gpu_probe.limit_mib(None) is None
    assert gpu_probe.format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def _stub_nvidia_smi(directory: Path, script: str) -> None:
    exe = directory / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_from_pynvml", lambda: None)
    monkeypatch.setattr(gpus, "_compute_from_pynvml", lambda: None)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    _stub_nvidia_smi(
        tmp_path,
        """case "$1" in
--query-gpu=*) echo "0, GPU-aaaa, NVIDIA H200, 143771" ;;
--query-compute-apps=*) echo "4242, GPU-aaaa, 1500"; echo "4343, GPU-aaaa, [N/A]" ;;
esac
""",
    )
    devices, how = gpus.discover()
    assert how == "nvidia-smi"
    assert devices == [gpus.Device("GPU-aaaa", "H200", 143771, 0, "NVIDIA H200")]
    apps, how = gpus.compute_processes()
    assert how == "nvidia-smi"
    assert apps == [
        gpus.ComputeProcess(4242, "GPU-aaaa", 1500),
        gpus.ComputeProcess(4343, "GPU-aaaa", None),
    ]
    # A driver that cannot be asked is not a card without processes.
    _stub_nvidia_smi(tmp_path, "exit 9\n")
    assert gpus.compute_processes() == (None, "none")


def test_standby_bench_refuses_a_real_accelerator_it_cannot_find(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(standby, "discover", lambda: ([], "none"))
    assert standby.main(["--accelerator", "nvidia"]) == 2


def test_the_wheels_the_script_carries_are_firepool_dependencies() -> None:
    text = SCRIPT.read_text()
    listed = re.search(r"requirements=\(([^)]*)\)", text)
    assert listed is not None
    names = set(listed.group(1).split())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    assert names <= declared, names - declared
