"""Each rank's gang variables: torchrun's rendezvous at rank 0, and for Ray a head address,
per-node ports that never collide across the gang, one auth token, RAY_ADDRESS on rank 0 only,
and variables the in-pod wrapper reads back as the `ray start` it runs."""

from __future__ import annotations

import json

import pytest

from firepool.agent import ray_node
from firepool.agent.ray_node import Node
from firepool.model import Topology
from firepool.protocol import RayEnv
from firepool.service.gang_env import RAY_PORTS, RAY_WORKER_PORTS, free_ports, gang_env


def test_torchrun_ranks_rendezvous_at_rank_zero() -> None:
    ranks = gang_env(Topology.TORCHRUN, ["10.0.0.1", "10.0.0.2"])
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    assert {r["MASTER_ADDR"] for r in ranks} == {"10.0.0.1"}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert gang_env(Topology.NONE, ["a", "b"]) == [{}, {}]


def test_ray_ranks_get_distinct_ports_one_token_and_a_driver_address() -> None:
    ranks = gang_env(Topology.RAY, ["127.0.0.1"] * 3)
    head = ranks[0][RayEnv.HEAD]
    assert {r[RayEnv.HEAD] for r in ranks} == {head}
    assert ranks[0]["RAY_ADDRESS"] == head
    assert all("RAY_ADDRESS" not in r for r in ranks[1:])
    assert len({r["RAY_AUTH_TOKEN"] for r in ranks}) == 1
    assert len(ranks[0]["RAY_AUTH_TOKEN"]) == 64
    ports = [int(head.rsplit(":", 1)[1])]
    for r in ranks:
        named = json.loads(r[RayEnv.PORTS])
        assert set(named) == {*RAY_PORTS, "workers"}
        assert len(named["workers"]) == RAY_WORKER_PORTS
        ports += [named[k] for k in RAY_PORTS] + named["workers"]
    assert len(ports) == len(set(ports))  # three nodes on one IP: no port twice


def test_the_wrapper_starts_a_head_on_rank_zero_and_workers_elsewhere() -> None:
    ranks = gang_env(Topology.RAY, ["127.0.0.1"] * 2)
    head = Node.from_env({**ranks[0], "TMPDIR": "/tmp", "CUDA_VISIBLE_DEVICES": "GPU-a"})
    worker = Node.from_env(ranks[1])
    h, w = head.start_args(), worker.start_args()
    assert "--head" in h and "--include-dashboard=false" in h and "--num-gpus=1" in h
    assert f"--address={ranks[0][RayEnv.HEAD]}" in w and "--block" in w and "--head" not in w
    assert head.temp_dir == "/tmp/ray"
    for args, env in ((h, ranks[0]), (w, ranks[1])):
        named = json.loads(env[RayEnv.PORTS])
        assert f"--node-manager-port={named['node_manager']}" in args
        assert f"--worker-port-list={','.join(map(str, named['workers']))}" in args


def test_free_ports_are_distinct() -> None:
    ports = free_ports(50)
    assert len(set(ports)) == 50



def test_a_head_refuses_a_temp_dir_too_long_for_rays_sockets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ranks = gang_env(Topology.RAY, ["127.0.0.1"])
    deep = "/var/lib/firepool/pods/cpu-0123456789abcdef/tmp"  # a weak-mode pod's TMPDIR
    for name, value in {**ranks[0], "TMPDIR": deep}.items():
        monkeypatch.setenv(name, value)
    assert ray_node.main(["--", "true"]) == ray_node.EXIT_CONFIG
    assert "too long for its sockets" in capsys.readouterr().err
