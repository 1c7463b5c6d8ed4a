"""A GPU job for the GPU check and the standby benchmark: optionally it takes a CUDA context and
device memory, then reports what the pod gave it (the card, the memory-limit variables, an
interception library if one is loaded) and what CUDA saw, waits until released, and exits.

It uses the standard library only, and is run as `python -c <this file's text> ARGS`: a job sees
no host files (so not this file) and its interpreter may lack firepool's dependencies (on a
device machine only the image's own packages are there). CUDA comes through PyTorch when it is
importable, else through the driver library itself (`libcuda.so.1`, via ctypes): a machine with
a driver always has that library, and not always PyTorch or the CUDA runtime.

Arguments:
  --cuda torch|driver|none   how to take the context (each falls back to the other when
                             unavailable; `none` takes nothing and only reports the pod's view)
  --alloc-mib N              device memory to allocate and write once the context is taken
  --try-over-limit           also ask for 1 GiB more than CUDA_DEVICE_MEMORY_LIMIT_0 allows
                             (a plain allocation, which the driver refuses at once; never
                             managed memory, which can hang a card)
  --report URL|stderr|none   POST the report (JSON) to URL, print it to stderr (the
                             default), or keep it (a job whose log must hold only its stamp)
  --wait URL                 after reporting, poll URL until it answers `go`
  --stamp-exit               print `time.time()` to stdout as the last instruction

Exit status: 0, or 3 when CUDA was asked for and could not be had (the report says why).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import time
import urllib.request
from typing import Any

#: What a job's environment says about its card and its memory limit.
ENV_PREFIXES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_", "NVIDIA_VISIBLE_DEVICES")
#: HAMi-core, the CUDA interception library that enforces CUDA_DEVICE_MEMORY_LIMIT_<i>.
INTERCEPTION_NAMES = ("libvgpu",)
MIB = 1024 * 1024

#: Held until the process exits, so that the memory stays allocated while it waits.
_KEEP: list[Any] = []


class CudaUnavailable(Exception):
    pass


def limit_mib(value: str | None) -> int | None:
    """HAMi-core's limit syntax: a number with an optional unit (`m`, `g`, `k`; bytes if
    none), e.g. `143771m`."""
    if not value:
        return None
    text = value.strip().lower()
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    try:
        if text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(float(text) / MIB)
    except (ValueError, IndexError):
        return None


def format_uuid(raw: bytes) -> str:
    """16 bytes of a CUDA UUID as NVML and CUDA_VISIBLE_DEVICES write it: GPU-8-4-4-4-12."""
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _interception() -> list[str]:
    found = [
        part
        for part in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
        if any(n in part for n in INTERCEPTION_NAMES)
    ]
    try:
        with open("/etc/ld.so.preload") as fh:
            found += [ln.strip() for ln in fh if any(n in ln for n in INTERCEPTION_NAMES)]
    except OSError:
        pass
    return found


def _nspid() -> list[int]:
    """This process's pid in every PID namespace from its own outwards, as far as it can see
    (a job in its pod's namespace sees only its own number)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return [os.getpid()]


def _via_torch(alloc_mib: int, over_mib: int | None) -> dict[str, Any]:
    try:
        import torch
    except ImportError as err:
        raise CudaUnavailable(f"torch: {err}") from None
    if not torch.cuda.is_available():
        raise CudaUnavailable(f"torch {torch.__version__}: no CUDA device")
    props = torch.cuda.get_device_properties(0)
    uuid = str(getattr(props, "uuid", ""))
    out: dict[str, Any] = {
        "via": "torch",
        "torch": torch.__version__,
        "device_name": props.name,
        "device_uuid": uuid if uuid.startswith(("GPU-", "MIG-")) or not uuid else f"GPU-{uuid}",
    }
    free, total = torch.cuda.mem_get_info()
    out.update(free_mib_before=free // MIB, total_mib=total // MIB)
    block = torch.empty(alloc_mib * MIB, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    _KEEP.append(block)
    out["allocated_mib"] = alloc_mib
    out["free_mib_after"] = torch.cuda.mem_get_info()[0] // MIB
    if over_mib is not None:
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        try:
            extra = torch.empty(over_mib * MIB, dtype=torch.uint8, device="cuda")
        except oom as err:
            out.update(over_limit_refused=True, over_limit_error=str(err).splitlines()[0])
        else:
            out.update(over_limit_refused=False, over_limit_error=None)
            del extra
            torch.cuda.empty_cache()
    return out


def _driver() -> Any:
    names = ["libcuda.so.1", ctypes.util.find_library("cuda")]
    errors = []
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as err:
            errors.append(str(err))
    raise CudaUnavailable("libcuda: " + ("; ".join(errors) or "not found"))


def _via_driver(alloc_mib: int, over_mib: int | None) -> dict[str, Any]:
    lib = _driver()
    size_t, u64 = ctypes.c_size_t, ctypes.c_uint64
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), size_t]
    lib.cuMemsetD8_v2.argtypes = [u64, ctypes.c_ubyte, size_t]
    lib.cuMemFree_v2.argtypes = [u64]
    lib.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(size_t), ctypes.POINTER(size_t)]
    lib.cuDeviceTotalMem_v2.argtypes = [ctypes.POINTER(size_t), ctypes.c_int]

    def check(rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            lib.cuGetErrorName(rc, ctypes.byref(name))
            raise CudaUnavailable(f"{what}: {(name.value or b'').decode() or rc}")

    check(lib.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    buf = ctypes.create_string_buffer(256)
    check(lib.cuDeviceGetName(buf, 256, dev), "cuDeviceGetName")
    raw = (ctypes.c_ubyte * 16)()
    get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
    check(get_uuid(raw, dev), "cuDeviceGetUuid")
    total = size_t()
    check(lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev), "cuDeviceTotalMem")
    # The primary context, as the runtime and PyTorch use: its API is the same in CUDA 12 and
    # 13, where cuCtxCreate's changed.
    ctx = ctypes.c_void_p()
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    free, tot = size_t(), size_t()
    check(lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(tot)), "cuMemGetInfo")
    out: dict[str, Any] = {
        "via": "driver",
        "device_name": buf.value.decode(errors="replace"),
        "device_uuid": format_uuid(bytes(raw)),
        "total_mib": total.value // MIB,
        "free_mib_before": free.value // MIB,
    }
    ptr = u64()
    check(lib.cuMemAlloc_v2(ctypes.byref(ptr), alloc_mib * MIB), "cuMemAlloc")
    check(lib.cuMemsetD8_v2(ptr.value, 1, alloc_mib * MIB), "cuMemsetD8")
    check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    _KEEP.append(ptr)
    out["allocated_mib"] = alloc_mib
    check(lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(tot)), "cuMemGetInfo")
    out["free_mib_after"] = free.value // MIB
    if over_mib is not None:
        extra = u64()
        rc = lib.cuMemAlloc_v2(ctypes.byref(extra), over_mib * MIB)
        if rc == 0:
            lib.cuMemFree_v2(extra.value)
            out.update(over_limit_refused=False, over_limit_error=None)
        else:
            name = ctypes.c_char_p()
            lib.cuGetErrorName(rc, ctypes.byref(name))
            out.update(over_limit_refused=True,
                       over_limit_error=(name.value or b"").decode() or str(rc))  # fmt: skip
    return out


