"""Template rollout on real local pods: an admin's `PUT /v1/pools/{name}` while jobs run.
Idle old pods drain first, the busy one after its job; never more than the ceiling, never
more than `drain_budget` (1) old pods draining; 0 failed jobs; every pod on the new template
at the end, as `GET /v1/pools` reports. A caller token changes nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from pathlib import Path

from firepool.control.records import RetireReason
from firepool.model import PodState, TokenRole
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.store.engine import DB_FILE
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch
from firepool.testing.waiting import wait_until

# network host: its jobs wait on a loopback switch (firepool.testing.switch)
POOL = cpu_pool(network="host", min_count=2,
                max_idle_count=2, max_count=3, idle_timeout=600.0,
                caller_hold_seconds=600.0, memory_mib_per_pod=512, step=3)
CONFIG = BrokerConfig(reconcile_s=2.0, exit_poll_s=0.5)


class Watch:
    """Samples the pool on the broker's loop: the most pods and old pods draining at once."""

    def __init__(self, broker: BrokerThread) -> None:
        self.broker = broker
        self.most_pods = self.most_draining = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tracker = self.broker.embedded.broker.tracker
        while not self._stop.is_set():
            pods = self.broker.call(lambda: [(p.state, p.retire_after)
                                             for p in tracker.pool_pods("cpu")])
            self.most_pods = max(self.most_pods, len(pods))
            draining = sum(1 for state, why in pods if state is PodState.RETIRING
                           and why is RetireReason.STALE_TEMPLATE)
            self.most_draining = max(self.most_draining, draining)
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_a_rollout_with_jobs_running_fails_none_and_ends_on_the_new_template(
    tmp_path: Path,
) -> None:
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 3}),
                        config=CONFIG) as broker:
        tracker = broker.embedded.broker.tracker

        def states() -> dict[str, tuple[PodState, int]]:
            return broker.call(lambda: {p.name: (p.state, p.template)
                                        for p in tracker.pool_pods("cpu")})

        wait_until("the floor is ready", lambda: [s for s, _ in states().values()] == [
            PodState.IDLE, PodState.IDLE], timeout=120.0)
        admin = broker.client("root", role=TokenRole.ADMIN)
        alice, bob = broker.client("alice"), broker.client("bob")
        gate = Switch()
        long_job = submit(alice, command=gate.job())
        wait_until("alice's job runs", lambda: alice.get(f"/v1/jobs/{long_job}").json()[
            "state"] == "RUNNING")
        (busy,) = [p["name"] for p in alice.get(f"/v1/jobs/{long_job}").json()["pods"]]
        (idle,) = [n for n in states() if n != busy]
        watch = Watch(broker)
        edited = POOL.model_copy(update={"template_version": 2}).model_dump(mode="json")
        answer = admin.put("/v1/pools/cpu", json=edited)
        assert answer.status_code == 200, answer.text
        rollout = answer.json()["rollout"]
        assert (rollout["template_version"], rollout["stale_busy"], rollout["done"]) == (
            2, 1, False)
        # Jobs keep coming during the rollout; they land on new pods only.
        quick = [submit(bob, command=[sys.executable, "-c", "pass"]) for _ in range(4)]
        wait_until("the idle old pod drained first", lambda: idle not in states(),
                   timeout=120.0)
        assert states()[busy][0] is PodState.RUNNING  # the busy one finishes its job first
        for job in quick:
            done = wait_job(bob, job, timeout=120.0)
            assert done["state"] == "SUCCEEDED"
            assert busy not in {p["name"] for p in done["pods"]}
        gate.open()
        assert wait_job(alice, long_job, timeout=60.0)["state"] == "SUCCEEDED"

        def rolled() -> bool:
            (progress,) = alice.get("/v1/pools").json()["rollouts"]
            return bool(progress["done"])

        wait_until("every pod on the new template", rolled, timeout=120.0)
        watch.stop()
        assert busy not in states()
        assert all(template == 2 for _state, template in states().values())
        assert watch.most_pods <= POOL.max_count
        assert watch.most_draining <= 1
        gate.close()


