"""Standbys on real local pods with fake GPUs: promotion when the active pod's job ends, the
per-GPU gate, and restaging. A card whose founding pod is gone keeps its standby: the physical
GPU group keeps the name of the pod that founded it; once that pod is deleted, the next standby
must be pinned to the card through a live member of the group.

The gate is checked on real processes: the active pod's job leaves a detached grandchild
holding a resource (a loopback port stands in for the card's memory, which fake GPUs lack),
and the standby's job, claimed while the first still runs, fails unless it can take that
resource: it may start only once the active pod's reset has killed everything of the job."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from firepool.model import PodRole, PodState
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import gpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch

GPU = gpu_pool(
    network="host",  # its jobs wait on a loopback switch and hold a host port on the card
    accelerator="fake",
    min_count=1,
    max_idle_count=1,
    max_count=1,
    standbys_per_active=1,
    caller_hold_seconds=0.0,  # the active pod retires after its job: the card's founder goes
    idle_timeout=60.0,
    memory_mib_per_pod=512,
    step=1,
)


def pods(broker: BrokerThread) -> list[tuple[str, PodRole, PodState, str | None]]:
    tracker = broker.embedded.broker.tracker
    return broker.call(
        lambda: [(p.name, p.role, p.state, p.group) for p in tracker.pool_pods("gpu")]
    )


def wait_until(what: str, check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_the_scaler_restages_a_standby_after_the_founding_pod_is_deleted(tmp_path: Path) -> None:
    # Periodic passes stage the first standby; each restage after a handover is the pass the
    # release asks for (a broken restage fails on every pass alike).
    config = BrokerConfig(dispatch_tick_s=60.0, reconcile_s=2.0, hold_tick_s=60.0,
                          exit_poll_s=0.5)
    with running_broker(tmp_path / "b", catalog=Catalog((GPU,), {"fake": 1}), config=config,
                        fake_devices=["GPU-0000"]) as broker:

        def staged() -> bool:
            return sorted((role, state) for _n, role, state, _g in pods(broker)) == [
                (PodRole.ACTIVE, PodState.IDLE), (PodRole.STANDBY, PodState.IDLE)]

        wait_until("active and standby ready", staged)
        ((founder, group),) = [(n, g) for n, r, _s, g in pods(broker) if r is PodRole.ACTIVE]
        assert group == founder
        gone: set[str] = set()
        for turn in range(2):  # the second handover happens long after the founder is gone
            gone.add(handover(broker))

            def restaged() -> bool:
                current = pods(broker)
                standbys = [n for n, r, s, g in current
                            if r is PodRole.STANDBY and s is PodState.IDLE and g == group]
                return not gone & {n for n, *_ in current} and len(standbys) == 1

            # The retired pod is deleted and the promoted pod's card gets a new standby.
            wait_until(f"a new standby on the same card (turn {turn})", restaged, timeout=30.0)
        assert founder in gone
        records = broker.embedded.broker.pods.records
        devices = broker.call(lambda: {r.devices for r in records.values()})
        assert devices == {("GPU-0000",)}  # every pod on the one card


def holds_port(switch: Switch, port: int) -> list[str]:
    """Leaves a detached grandchild holding `port` (what a job could leave on a card) for as
    long as anything of it lives, then waits for the switch and exits."""
    return [sys.executable, "-c",
            "import os, socket\n"
            "r, w = os.pipe()\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
            "        os.write(w, b'x'); __import__('time').sleep(600)\n"
            "    os._exit(0)\n"
            "os.read(r, 1)\n" + switch.wait_code()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def takes(port: int) -> list[str]:
    """The standby's job: fails if anything of the previous job still holds `port`."""
    return [sys.executable, "-c",
            f"import socket; s = socket.socket(); s.bind(('127.0.0.1', {port})); print('clean')"]


def handover(broker: BrokerThread) -> str:
    """A job holds the card; another caller's job claims a standby behind the card's gate; the
    first ends, its pod retires, and the standby is promoted and runs. Returns the first job's
    pod, which must be gone afterwards."""
    holder = broker.client("alice")
    gate = Switch()
    port = free_port()
    first = submit(holder, pool="gpu", command=holds_port(gate, port))
    wait_until("first job running", lambda: any(
        s is PodState.RUNNING for _n, _r, s, _g in pods(broker)))
    bob = broker.client("bob")
    second = submit(bob, pool="gpu", command=takes(port))
    wait_until("second job claimed the standby", lambda: any(
        r is PodRole.STANDBY and s is PodState.ASSIGNED for _n, r, s, _g in pods(broker)))
    gate.open()
    finished = wait_job(holder, first)
    gate.close()
    assert finished["state"] == "SUCCEEDED"
    done = wait_job(bob, second)
    # The gate held the standby's job until the card was clean: the port was free again.
    assert done["state"] == "SUCCEEDED", done
    assert "clean" in bob.get(f"/v1/jobs/{second}/logs").json()["data"]
    assert [p["acquisition"] for p in done["pods"]] == ["standby"]
    name: str = finished["pods"][0]["name"]
    return name


def test_after_a_restart_standbys_wait_for_the_exclusivity_sweep(tmp_path: Path) -> None:
    """The pods outlive the broker; the restarted broker restores the card's group closed to
    promotions, and its sweep opens it once every pod on the card is the group's own."""
    config = BrokerConfig(dispatch_tick_s=60.0, reconcile_s=2.0, hold_tick_s=60.0,
                          exit_poll_s=0.5)
    options = {"catalog": Catalog((GPU,), {"fake": 1}), "config": config,
               "fake_devices": ["GPU-0000"], "delete_pods_on_exit": False}
    with running_broker(tmp_path / "b", **options) as first:  # type: ignore[arg-type]

        def annotated_idle() -> bool:  # what a restarted broker trusts
            records = first.run(first.embedded.backend.list_pods())
            return len(records) == 2 and all(
                r.annotations.get("state") == "idle" for r in records
            )

        wait_until("active and standby ready", annotated_idle)
        names = {name for name, *_ in pods(first)}
    with running_broker(tmp_path / "b", **options) as again:  # type: ignore[arg-type]
        core = again.embedded.broker.core
        assert {name for name, *_ in pods(again)} == names  # both restored
        wait_until("the sweep verified the card",
                   lambda: not again.call(lambda: set(core.tracker.unverified)))
        options["delete_pods_on_exit"] = True
    with running_broker(tmp_path / "b", **options):  # type: ignore[arg-type]
        pass  # deletes the pods
