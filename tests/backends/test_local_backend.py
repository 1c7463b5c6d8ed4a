"""The local backend: create/ready/delete, state-file rebuild, device binding, isolation modes."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from pod_helpers import (
    Loop,
    backend_at,
    json_job,
    make_pod,
    new_root,
    pods_processes,
    py,
    read_log,
    run_job,
    wait_exit,
)

from firepool.agent import procfs
from firepool.backends.base import PodBackend, PodCreate
from firepool.backends.local import UID_KEY, LocalBackend
from firepool.model import ConfigError, PodRole, UnavailableError
from firepool.protocol import (
    IsolationMode,
    LaunchRequest,
    RequirementsRef,
)
from firepool.testing.control import cpu_pool, gpu_pool
from firepool.testing.host import needs
from firepool.testing.packages import PackageServer

pytestmark = pytest.mark.timeout(120)

CPU = cpu_pool(memory_mib_per_pod=512)
GPU = gpu_pool(accelerator="fake", standbys_per_active=1)


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
        expected = IsolationMode.PRIVATE if backend.capabilities.private_scratch else "weak"
        assert health.isolation == expected == record.isolation
        cgroups = _cgroup_dirs(root / record.name)
        client = backend.agent(record)
        loop.run(run_job(client, "a:0", ["sh", "-c", "sleep 100 & sleep 100 & echo started"]))
        uids = backend.uids_handed_out
        # the two `sleep` children: found by environment and uid, not only by command line
        assert len([p for p in pods_processes(root, uids) if procfs.real_uid(p) in uids]) == 2
        loop.run(backend.delete(record.name))
        assert not (root / record.name).exists()
        assert pods_processes(root, uids) == []
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
        assert not list((root / ".state").glob(f"{record.name}.*"))  # record and journal


@pytest.mark.parametrize("isolation", ["weak", "auto"])
def test_crashed_agent_is_reported_dead_and_deleted_cleanly(isolation: str) -> None:
    """In weak isolation the job outlives its agent until the delete sweeps it; in a pod whose
    zygote is the init of the job's PID namespace the kernel ends the job with the zygote."""
    with backend_at(f"crash-{isolation}", isolation=isolation) as (backend, loop, root):
        record, client = loop.run(make_pod(backend, CPU))
        in_namespace = loop.run(client.health()).limits.get("pid") == "namespace"
        assert not (in_namespace and isolation == "weak")
        job = loop.run(client.launch(LaunchRequest(attempt="c:0", argv=["sleep", "100"])))
        os.kill(record.pid, signal.SIGKILL)
        backend._procs[record.name].wait(5)
        pod = loop.run(backend.get(record.name))
        assert pod is not None and not pod.alive
        if in_namespace:
            deadline = time.monotonic() + 10
            while procfs.alive(job.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not procfs.alive(job.pid)  # its namespace ended with the zygote
        else:
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


def test_egress_without_its_nat_is_a_typed_error_that_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import firepool.backends.local as local

    if os.geteuid() != 0:
        needs("root (private pods)")
    real_which = shutil.which
    monkeypatch.setattr(
        local.shutil, "which", lambda name: None if name == "slirp4netns" else real_which(name)
    )
    with backend_at("no-nat", isolation="private") as (backend, loop, root):
        pool = cpu_pool("out", memory_mib_per_pod=512, network="egress")
        with pytest.raises(ConfigError) as caught:
            loop.run(backend.create(PodCreate(pool=pool)))
        assert caught.value.field == "network" and "slirp4netns" in caught.value.message
        assert loop.run(backend.list_pods()) == []
        assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []


def test_private_isolation_without_network_namespaces_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import firepool.backends.local as local

    if os.geteuid() != 0:
        needs("root (private pods)")
    monkeypatch.setattr(local, "probe_netns", lambda: False)
    with pytest.raises(ConfigError) as caught:
        LocalBackend(new_root("no-netns"), isolation="private")
    assert caught.value.field == "network_namespace"
    # switched off on purpose, the same host serves private pods on the host's network
    with backend_at("netns-off", isolation="private", network_namespace=False) as (b, loop, _):
        _, client = loop.run(make_pod(b, CPU))
        assert loop.run(client.health()).network.value == "host"


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
    # served over loopback: a private pod has its own /tmp and /var/tmp, and sees only its own
    # directory of the backend root, so no host path would do
    wheels = new_root("wheels")
    wheels.mkdir()
    wheel = _wheel(wheels)
    server = PackageServer(wheel.read_bytes())
    req = RequirementsRef.of(f"--no-index\nfpdemo @ {server.url}/{wheel.name}\n")
    with server, backend_at("deps") as (backend, loop, _root):
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
            needs("private namespaces")
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


def test_pod_dir_under_tmp_still_gets_private_tmp_var_tmp_and_shm() -> None:
    """A clone, a virtual environment or the pods themselves under /tmp: the pod still gets
    fresh /tmp, /var/tmp and /dev/shm, with what it needs bound back read-only."""
    root = Path(tempfile.mkdtemp(prefix="firepool-test-undertmp-", dir="/tmp"))
    loop = Loop()
    backend = LocalBackend(root / "pods")
    try:
        if not backend.capabilities.private_scratch:
            needs("private namespaces")
        marker = Path("/tmp") / f"host-file-{uuid.uuid4().hex[:8]}"
        marker.write_text("host")
        record, client = loop.run(make_pod(backend, CPU))
        assert loop.run(client.health()).isolation is IsolationMode.PRIVATE
        code = f"""
        import os, json
        with open("/tmp/x", "w") as fh:
            fh.write("x")
        try:
            open({str(root / "pods" / record.name / "mine")!r}, "w")
            ro = "wrote"
        except OSError as exc:
            ro = type(exc).__name__
        host = os.path.exists({str(marker)!r})
        print(json.dumps({{"tmp": sorted(os.listdir("/tmp")), "host": host, "ro": ro}}))
        """
        seen = loop.run(json_job(client, "t:0", code))
        assert seen["host"] is False and "x" in seen["tmp"] and seen["ro"] == "PermissionError"
        assert loop.run(client.reset()).clean
        seen = loop.run(json_job(client, "t:1", code))
        assert seen["tmp"].count("x") == 1  # the first job's file is gone, this one's is new
        marker.unlink()
    finally:
        loop.run(backend.close())
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


def test_hidden_paths_and_the_data_dir_are_invisible_to_jobs() -> None:
    # Outside /tmp and /var/tmp (a private pod gets fresh ones of those anyway), in a directory
    # every user may pass through, like a data dir under /srv or /var/lib.
    if not os.access("/var/lib", os.W_OK):
        needs("a writable /var/lib")
    data = Path("/var/lib") / new_root("datadir").name
    (data / "pods").mkdir(parents=True)
    (data / "firepool.db").write_text("every caller's jobs and token hashes")
    os.chmod(data / "firepool.db", 0o644)
    loop = Loop()
    backend = LocalBackend(data / "pods")  # the data dir is hidden by default
    try:
        if not backend.capabilities.private_scratch:
            needs("private namespaces")
        record, client = loop.run(make_pod(backend, CPU))
        code = f"""
        import os, json
        try:
            data = open({str(data / "firepool.db")!r}).read()
        except OSError as exc:
            data = type(exc).__name__
        print(json.dumps([sorted(os.listdir({str(data)!r})), data, os.getcwd()]))
        """
        listing, content, cwd = loop.run(json_job(client, "h:0", code))
        assert listing == ["pods"] and content == "FileNotFoundError"
        assert cwd == str(data / "pods" / record.name / "work")
    finally:
        loop.run(backend.close())
        loop.close()
        shutil.rmtree(data, ignore_errors=True)


def test_two_backends_on_one_host_never_share_a_job_uid() -> None:
    with backend_at("uid-a") as (a, loop, _ra), backend_at("uid-b") as (b, _loop, _rb):
        pa, _ = loop.run(make_pod(a, CPU))
        pb, _ = loop.run(make_pod(b, CPU))
        ua, ub = pa.annotations.get(UID_KEY), pb.annotations.get(UID_KEY)
        if os.geteuid() != 0:
            assert ua is ub is None
            return
        assert ua is not None and ub is not None and ua != ub
        claim = a.uid_claims / ua
        assert claim.exists()
        loop.run(a.delete(pa.name))
        assert not claim.exists()  # released with its pod


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ({"uid_base": 0}, "uid_base"),
        ({"uid_base": 2**32 - 10}, "uid_base"),
        ({"uid_count": 0}, "uid_base"),
        ({"pids_max": 3}, "pids_max"),
        ({"nofile": 10}, "nofile"),
        ({"isolation": "bogus"}, "isolation"),
    ],
)
def test_bad_limits_and_uid_ranges_are_refused_naming_the_field(
    option: dict[str, object], field: str
) -> None:
    root = new_root("badopt")
    try:
        with pytest.raises(ConfigError) as err:
            LocalBackend(root, **option)  # type: ignore[arg-type]
        assert err.value.field == field
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _freezer() -> Path | None:
    base = Path("/sys/fs/cgroup/freezer")
    return base if (base / "cgroup.procs").exists() else None