def test_only_admins_change_pools_and_bad_edits_change_nothing(tmp_path: Path) -> None:
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 3}),
                        config=CONFIG) as broker:
        admin = broker.client("root", role=TokenRole.ADMIN)
        alice = broker.client("alice")
        newer = POOL.model_copy(update={"template_version": 5}).model_dump(mode="json")

        def current() -> dict[str, object]:
            (pool,) = alice.get("/v1/pools").json()["pools"]
            assert isinstance(pool, dict)
            return pool

        before = current()
        refused = alice.put("/v1/pools/cpu", json=newer)
        assert refused.status_code == 403 and refused.json()["error"] == "Forbidden"
        assert current() == before
        for path, body, error, field in [
            ("/v1/pools/other", {**newer, "name": "other"}, "UnknownPool", "name"),
            ("/v1/pools/gpu", newer, "ValidationError", "name"),
            ("/v1/pools/cpu", {**newer, "template_version": 0}, "ConfigError",
             "template_version"),
            ("/v1/pools/cpu", {**newer, "accelerator": "H200", "accelerators_per_pod": 1},
             "ConfigError", "accelerator"),
            ("/v1/pools/cpu", {**newer, "min_count": 9}, "ConfigError", "min_count"),
            ("/v1/pools/cpu", {**newer, "min_cuont": 1}, "ConfigError", "min_cuont"),
        ]:
            answer = admin.put(path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            assert (answer.json()["error"], answer.json()["field"]) == (error, field), answer.text
            assert current() == before
        accepted = admin.put("/v1/pools/cpu", json={**newer, "min_count": 1})
        assert accepted.status_code == 200, accepted.text
        assert (current()["template_version"], current()["min_count"]) == (5, 1)


def test_an_applied_edit_survives_a_broker_restart_and_restarts_no_pod(tmp_path: Path) -> None:
    """The edit is in the store: a broker restarted on the same data directory (from the old
    catalog) runs the edited template, and the pods already built from it stay."""
    data, catalog = tmp_path / "b", Catalog((POOL,), {"cpu": 3})
    edited = POOL.model_copy(update={"template_version": 2, "idle_timeout": 900.0})
    with running_broker(data, catalog=catalog, config=CONFIG,
                        delete_pods_on_exit=False) as first:
        admin = first.client("root", role=TokenRole.ADMIN)
        token = admin.headers["Authorization"]
        before = admin.get("/v1/pools").json()["rollouts"][0]
        assert before["edited"] is False
        answer = admin.put("/v1/pools/cpu", json=edited.model_dump(mode="json"))
        assert answer.status_code == 200, answer.text
        assert answer.json()["rollout"]["edited"] is True

        tracker = first.embedded.broker.tracker

        seen: list[set[str]] = []

        def idle_on_2() -> bool:
            pods = first.call(lambda: [(p.name, p.state, p.template)
                                       for p in tracker.pool_pods("cpu")])
            seen.append({name for name, _, _ in pods})
            return len(pods) == POOL.min_count and all(
                (s, t) == (PodState.IDLE, 2) for _, s, t in pods)

        wait_until("every pod idle on template 2", idle_on_2, timeout=120)
        pods = seen[-1]
    with running_broker(data, catalog=catalog, config=CONFIG) as second:
        with second.client() as c:
            c.headers["Authorization"] = token
            (pool,) = c.get("/v1/pools").json()["pools"]
            (rollout,) = c.get("/v1/pools").json()["rollouts"]
        assert (pool["template_version"], pool["idle_timeout"]) == (2, 900.0)
        assert rollout["edited"] is True and rollout["done"] is True
        tracker = second.embedded.broker.tracker
        kept = second.call(lambda: {(p.name, p.template) for p in tracker.pool_pods("cpu")})
        assert kept == {(name, 2) for name in pods}


def test_an_edit_the_store_refuses_is_not_applied(tmp_path: Path) -> None:
    """The edit is stored before it takes effect: with the database locked by another writer
    the PUT is a typed 503, and the pool, its rollout and the store stay as they were."""
    data = tmp_path / "b"
    with running_broker(data, catalog=Catalog((POOL,), {"cpu": 3}), config=CONFIG,
                        store_options={"sqlite_busy_s": 0.5}) as broker:
        edited = POOL.model_copy(update={"template_version": 2}).model_dump(mode="json")
        with broker.client("root", role=TokenRole.ADMIN) as admin:
            before = admin.get("/v1/pools").json()
            other = sqlite3.connect(data / DB_FILE, isolation_level=None)
            other.execute("BEGIN EXCLUSIVE")
            try:
                refused = admin.put("/v1/pools/cpu", json=edited)
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "StoreUnavailable"
            after = admin.get("/v1/pools").json()
            assert after["pools"] == before["pools"]
            assert after["rollouts"][0]["edited"] is False
        store = broker.embedded.broker.store
        assert broker.run(asyncio.to_thread(store.pool_edits)) == []
