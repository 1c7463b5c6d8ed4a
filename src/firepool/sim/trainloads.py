"""The scheduler paper's training workloads (section IV-B) and the relative-load traces.

Job sizes come from the Pollux traces: an application's total training progress (the largest
`progress` in its validation files, in initial-batch steps) times its initial batch size gives
the samples one job processes. Those six numbers are committed here with their source; the
trace files themselves are never read at import time.

small / medium / congestion / stress: 4 / 12 / 24 / 40 jobs drawn uniformly from the paper's
five families (CIFAR-10, ImageNet, YOLOv3, BERT, DeepSpeech2), arriving as a Poisson stream
with a 10-minute mean gap, all from one seeded generator, so a seed fixes the workload for
every policy. The paper does not publish its job lists; this generator is ours.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

from firepool.scheduling import app_model
from firepool.sim.training import TrainSpec

#: Max `progress` over validation-*.csv per application (Pollux traces, petuum/adaptdl
#: osdi21-artifact simulator/traces, Apache-2.0), in steps at the initial batch size.
TRACE_PROGRESS: dict[str, float] = {
    "bert": 14789.67,
    "cifar10": 39084.62,
    "deepspeech2": 28553.36,
    "imagenet": 576537.44,
    "ncf": 194285.19,
    "yolov3": 103477.47,
}
FAMILIES = ("cifar10", "imagenet", "yolov3", "bert", "deepspeech2")
SIZES: dict[str, int] = {"small": 4, "medium": 12, "congestion": 24, "stress": 40}
MEAN_GAP_S = 600.0


def work_samples(app: str) -> float:
    return TRACE_PROGRESS[app] * app_model(app).init_batch_size


def paper_workload(name: str, seed: int) -> list[TrainSpec]:
    if name not in SIZES:
        raise ValueError(f"unknown workload {name!r}; choose from {sorted(SIZES)}")
    rng = random.Random(f"{name}/{seed}")
    t = 0.0
    jobs: list[TrainSpec] = []
    for i in range(SIZES[name]):
        app = FAMILIES[rng.randrange(len(FAMILIES))]
        jobs.append(TrainSpec(f"{app}-{i}", app, t, work_samples(app)))
        t += rng.expovariate(1.0 / MEAN_GAP_S)
    return jobs


def relative_load_workload(path: str | Path) -> list[TrainSpec]:
    """A `workloads-0.5/workload-N.csv` file (name, time, application, num_replicas, ...):
    read at run time from the folder the user gives, never copied into the repository."""
    jobs: list[TrainSpec] = []
    with Path(path).open(newline="") as fh:
        for row in csv.DictReader(fh):
            app = row["application"].strip().lower()
            jobs.append(
                TrainSpec(
                    row["name"],
                    app,
                    float(row["time"]),
                    work_samples(app),
                    max(1, min(12, int(row.get("num_replicas") or 12))),
                )
            )
    return jobs
