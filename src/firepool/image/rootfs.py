"""The pool image's file system: what pool-base.Dockerfile's final stage holds, from this host.

The Dockerfile builds a venv at /opt/firepool (pip, the agent's requirements, firepool) on a
python:slim base and adds the user 10001 with the pod's directory. Here the same prefix holds
a copy of the running interpreter, its standard library and its shared libraries (found with
ldd), the agent's distributions from this environment, and firepool's own package; `system`
adds the user and directories. The final stage's file system instructions this stands in for
are listed in `REPRODUCES`, and the build refuses a Dockerfile whose final stage has others."""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import firepool
from firepool.image.bytecode import add_bytecode
from firepool.image.entries import Tree
from firepool.image.errors import RootfsError
from firepool.image.interpreter import VERSION, add_interpreter
from firepool.image.libraries import Library, in_image, shared_libraries
from firepool.image.packages import add_distribution, closure, requirement_names
from firepool.image.system import add_system

PREFIX = "opt/firepool"
SITE = f"{PREFIX}/lib/{VERSION}/site-packages"
#: The pod's uid (the pod spec's runAsUser, backends/kubernetes/spec.py), its name and home.
UID = 10001
USER = "firepool"
HOME = "/home/firepool"
POD_DIR = "/var/lib/firepool/pod"
#: Installed beside the agent's requirements when this environment has it: the agent installs
#: a job's extra requirements with `python -m pip` (agent/deps.py), as the venv image can.
INSTALLERS = ("pip",)
#: The final stage's file system instructions (whitespace collapsed) and how this module
#: reproduces each: the /opt/firepool prefix, and the user with the pod's directory.
REPRODUCES = {
    "COPY --from=build /opt/firepool /opt/firepool": "add_interpreter, agent distributions",
    (
        f"RUN useradd --uid {UID} --create-home --home-dir {HOME} --shell /usr/sbin/nologin "
        f"{USER} && mkdir -p {POD_DIR} && chown {UID}:{UID} {POD_DIR}"
    ): "add_system",
}
#: Libraries of the Dockerfile's python:slim base beyond what the interpreter loads, which
#: the wheels pools install on top link rather than bundle (torch needs libstdc++ and
#: libutil): glibc's whole set, as the base's libc6 package brings it, and the C++ runtime.
BASE_LIBRARIES = (
    "libstdc++.so.6", "libgcc_s.so.1", "libm.so.6", "libdl.so.2", "libpthread.so.0",
    "librt.so.1", "libutil.so.1", "libresolv.so.2", "libanl.so.1", "libnss_files.so.2",
    "libnss_dns.so.2",
)  # fmt: skip
#: Left out of firepool's package: bytecode.
_BYTECODE = frozenset({"__pycache__"})


@dataclass(frozen=True)
class Contents:
    tree: Tree
    distributions: tuple[str, ...]
    libraries: tuple[str, ...]


def pool_rootfs(requirements: Path) -> Contents:
    """The pool image's tree, its agent's dependencies named in `requirements`."""
    tree = Tree()
    add_system(tree, uid=UID, user=USER, home=HOME, writable=(POD_DIR,))
    objects = add_interpreter(tree, PREFIX)
    wanted = requirement_names(requirements)
    wanted += [name for name in INSTALLERS if _installed(name)]
    dists = closure(wanted)
    for dist in dists:
        objects += add_distribution(tree, dist, SITE)
    add_firepool(tree)
    base = [
        Library(path.resolve(), in_image(str(path))) for path in map(host_library, BASE_LIBRARIES)
    ]
    libraries = shared_libraries([*objects, *(lib.host for lib in base)])
    placed = {lib.image for lib in libraries}
    libraries += [lib for lib in base if lib.image not in placed]
    for library in libraries:
        tree.file(library.image, source=library.host, mode=0o755)
    add_bytecode(tree, PREFIX)
    return Contents(
        tree,
        tuple(f"{d.metadata['Name']}=={d.version}" for d in dists),
        tuple(f"/{lib.image}" for lib in libraries),
    )


def host_library(name: str) -> Path:
    """This host's `name` in the loader's default directories."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for directory in (f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib64", "/usr/lib"):
        if (Path(directory) / name).exists():
            return Path(directory) / name
    raise RootfsError(f"{name} is not on this host: the image's base libraries need it")


def add_firepool(tree: Tree) -> None:
    """firepool's package as this process imports it (a checkout's src/ or an install), with
    a dist-info of its own: an editable install's names the checkout, not the image."""
    package = Path(firepool.__file__).resolve().parent
    if not (package / "agent" / "__main__.py").is_file():
        raise RootfsError(f"{package} holds no firepool.agent")
    tree.copy_tree(
        package,
        f"{SITE}/firepool",
        skip=lambda p: p.name in _BYTECODE or p.suffix == ".pyc",
    )
    info = f"{SITE}/firepool-{firepool.__version__}.dist-info"
    tree.file(
        f"{info}/METADATA",
        data=f"Metadata-Version: 2.1\nName: firepool\nVersion: {firepool.__version__}\n".encode(),
    )
    tree.file(f"{info}/INSTALLER", data=b"firepool image build\n")
    tree.file(f"{info}/top_level.txt", data=b"firepool\n")


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True
