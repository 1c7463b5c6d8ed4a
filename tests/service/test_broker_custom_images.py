"""Custom images on real local pods (issue 18, item 1): an image a pool admits reaches the
backend (on the local backend an image is an environment directory, so the job's `python` is
that environment's), a tag gets a single-use pod, a digest-pinned image is reused only inside
its fence (caller, pool, queue, lease tag, digest), the image survives a broker restart, and
each job's acquisition path says `custom_image`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_end_to_end import gone, pod_of, py, settled

from firepool.model import TokenRole
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.images import DIGEST, agent_environment
from firepool.testing.service import BrokerThread, run, running_broker

FAST = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)
TAGGED = "local/ml:v1"
PINNED = f"local/ml@{DIGEST}"
PREFIX = "print(__import__('sys').prefix)"


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_environment(tmp_path_factory.mktemp("images") / "ml")


def images_catalog(environment: Path) -> Catalog:
    pool = cpu_pool(
        max_count=4, idle_timeout=60.0, memory_mib_per_pod=512, step=2,
        allowed_images=("local/ml",),
    )  # fmt: skip
    return Catalog((pool,), {"cpu": 8}, local_images={"local/ml": str(environment)})


@pytest.fixture
def broker(tmp_path: Path, environment: Path) -> Iterator[BrokerThread]:
    with running_broker(tmp_path / "b", catalog=images_catalog(environment), config=FAST) as b:
        yield b


def printed(broker: BrokerThread, job: dict) -> str:  # type: ignore[type-arg]
    with broker.client("alice") as c:
        return str(c.get(f"/v1/jobs/{job['id']}/logs").json()["data"]).strip()


def test_a_tagged_image_runs_in_its_environment_on_a_single_use_pod(
    broker: BrokerThread, environment: Path
) -> None:
    with broker.client("alice") as alice:
        job = run(alice, command=py(PREFIX), image=TAGGED, lease_tag="s")
        assert job["state"] == "SUCCEEDED", job
        pod, path, reason = pod_of(job)
        assert (path, reason) == ("custom_image", "custom_image")
        assert Path(printed(broker, job)) == environment
        assert gone(broker, pod)  # a mutable tag never serves twice
        plain = run(alice, command=py(PREFIX), lease_tag="s")
        assert Path(printed(broker, plain)) != environment  # the pool's own interpreter
        again = run(alice, command=py(PREFIX), image=TAGGED, lease_tag="s")
        assert pod_of(again)[0] not in (pod, pod_of(plain)[0])


def test_a_pinned_image_is_reused_only_inside_its_fence(broker: BrokerThread) -> None:
    with broker.client("alice") as alice, broker.client("bob") as bob:
        first = run(alice, command=py(PREFIX), image=PINNED, lease_tag="s")
        pod, path, _ = pod_of(first)
        assert path == "custom_image"
        assert settled(broker, pod) == "held"
        assert pod_of(run(alice, command=py("pass"), image=PINNED, lease_tag="s")) == (
            pod, "custom_image", "same_session",
        )  # fmt: skip
        # Outside the fence: another caller, another tag, the pool's own image.
        assert pod_of(run(bob, command=py("pass"), image=PINNED, lease_tag="s"))[0] != pod
        assert pod_of(run(alice, command=py("pass"), image=PINNED, lease_tag="t"))[0] != pod
        assert pod_of(run(alice, command=py("pass"), lease_tag="s"))[0] != pod
        mine = {p["name"]: p for p in alice.get("/v1/pods").json()["pods"]}
        theirs = {p["name"]: p for p in bob.get("/v1/pods").json()["pods"]}
        assert (mine[pod]["image"], theirs[pod]["image"]) == (PINNED, "custom")
    with broker.client("root", TokenRole.ADMIN) as admin:
        full = {p["name"]: p for p in admin.get("/v1/pods").json()["pods"]}
        assert full[pod]["image"] == PINNED


def test_the_image_survives_a_broker_restart(tmp_path: Path, environment: Path) -> None:
    data = tmp_path / "b"
    catalog = images_catalog(environment)
    with running_broker(data, catalog=catalog, config=FAST, delete_pods_on_exit=False) as first:
        token = first.issue("alice")
        with first.client("alice") as alice:
            pod = pod_of(run(alice, command=py("pass"), image=PINNED, lease_tag="s"))[0]
        assert settled(first, pod) == "held"
    with running_broker(data, catalog=catalog, config=FAST) as second:
        restored = second.call(lambda: second.embedded.broker.tracker.get(pod))
        assert restored is not None and restored.image == PINNED
        with second.client("alice") as alice:
            alice.headers["Authorization"] = f"Bearer {token}"
            # Not shared capacity: a job of the pool's own image does not get it ...
            assert pod_of(run(alice, command=py("pass"), lease_tag="s"))[0] != pod
            # ... and its own session still does, on the image's interpreter.
            job = run(alice, command=py(PREFIX), image=PINNED, lease_tag="s")
            assert pod_of(job) == (pod, "custom_image", "same_session")
            assert Path(alice.get(f"/v1/jobs/{job['id']}/logs").json()["data"].strip()) == (
                environment
            )
