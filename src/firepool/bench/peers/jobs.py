"""The job bodies every system runs (Python source, run as `python -c BODY` or exec'd in a
worker) and how their output is read back.

Each body prints `T <first instruction> <last instruction>` (wall clock), so a system's
per-job overhead is its submit -> done time minus the job's own run time, whatever the system
(a pod's warm interpreter, a fresh interpreter, a Ray worker).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Printed at the job's first and last instruction.
_TIMED = (
    "import time as _t; _a = _t.time()\n{work}\nprint('T', repr(_a), repr(_t.time()), flush=True)"
)
_TIMES = re.compile(r"^T (\S+) (\S+)$", re.MULTILINE)
_PROBE = re.compile(r"^PROBE file=(\d) daemon=(\d)$", re.MULTILINE)


def short() -> str:
    """A trivially short job: nothing but its own two clock reads."""
    return _TIMED.format(work="pass")


def sleep(seconds: float) -> str:
    """A loop job: a fixed-duration sleep, as the demo's bodies are."""
    return _TIMED.format(work=f"_t.sleep({seconds:.3f})")


def marker(probe_id: str) -> str:
    """The name both the planted file and the planted daemon's command line carry."""
    return f"firepool-peers-probe-{probe_id}"


def plant(probe_id: str) -> str:
    """The hostile job: leaves a file in /tmp and a daemon (its own session, so it outlives the
    job's process group) that sleeps, with the probe's marker in its command line."""
    name = marker(probe_id)
    return (
        "import subprocess, sys\n"
        f"open('/tmp/{name}', 'w').write('left by the previous caller')\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
        f"'{name}'], start_new_session=True, stdin=subprocess.DEVNULL, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)\n"
        "print('planted', flush=True)"
    )


def look(probe_id: str) -> str:
    """The next caller's job: is the file in its /tmp, is the daemon alive in its /proc?"""
    name = marker(probe_id)
    return (
        "import os\n"
        f"f = os.path.exists('/tmp/{name}')\n"
        "d = False\n"
        "for p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try:\n"
        "            c = open(f'/proc/{p}/cmdline', 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        f"        if b'{name}' in c and b'import os' not in c:\n"
        "            d = True\n"
        "print(f'PROBE file={int(f)} daemon={int(d)}', flush=True)"
    )


@dataclass(frozen=True)
class Timed:
    first: float
    last: float

    @property
    def run_s(self) -> float:
        return self.last - self.first


def timed(output: str) -> Timed:
    found = _TIMES.search(output)
    if found is None:
        raise ValueError(f"job output has no timing line: {output[-200:]!r}")
    return Timed(float(found.group(1)), float(found.group(2)))


def leaks(output: str) -> tuple[bool, bool]:
    """(file seen, daemon seen) from a `look` job's output."""
    found = _PROBE.search(output)
    if found is None:
        raise ValueError(f"probe output has no PROBE line: {output[-200:]!r}")
    return found.group(1) == "1", found.group(2) == "1"
