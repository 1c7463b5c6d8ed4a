"""The local backend: create/ready/delete, state-file rebuild, device binding, isolation modes."""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import zipfile
from pathlib import Path

import pytest
from pod_helpers import (
    backend_at,
    json_job,
    make_pod,
    new_root,
    pods_processes,
    read_log,
    run_job,
    wait_exit,
)

import firepool
from firepool.agent import procfs
from firepool.backends.base import PodBackend, PodCreate
from firepool.backends.local import LocalBackend
from firepool.model import PodRole, PoolSpec, UnavailableError
from firepool.protocol import (
    IsolationMode,
    LaunchRequest,
    RequirementsRef,
)
from firepool.testing.packages import PackageServer

pytestmark = pytest.mark.timeout(120)

CPU = PoolSpec(name="cpu", memory_mib_per_pod=512)
GPU = PoolSpec(name="gpu", accelerator="fake", accelerators_per_pod=1, standbys_per_active=1)


def _cgroup_dirs(pod_dir: Path) -> list[str]:
    try:
        return (pod_dir / "agent.cgroups").read_text().split()
    except OSError:
        return []


def test_create_ready_delete_leaves_nothing() -> None:
    with backend_at("life") as (backend, loop, root):
        assert isinstance(backend, PodBackend)
        record = loop.run(backend.create(PodCreate(pool=CPU, annotations={"owner": "alice"})))
        assert record.agent_url.startswith("http://127.0.0.1:")
        health = loop.run(backend.wait_ready(record.name))
        assert health.ok and health.pod == record.name
        expected = IsolationMode.WEAK
        if backend.capabilities.private_scratch:
            # A private /tmp needs everything the pod runs from to live elsewhere: the pods
            # live under /var/tmp, the interpreter and firepool's code may not.
            tmp = Path("/tmp").resolve()
            runs_from = (root, Path(sys.prefix), Path(sys.executable), Path(firepool.__file__))
            hidden = any(path.resolve().is_relative_to(tmp) for path in runs_from)
            expected = IsolationMode.PRIVATE_SHM if hidden else IsolationMode.PRIVATE
        assert health.isolation is expected
        cgroups = _cgroup_dirs(root / record.name)
        client = backend.agent(record)
        loop.run(run_job(client, "a:0", ["sh", "-c", "sleep 100 & sleep 100 & echo started"]))
        assert len(pods_processes(root)) >= 1
        loop.run(backend.delete(record.name))
        assert not (root / record.name).exists()
        assert pods_processes(root) == []
        assert not procfs.alive(record.pid)
        assert all(not os.path.exists(d) for d in cgroups)
        assert loop.run(backend.list_pods()) == []
        loop.run(backend.delete(record.name))  # idempotent


def test_restarted_backend_rebuilds_pods_and_holds_from_state_files() -> None:
    with backend_at("restart") as (backend, loop, root):
        record, _ = loop.run(make_pod(backend, CPU, annotations={"owner": "alice"}))
        loop.run(backend.annotate(record.name, {"hold_until": "123.5", "owner": "alice"}))
        again = LocalBackend(root)  # a new broker process over the same root
        pods = loop.run(again.list_pods())
        assert [(p.name, p.alive) for p in pods] == [(record.name, True)]
        assert pods[0].annotations["hold_until"] == "123.5"
        assert pods[0].secret == record.secret
        _event, out = loop.run(run_job(again.agent(pods[0]), "r:0", ["echo", "hi"]))
        assert out.strip() == "hi"
        loop.run(again.annotate(record.name, {"hold_until": None}))
        assert "hold_until" not in LocalBackend(root)._records[record.name].annotations
        loop.run(again.delete(record.name))
        assert not procfs.alive(record.pid)
        assert loop.run(again.list_pods()) == []


def test_crashed_agent_is_reported_dead_and_deleted_cleanly() -> None:
    with backend_at("crash") as (backend, loop, root):
        record, client = loop.run(make_pod(backend, CPU))
        job = loop.run(client.launch(LaunchRequest(attempt="c:0", argv=["sleep", "100"])))
        os.kill(record.pid, signal.SIGKILL)
        backend._procs[record.name].wait(5)
        pod = loop.run(backend.get(record.name))
        assert pod is not None and not pod.alive
        assert procfs.alive(job.pid)  # orphaned by the dead agent
        loop.run(backend.delete(record.name))  # swept by the cgroup ledger / pod marker
        assert not procfs.alive(job.pid)
        assert pods_processes(root) == []


def test_gpu_pods_bind_one_device_by_uuid_and_standbys_share_it() -> None:
    with backend_at("gpu", fake_devices=["GPU-aaaa", "GPU-bbbb"]) as (backend, loop, _root):
        assert backend.capabilities.device_discovery == "fake"
        first, c1 = loop.run(make_pod(backend, GPU))
        second, _ = loop.run(make_pod(backend, GPU))
        assert {first.devices, second.devices} == {("GPU-aaaa",), ("GPU-bbbb",)}
        with pytest.raises(UnavailableError):
            loop.run(backend.create(PodCreate(pool=GPU)))
        _standby, c3 = loop.run(make_pod(backend, GPU, role=PodRole.STANDBY, devices=first.devices))
        code = """
        import os, json
        print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("CUDA")}))
        """
        seen = loop.run(json_job(c1, "g:0", code))
        assert seen["CUDA_VISIBLE_DEVICES"] == first.devices[0]
        assert seen["CUDA_DEVICE_MEMORY_LIMIT_0"] == "16384m"
        assert seen["CUDA_DEVICE_MEMORY_SHARED_CACHE"].endswith("g_0.cache")
        seen = loop.run(json_job(c3, "s:0", code))
        assert seen["CUDA_VISIBLE_DEVICES"] == first.devices[0]