def test_delete_keeps_a_pod_whose_processes_survive_and_retries() -> None:
    """A process frozen by the cgroup v1 freezer does not die of SIGKILL until thawed: the
    delete must say so and keep the pod instead of reporting success."""
    freezer = _freezer()
    if freezer is None:
        needs("the cgroup v1 freezer")
    with backend_at("survive", verify_timeout_s=0.2) as (backend, loop, root):
        record, client = loop.run(make_pod(backend, CPU))
        job = loop.run(client.launch(LaunchRequest(attempt="f:0", argv=["sleep", "1000"])))
        frozen = freezer / f"firepool-test-{uuid.uuid4().hex[:8]}"
        frozen.mkdir()
        try:
            (frozen / "cgroup.procs").write_text(str(job.pid))
            (frozen / "freezer.state").write_text("FROZEN")
            with pytest.raises(UnavailableError) as err:
                loop.run(backend.delete(record.name))
            assert str(job.pid) in err.value.message
            kept = loop.run(backend.get(record.name))
            assert kept is not None and (root / record.name).exists()
            (frozen / "freezer.state").write_text("THAWED")
            loop.run(backend.delete(record.name))  # the retry succeeds
            assert loop.run(backend.get(record.name)) is None
            assert not procfs.alive(job.pid)
        finally:
            (frozen / "freezer.state").write_text("THAWED")
            for _ in range(100):
                try:
                    frozen.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def test_an_attempts_checkpoint_dir_is_attached_alone_and_shared_across_pods() -> None:
    """The checkpoint directory outlives pods: each attempt's pod (each with its own uid) sees
    its job's directory, writable, and none of the other jobs' directories beside it."""
    if not os.access("/var/lib", os.W_OK):
        needs("a writable /var/lib")
    data = Path("/var/lib") / new_root("attach").name
    (data / "pods").mkdir(parents=True)
    mine, other = data / "checkpoints" / "job-a", data / "checkpoints" / "job-b"
    loop = Loop()
    backend = LocalBackend(data / "pods")
    try:
        for path in (mine, other):
            path.mkdir(parents=True)
        (other / "secret").write_text("job-b's weights")
        code = f"""
        import os, json
        d = os.environ["FIREPOOL_CHECKPOINT_DIR"]
        with open(os.path.join(d, "log"), "a") as fh:
            fh.write(str(os.getuid()) + "\\n")
        try:
            theirs = os.listdir({str(other)!r})
        except OSError as exc:
            theirs = type(exc).__name__
        print(json.dumps(theirs))
        """
        env = {"FIREPOOL_CHECKPOINT_DIR": str(mine)}
        uids = []
        for n in range(2):  # two pods, two uids, one directory
            record, client = loop.run(make_pod(backend, CPU))
            uids.append(record.annotations.get(UID_KEY))
            event, out = loop.run(run_job(client, f"job-a:{n}", py(code), topology_env=env))
            assert event.exit_code == 0, loop.run(read_log(client, f"job-a:{n}", "stderr"))
            if backend.capabilities.private_scratch:
                assert json.loads(out) == "FileNotFoundError"
            assert loop.run(client.reset()).clean
        assert len((mine / "log").read_text().split()) == 2 and uids[0] != uids[1]
    finally:
        loop.run(backend.close())
        loop.close()
        shutil.rmtree(data, ignore_errors=True)
