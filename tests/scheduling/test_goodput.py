"""The fitted goodput model: data file, fit quality, memory filter, measured throughput."""

from __future__ import annotations

import pytest

from firepool.scheduling import (
    Configuration,
    GpuSpec,
    InvalidGoodputError,
    ThroughputObservation,
    UnknownApplicationError,
    app_model,
    app_models,
    candidate_configurations,
    estimate_goodputs,
    fit_reports,
)
from firepool.scheduling.goodput import _raw

APPS = {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
T4 = {"T4": GpuSpec("T4", 16.0, 1.0, 4)}


def test_all_six_applications_are_fitted_with_a_named_source() -> None:
    assert set(app_models()) == APPS
    assert "Apache" in str(_raw()["source"]) and "adaptdl" in str(_raw()["source"])
    reports = fit_reports()
    for app in APPS:
        assert reports[app].points > 500
        assert reports[app].mape < 0.25  # step time within 25 % on average


def test_goodput_is_one_on_one_reference_gpu_and_scales_for_imagenet() -> None:
    m = app_model("imagenet")
    cfgs = tuple(Configuration("T4", r, -(-r // 4)) for r in (1, 2, 4, 8, 16))
    g = estimate_goodputs(m, cfgs, T4)
    assert g[0] == pytest.approx(1.0)
    assert list(g) == sorted(g) and g[-1] > 8.0


def test_statistical_efficiency_falls_with_batch() -> None:
    m = app_model("cifar10")
    import numpy as np

    eff = m.efficiency(np.array([128.0, 1024.0, 4096.0]), progress=0.5)
    assert eff[0] == pytest.approx(1.0) and eff[0] > eff[1] > eff[2] > 0.0


def test_memory_filter_drops_configurations_that_cannot_fit() -> None:
    m = app_model("yolov3")  # max 8 local samples on a 16 GiB T4, at least 4
    gpus = {"T4": GpuSpec("T4", 16.0), "tiny": GpuSpec("tiny", 4.0)}
    cfgs, dropped = candidate_configurations(m, gpus, max_replicas=512,
                                             replica_choices=(1, 4, 256))
    assert Configuration("T4", 1, 1) in cfgs
    assert all(c.gpu_type != "tiny" for c in cfgs)  # 2 samples per GPU: below the minimum
    assert any("256xT4" in k for k in dropped)  # 256 x 4 samples overshoots the max batch


def test_measured_throughput_replaces_the_prior_in_the_jobs_own_units() -> None:
    m = app_model("cifar10")
    one, four = Configuration("T4", 1, 1), Configuration("T4", 4, 1)
    prior = estimate_goodputs(m, (one, four), T4)
    # A job reporting in other units (or on slower hardware) everywhere: nothing changes, so
    # its normalised goodput stays on the scale mu_na is meant for.
    uniform = estimate_goodputs(m, (one, four), T4, observations=(
        ThroughputObservation(four, m.goodput(1, 4)[0] * 0.001),
    ))
    assert uniform == pytest.approx(prior, rel=1e-9)
    # Measured scaling worse than the prior's: 4 GPUs give half the predicted speed-up.
    shape = estimate_goodputs(m, (one, four), T4, observations=(
        ThroughputObservation(one, m.goodput(1, 1)[0] * 7.0),
        ThroughputObservation(four, m.goodput(1, 4)[0] * 3.5),
    ))
    assert shape[1] / shape[0] == pytest.approx(0.5 * prior[1] / prior[0], rel=1e-6)
    with pytest.raises(InvalidGoodputError):
        ThroughputObservation(four, float("nan"))


def test_unknown_application() -> None:
    with pytest.raises(UnknownApplicationError):
        app_model("gpt-5")
