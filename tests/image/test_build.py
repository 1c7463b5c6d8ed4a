"""The pool base image as built here: the config of pool-base.Dockerfile's final stage, the
interpreter with everything it loads, the agent's distributions and firepool, nothing of the
broker's, the same digest from two builds, and typed errors for a definition it cannot
reproduce."""

from __future__ import annotations

import importlib.util
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
from oci_reader import Image

import firepool
from firepool.backends.kubernetes.spec import POD_DIR, RUN_AS_USER
from firepool.image import (
    BuiltImage,
    DockerfileError,
    DockerfileNotFoundError,
    ImageOutputError,
    RootfsError,
    build_pool_image,
)
from firepool.image.build import checkout_dockerfile
from firepool.image.interpreter import VERSION

SITE = f"opt/firepool/lib/{VERSION}/site-packages"
#: The broker's own dependencies (pyproject.toml): none may reach a pod's image.
BROKER_ONLY = ("fastapi", "sqlalchemy", "numpy", "scipy", "uvicorn", "alembic", "typer",
               "rich", "httpx", "yaml", "psycopg", "pymysql", "starlette")  # fmt: skip


def test_the_image_runs_the_agent_as_the_pod_user(
    pool_build: BuiltImage, pool_image: Image
) -> None:
    assert pool_build.name == f"docker.io/firepool/base:{firepool.__version__}"
    (entry,) = pool_image.index["manifests"]
    assert entry["digest"] == pool_build.digest
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == firepool.__version__
    config = pool_image.config["config"]
    assert config["User"] == f"{RUN_AS_USER}:{RUN_AS_USER}"
    assert config["WorkingDir"] == POD_DIR
    assert config["Cmd"] == ["python", "-m", "firepool.agent", "--config-env",
                             "FIREPOOL_AGENT_CONFIG"]  # fmt: skip
    assert config["Env"][0].startswith("PATH=/opt/firepool/bin:")
    assert set(config["ExposedPorts"]) == {"7070/tcp", "29500/tcp"}
    assert pool_build.size == pool_build.path.stat().st_size < 64 << 20


