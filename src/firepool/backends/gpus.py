"""Find the machine's GPUs, by UUID, so a pod can be bound to exactly one card.

NVML through `pynvml` (the nvidia-ml-py package) when importable, else `nvidia-smi`'s CSV
query (also NVML underneath), else none. CI and CPU-only machines configure fake devices
instead, which behave the same everywhere except that nothing checks them against hardware.
Binding is by UUID, never by index: indices change with CUDA_DEVICE_ORDER and with what else is
visible, UUIDs do not.

`compute_processes` reads, the same two ways, which processes hold a CUDA context on which card
(NVML's per-process compute list): what shows that a standby holds none until it is promoted
(`python -m firepool.bench gpu-check`).
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
    #: The product name as NVML gives it ("NVIDIA H200"); "" for fake devices.
    name: str = ""


@dataclass(frozen=True)
class ComputeProcess:
    """A process holding a CUDA context on a card, as the driver reports it."""

    pid: int
    uuid: str
    #: Device memory the process holds; None where the driver does not say (it answers
    #: "[N/A]" on some virtualised GPUs).
    used_mib: int | None


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
            found.append(
                Device(uuid=uuid, model=model_of(name), memory_mib=int(mem), index=i, name=name)
            )
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
    return parse_query_gpu(out)


def nvidia_smi_devices() -> list[Device]:
    """The cards as nvidia-smi lists them, whatever pynvml says: a cross-check of NVML."""
    return _from_nvidia_smi()


def parse_query_gpu(out: str) -> list[Device]:
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`."""
    found = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            index, uuid, name, mem = parts
            try:
                mib = int(float(mem))
            except ValueError:
                continue
            found.append(
                Device(uuid=uuid, model=model_of(name), memory_mib=mib, index=int(index), name=name)
            )
    return found


def discover() -> tuple[list[Device], str]:
    """(devices, how they were found: "nvml", "nvidia-smi" or "none")."""
    via_nvml = _from_pynvml()
    if via_nvml is not None:
        return via_nvml, "nvml"
    via_smi = _from_nvidia_smi()
    return via_smi, ("nvidia-smi" if via_smi else "none")


def _compute_from_pynvml() -> list[ComputeProcess] | None:
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
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(proc, "usedGpuMemory", None)
                # NVML_VALUE_NOT_AVAILABLE is the all-ones unsigned long long
                mib = None if used is None or used >= 2**64 - 1 else int(used) // (1024 * 1024)
                found.append(ComputeProcess(pid=int(proc.pid), uuid=uuid, used_mib=mib))
        return found
    except Exception:
        return None  # a failed read is not "no process": the caller must not take it as one
    finally:
        pynvml.nvmlShutdown()


def parse_compute_apps(out: str) -> list[ComputeProcess]:
    """`nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits`
    output; a used memory of "[N/A]" (or anything not a number) becomes None."""
    found = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        pid, uuid, used = parts
        try:
            mib: int | None = int(float(used))
        except ValueError:
            mib = None
        found.append(ComputeProcess(pid=int(pid), uuid=uuid, used_mib=mib))
    return found


def _compute_from_nvidia_smi() -> list[ComputeProcess] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_compute_apps(out)


def compute_processes() -> tuple[list[ComputeProcess] | None, str]:
    """(every process holding a CUDA context on any card, how it was read: "nvml",
    "nvidia-smi" or "none"). None, not an empty list, when nothing could be read: a check that
    a pod holds no context must not pass because the driver could not be asked. The pids are
    those of the driver's PID namespace (the host's, for a broker that is not in a container)."""
    via_nvml = _compute_from_pynvml()
    if via_nvml is not None:
        return via_nvml, "nvml"
    via_smi = _compute_from_nvidia_smi()
    return via_smi, ("nvidia-smi" if via_smi is not None else "none")