def test_weak_isolation_is_explicit_and_uses_pod_tmpdir() -> None:
    with backend_at("weak", isolation="weak") as (backend, loop, root):
        assert not backend.capabilities.private_scratch
        record, client = loop.run(make_pod(backend, CPU))
        health = loop.run(client.health())
        assert health.isolation is IsolationMode.WEAK
        code = "import tempfile, json; print(json.dumps(tempfile.gettempdir()))"
        assert loop.run(json_job(client, "w:0", code)) == str(root / record.name / "tmp")
        assert "weaker isolation" in (root / record.name / "agent.log").read_text()


def _wheel(dir: Path) -> Path:
    path = dir / "fpdemo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fpdemo.py", "VERSION = '1.0'\n")
        zf.writestr("fpdemo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fpdemo\n"
                    "Version: 1.0\n")  # fmt: skip
        zf.writestr("fpdemo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\n"
                    "Root-Is-Purelib: true\nTag: py3-none-any\n")  # fmt: skip
        zf.writestr("fpdemo-1.0.dist-info/RECORD", "")
    return path


def test_requirements_install_once_per_digest_and_are_importable() -> None:
    code = "import fpdemo; print(fpdemo.VERSION)"
    # the wheel lives outside /tmp (a private pod has its own /tmp) and outside the backend
    # root (a private pod sees only its own directory there)
    wheels = new_root("wheels")
    wheels.mkdir()
    req = RequirementsRef.of(f"--no-index\n{_wheel(wheels)}\n")
    with backend_at("deps") as (backend, loop, _root):
        _record, client = loop.run(make_pod(backend, CPU))
        for retry, (argv, cached) in enumerate(
            [(["python", "-c", code], False), (["sh", "-c", f"python -c '{code}'"], True)]
        ):
            attempt = f"d:{retry}"
            resp = loop.run(
                client.launch(LaunchRequest(attempt=attempt, argv=argv, requirements=req))
            )
            assert resp.requirements_cached is cached
            loop.run(wait_exit(client, attempt))
            assert loop.run(read_log(client, attempt)).strip() == "1.0"  # fork and exec paths
            assert loop.run(client.reset()).clean
    shutil.rmtree(wheels)


def test_package_is_fetched_unpacked_and_cached_per_pod() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("main.py", "import helper; print(helper.VALUE)")
        zf.writestr("helper.py", "VALUE = 'from-package'")
    data = buf.getvalue()
    serve = PackageServer(data)
    ref = serve.ref
    try:
        with backend_at("pkg") as (backend, loop, _root):
            _record, client = loop.run(make_pod(backend, CPU))
            for retry, cached in ((0, False), (1, True)):
                attempt = f"p:{retry}"
                resp = loop.run(
                    client.launch(
                        LaunchRequest(attempt=attempt, argv=["python", "main.py"], package=ref)
                    )
                )
                assert resp.package_cached is cached and resp.mode.value == "fork"
                loop.run(wait_exit(client, attempt))
                assert loop.run(read_log(client, attempt)).strip() == "from-package"
                assert loop.run(client.reset()).clean
    finally:
        serve.close()


def test_volumes_marked_for_wiping_are_emptied_and_caches_kept() -> None:
    with backend_at("vol", volumes={"scratch": True, "models": False}) as (backend, loop, _root):
        _record, client = loop.run(make_pod(backend, CPU))
        code = """
        import os, json
        for var in ("FIREPOOL_VOLUME_SCRATCH", "FIREPOOL_VOLUME_MODELS"):
            with open(os.path.join(os.environ[var], "f"), "w") as fh:
                fh.write("x")
        env = os.environ
        print(json.dumps([env["FIREPOOL_VOLUME_SCRATCH"], env["FIREPOOL_VOLUME_MODELS"]]))
        """
        scratch, models = loop.run(json_job(client, "v:0", code))
        assert loop.run(client.reset()).clean
        assert os.listdir(scratch) == [] and os.listdir(models) == ["f"]


def test_jobs_see_neither_other_pods_nor_pod_secrets() -> None:
    with backend_at("confine") as (backend, loop, root):
        if not backend.capabilities.private_scratch:
            # A host without private mount namespaces cannot confine pods; CI machines have
            # them, so there the missing capability is a failure, not a skip.
            if os.environ.get("CI") == "true":
                pytest.fail("CI=true and this host gives pods no private mount namespace")
            pytest.skip("needs a private mount namespace")
        a, client_a = loop.run(make_pod(backend, CPU))
        b, client_b = loop.run(make_pod(backend, CPU))
        assert loop.run(client_a.health()).confined
        loop.run(run_job(client_b, "b:0", ["echo", "b-private-output"]))
        code = f"""
        import os, json
        seen = []
        for dirpath, dirnames, filenames in os.walk({str(root)!r}):
            for name in filenames:
                try:
                    with open(os.path.join(dirpath, name), "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                if {a.secret.encode()!r} in data or {b.secret.encode()!r} in data \\
                        or b"b-private-output" in data:
                    seen.append(os.path.join(dirpath, name))
        print(json.dumps({{"top": sorted(os.listdir({str(root)!r})), "leaks": seen}}))
        """
        seen = loop.run(json_job(client_a, "a:0", code))
        assert seen == {"top": [a.name], "leaks": []}