def test_the_image_holds_the_interpreter_and_all_it_loads(
    pool_build: BuiltImage, pool_image: Image
) -> None:
    members = pool_image.members()
    python = members[f"opt/firepool/bin/{VERSION}"]
    assert python.isfile() and python.mode == 0o755
    assert members["opt/firepool/bin/python"].linkname == VERSION
    assert f"opt/firepool/lib/{VERSION}/os.py" in members
    assert any("/lib-dynload/_ssl." in name for name in members)
    for library in pool_build.libraries:  # every one ldd named, the loader included
        assert members[library.lstrip("/")].isfile(), library
    assert any("ld-linux" in lib for lib in pool_build.libraries)
    assert members["lib"].linkname == "usr/lib" and members["lib64"].linkname == "usr/lib64"
    # No bytecode copied from this host (timestamped, as pip and the interpreter write it):
    # only that compiled for the image, hash-based (below).
    pycs = sorted(n for n in members if n.endswith(".pyc"))
    assert pycs
    for name in pycs[:: max(1, len(pycs) // 40)]:  # a spread of 40: each read scans the layer
        assert int.from_bytes(pool_image.read(name)[4:8], "little") == 1, name
    assert f"opt/firepool/lib/{VERSION}/test" not in members
    assert not [n for n in members if "_tkinter" in n or "/idlelib/" in n]


def test_the_image_holds_the_agent_and_its_distributions_and_nothing_of_the_broker(
    pool_build: BuiltImage, pool_image: Image
) -> None:
    members = pool_image.members()
    assert f"{SITE}/firepool/agent/__main__.py" in members
    for name in ("pydantic", "pydantic_core", "httptools", "typing_extensions", "annotated_types",
                 "typing_inspection"):  # fmt: skip
        assert any(m.startswith(f"{SITE}/{name}") for m in members), name
        assert any(m.startswith(f"{SITE}/{name}-") and ".dist-info/" in m for m in members), name
    names = {d.split("==")[0].lower().replace("_", "-") for d in pool_build.distributions}
    assert names >= {"pydantic", "pydantic-core", "httptools", "typing-extensions",
                     "annotated-types", "typing-inspection"}  # fmt: skip
    for module in BROKER_ONLY:
        assert not [m for m in members if m.startswith(f"{SITE}/{module}")], module
    assert not [m for m in members if m.startswith(f"{SITE}/") and m.endswith(".pth")]


def test_every_module_has_its_bytecode_checked_by_hash_not_by_time(pool_image: Image) -> None:
    members = set(pool_image.members())
    sources = [m for m in members if m.startswith("opt/firepool/") and m.endswith(".py")]
    assert len(sources) > 500
    missing = [m for m in sources
               if importlib.util.cache_from_source("/" + m).lstrip("/") not in members]  # fmt: skip
    # Only sources that do not compile (the standard library's bad-syntax test data) lack one.
    assert len(missing) < len(sources) // 100, missing[:10]
    agent = importlib.util.cache_from_source(f"/{SITE}/firepool/agent/__main__.py").lstrip("/")
    flags = int.from_bytes(pool_image.read(agent)[4:8], "little")
    assert flags == 0b01  # hash-based, unchecked: no timestamp, the same bytes every build


def test_the_system_files_and_directories(pool_image: Image) -> None:
    members = pool_image.members()
    passwd = pool_image.read("etc/passwd").decode()
    assert f"firepool:x:{RUN_AS_USER}:{RUN_AS_USER}:" in passwd
    assert f"firepool:x:{RUN_AS_USER}:" in pool_image.read("etc/group").decode()
    assert "hosts: files dns" in pool_image.read("etc/nsswitch.conf").decode()
    assert "localhost" in pool_image.read("etc/hosts").decode()
    assert b"BEGIN CERTIFICATE" in pool_image.read("etc/ssl/certs/ca-certificates.crt")
    pod = members[POD_DIR.lstrip("/")]
    assert pod.isdir() and (pod.uid, pod.gid) == (RUN_AS_USER, RUN_AS_USER)
    assert members["home/firepool"].uid == RUN_AS_USER
    assert stat.S_IMODE(members["tmp"].mode) == 0o1777
    assert all(m.mtime == 0 and not m.uname and not m.gname for m in members.values())
    assert {m.uid for m in members.values()} == {0, RUN_AS_USER}


def test_two_builds_give_the_same_archive(pool_build: BuiltImage, tmp_path: Path) -> None:
    again = build_pool_image(tmp_path / "again.tar")
    assert again.digest == pool_build.digest
    assert again.path.read_bytes() == pool_build.path.read_bytes()


def definition(tmp_path: Path, text: str | None = None, requirements: bool = True) -> Path:
    """A copy of the shipped definition (or `text`) with its requirements beside it."""
    shipped = checkout_dockerfile()
    path = tmp_path / "pool-base.Dockerfile"
    path.write_text(shipped.read_text() if text is None else text)
    if requirements:
        shutil.copy(shipped.parent / "agent-requirements.txt", tmp_path)
    return path


def test_a_definition_it_cannot_reproduce_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "x.tar"
    with pytest.raises(DockerfileNotFoundError):
        build_pool_image(out, dockerfile=tmp_path / "missing.Dockerfile")
    shipped = checkout_dockerfile().read_text()
    extra_run = shipped.replace("\nUSER ", "\nRUN apt-get install -y curl\nUSER ")
    with pytest.raises(DockerfileError, match="does not reproduce 'RUN apt-get install -y curl'"):
        build_pool_image(out, dockerfile=definition(tmp_path, extra_run))
    with pytest.raises(DockerfileError, match="unknown instruction FROBNICATE"):
        build_pool_image(out, dockerfile=definition(tmp_path, shipped + "FROBNICATE x\n"))
    other_user = shipped.replace("USER 10001:10001", "USER 20002")
    with pytest.raises(DockerfileError, match="not the pod's uid"):
        build_pool_image(out, dockerfile=definition(tmp_path, other_user))
    no_python = shipped.replace('CMD ["python"', 'CMD ["pythonx"')
    with pytest.raises(RootfsError, match="pythonx"):
        build_pool_image(out, dockerfile=definition(tmp_path, no_python))
    assert not out.exists()


def test_missing_requirements_are_typed_errors(tmp_path: Path) -> None:
    out = tmp_path / "x.tar"
    with pytest.raises(RootfsError, match=r"agent-requirements\.txt"):
        build_pool_image(out, dockerfile=definition(tmp_path, requirements=False))
    (tmp_path / "agent-requirements.txt").write_text("pydantic>=2\nno-such-distribution-here\n")
    with pytest.raises(RootfsError, match="no-such-distribution-here is not installed"):
        build_pool_image(out, dockerfile=definition(tmp_path, requirements=False))
    (tmp_path / "agent-requirements.txt").write_text("pydantic[email]>=2\n")
    with pytest.raises(RootfsError, match="extras"):
        build_pool_image(out, dockerfile=definition(tmp_path, requirements=False))


def test_an_unwritable_output_is_a_typed_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ImageOutputError):
        build_pool_image(blocker / "pool.tar")
    with pytest.raises(ImageOutputError, match="is a directory"):
        build_pool_image(tmp_path)


def test_the_layer_is_a_plain_gzip_tar(pool_build: BuiltImage, tmp_path: Path) -> None:
    """What `tar -xzf` on any machine reads (containerd's unpacker is no more lenient)."""
    with tarfile.open(pool_build.path) as outer:
        outer.extractall(tmp_path, filter="data")
    layers = [p for p in (tmp_path / "blobs" / "sha256").iterdir() if p.stat().st_size > 1 << 20]
    (layer,) = layers
    with tarfile.open(layer, "r:gz") as tar:
        assert tar.getmember(f"opt/firepool/bin/{VERSION}").isfile()
