"""Find the machine's GPUs, by UUID, so a pod can be bound to exactly one card.

NVML through `pynvml` (the nvidia-ml-py package) when importable, else `nvidia-smi`'s CSV
query (also NVML underneath), else none. CI and CPU-only machines configure fake devices
instead, which behave the same everywhere except that nothing checks them against hardware.
Binding is by UUID, never by index: indices change with CUDA_DEVICE_ORDER and with what else is
visible, UUIDs do not.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from firepool.model import ACCELERATORS


@dataclass(frozen=True)
class Device:
    uuid: str
    model: str  # a key of model.ACCELERATORS, or the raw NVML name if unknown
    memory_mib: int
    index: int


def model_of(name: str) -> str:
    """Map an NVML product name ("NVIDIA H100 80GB HBM3") to an ACCELERATORS key."""
    upper = name.upper()
    if "A100" in upper:
        return "A100-80GB" if "80GB" in upper else "A100"
    for key in sorted(ACCELERATORS, key=len, reverse=True):
        if key != "fake" and key.upper() in upper:
            return key
    return name


def fake_devices(uuids: Sequence[str], model: str = "fake") -> list[Device]:
    mib = ACCELERATORS.get(model, 16) * 1024
    return [Device(uuid=u, model=model, memory_mib=mib, index=i) for i, u in enumerate(uuids)]


def _from_pynvml() -> list[Device] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            found.append(Device(uuid=uuid, model=model_of(name), memory_mib=int(mem), index=i))
        return found
    finally:
        pynvml.nvmlShutdown()


def _from_nvidia_smi() -> list[Device]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            index, uuid, name, mem = parts
            mib = int(float(mem))
            found.append(Device(uuid=uuid, model=model_of(name), memory_mib=mib, index=int(index)))
    return found


def discover() -> tuple[list[Device], str]:
    """(devices, how they were found: "nvml", "nvidia-smi" or "none")."""
    via_nvml = _from_pynvml()
    if via_nvml is not None:
        return via_nvml, "nvml"
    via_smi = _from_nvidia_smi()
    return via_smi, ("nvidia-smi" if via_smi else "none")
