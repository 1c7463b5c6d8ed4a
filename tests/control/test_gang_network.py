"""A gang spanning pods is refused on a pool whose network keeps each pod to itself."""

from __future__ import annotations

import pytest

from firepool.control.gang_network import check_gang_network
from firepool.model import JobSpec, NetworkAccess, PoolSpec, RequestValidationError
from firepool.testing.control import cpu_pool


@pytest.mark.parametrize("network", [NetworkAccess.NONE, NetworkAccess.EGRESS])
def test_a_gang_on_an_isolating_pool_is_refused_naming_the_pool_and_the_fix(
    network: NetworkAccess,
) -> None:
    pool = cpu_pool("iso", network=network)
    with pytest.raises(RequestValidationError) as caught:
        check_gang_network(pool, JobSpec(pool="iso", command=["x"], pods=2))
    err = caught.value
    assert err.field == "pods"
    assert "pool iso" in err.message and f"network {network.value}" in err.message
    assert "network = host" in err.message


def test_an_elastic_job_that_may_grow_past_one_pod_is_a_gang_too() -> None:
    pool = cpu_pool("iso")
    grows = JobSpec(
        pool="iso", command=["x"], kind="elastic", elastic={"app": "cifar10", "max_pods": 4}
    )
    with pytest.raises(RequestValidationError) as caught:
        check_gang_network(pool, grows)
    assert caught.value.field == "elastic.max_pods" and "up to 4 pods" in caught.value.message
    one = grows.model_copy(update={"elastic": grows.elastic.model_copy(update={"max_pods": 1})})
    check_gang_network(pool, one)


def test_one_pod_anywhere_and_a_gang_on_a_host_pool_pass() -> None:
    check_gang_network(cpu_pool("iso"), JobSpec(pool="iso", command=["x"]))
    host = cpu_pool("shared", network=NetworkAccess.HOST)
    check_gang_network(host, JobSpec(pool="shared", command=["x"], pods=4))


def test_a_pool_names_an_unknown_network_with_a_typed_error() -> None:
    from firepool.model import ConfigError

    with pytest.raises(ConfigError) as caught:
        PoolSpec(name="p", network="internet")  # type: ignore[arg-type]
    assert caught.value.field == "network"
