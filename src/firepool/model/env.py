"""Environment variable names a job may not set, and why."""

from __future__ import annotations

import re

_FORBIDDEN_ENV_EXACT = frozenset(
    {
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONSAFEPATH",
        "PYTHONNOUSERSITE",
        "PYTHONPLATLIBDIR",
        "PYTHONBREAKPOINT",
        "PYTHONWARNINGS",
        "PYTHONDEVMODE",
        "PYTHONMALLOC",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PATH",
        "HOME",
        "TMPDIR",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "NODE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RAY_ADDRESS",
    }
)
_FORBIDDEN_ENV_PREFIXES = (
    "LD_",
    "DYLD_",
    "CUDA_DEVICE_MEMORY_",
    "FIREPOOL_",
    "TORCHELASTIC_",
    "TORCH_ELASTIC_",
    "PET_",
    "GLIBC_",
    "MALLOC_",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def forbidden_env_reason(name: str) -> str | None:
    """Why a caller may not set this environment variable, or None if it may.

    Loader hooks, interpreter start-up hooks, the broker's own variables and the rank and
    rendezvous variables the executor injects are refused: each could change what runs in the
    pod or how it joins a gang, behind the agent's back.
    """
    if not _ENV_NAME.match(name):
        return "not a valid environment variable name"
    upper = name.upper()
    if upper in _FORBIDDEN_ENV_EXACT:
        return "reserved for the broker, the loader or the interpreter"
    for prefix in _FORBIDDEN_ENV_PREFIXES:
        if upper.startswith(prefix):
            return f"names starting with {prefix} are reserved"
    return None


# --------------------------------------------------------------------------- jobs