def take_cuda(how: str, alloc_mib: int, over_mib: int | None) -> dict[str, Any]:
    """A context and `alloc_mib` of device memory by `how`, falling back to the other way."""
    order = [_via_torch, _via_driver] if how == "torch" else [_via_driver, _via_torch]
    errors = []
    for way in order:
        try:
            return way(alloc_mib, over_mib)
        except CudaUnavailable as err:
            errors.append(str(err))
    raise CudaUnavailable("; ".join(errors))


def report(how: str, alloc_mib: int, try_over: bool) -> tuple[dict[str, Any], bool]:
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    limit = limit_mib(os.environ.get("CUDA_DEVICE_MEMORY_LIMIT_0"))
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "nspid": _nspid(),
        "uid": os.getuid(),
        "attempt": os.environ.get("FIREPOOL_ATTEMPT"),
        "env": env,
        "limit_mib": limit,
        "interception": _interception(),
        "cuda": None,
    }
    if how == "none":
        return out, True
    over = limit + 1024 if try_over and limit is not None else None
    try:
        out["cuda"] = take_cuda(how, alloc_mib, over)
    except CudaUnavailable as err:
        out["cuda"] = {"via": None, "error": str(err)}
        return out, False
    return out, True


def _post(url: str, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def _wait(url: str) -> None:
    while True:
        with urllib.request.urlopen(url, timeout=30) as resp:
            if resp.read() == b"go":
                return
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    how, alloc_mib, try_over = "none", 0, False
    report_to = "stderr"
    wait_url = None
    stamp = False
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--cuda":
            how = args.pop(0)
            if how not in ("torch", "driver", "none"):
                print(f"--cuda {how!r}: choose torch, driver or none", file=sys.stderr)
                return 2
        elif arg == "--alloc-mib":
            alloc_mib = int(args.pop(0))
        elif arg == "--try-over-limit":
            try_over = True
        elif arg == "--report":
            report_to = args.pop(0)
        elif arg == "--wait":
            wait_url = args.pop(0)
        elif arg == "--stamp-exit":
            stamp = True
        else:
            print(f"unknown argument {arg!r}", file=sys.stderr)
            return 2
    body, ok = report(how, alloc_mib, try_over)
    if report_to == "stderr":
        print(json.dumps(body), file=sys.stderr, flush=True)
    elif report_to != "none":
        _post(report_to, body)
    if wait_url is not None:
        _wait(wait_url)
    if stamp:
        print(repr(time.time()), flush=True)
    return 0 if ok else 3


def command(python: str, *args: str) -> list[str]:
    """The job's command line: this file's text through `python -c` (a job sees no host
    files), then its arguments."""
    with open(__file__) as fh:
        source = fh.read()
    return [python, "-c", source, *args]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
