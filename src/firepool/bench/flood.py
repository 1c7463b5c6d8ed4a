"""What one `/metrics` scrape costs the jobs, measured by amplifying it.

At a scrape every 0.25 s a render's ~1-2 ms of CPU is well under 1% of the machine, while
jobs/s on this shared 2-core machine swings 15-35% from one run to the next: comparing runs
with and without a scraper cannot resolve a 3% bound. So the cost is made large enough to
see, within one run: a scraper in a process of its own GETs `/metrics` back to back (as fast
as one keep-alive connection is answered) during every other phase of `phase_s` seconds and
stays silent in the phases between, while `bench throughput`'s load runs throughout. Jobs/s
of each flood phase is compared with the quiet phase after it (neighbours share the
machine's drift), counting only jobs that finished after the first `settle_s` of a phase
(those in flight when it began saw the phase before).

From the pooled ratio and the flood's rate comes the loss per scrape per second, and from
it the loss at any scrape rate. Linear scaling is the assumption; a flood that fills the
broker's event loop costs more per scrape than a rare scrape does (it queues ahead of the
callers' requests), so the projection errs high. The broker's CPU per phase (from /proc)
gives the same cost directly, in CPU per scrape. The scraper's own CPU counts against the
jobs here (it shares the 2 cores), which a Prometheus on another host would not.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from firepool.bench.common import cpu_seconds, median

#: A phase's first half second is not counted: its jobs in flight saw the phase before.
FLOOD_SETTLE_S = 0.5


@dataclass
class Phase:
    index: int
    start: float  # wall clock, as the jobs' recorded timings
    end: float
    flood: bool
    scrapes: int
    broker_cpu_s: float
    scraper_cpu_s: float


def scrape_in_phases(
    url: str, broker_pid: int, start: float, phase_s: float, stop_at: float, out: Any
) -> None:
    """Process target: phases from `start` (even ones flood) until the next would pass
    `stop_at`; puts the phases, as dicts, on the `out` queue."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    phases: list[Phase] = []
    index = 0
    time.sleep(max(0.0, start - time.time()))
    while start + (index + 1) * phase_s <= stop_at:
        begin, end = start + index * phase_s, start + (index + 1) * phase_s
        broker, own, scrapes = cpu_seconds(broker_pid), time.process_time(), 0
        if index % 2 == 0:
            while time.time() < end:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"GET /metrics answered {response.status}")
                scrapes += 1
        else:
            time.sleep(max(0.0, end - time.time()))
        phases.append(
            Phase(
                index=index,
                start=begin,
                end=end,
                flood=index % 2 == 0,
                scrapes=scrapes,
                broker_cpu_s=cpu_seconds(broker_pid) - broker,
                scraper_cpu_s=time.process_time() - own,
            )
        )
        index += 1
    conn.close()
    out.put([asdict(p) for p in phases])


def summarize(
    phases: list[dict[str, Any]], finished: list[float], settle_s: float, rates: dict[str, float]
) -> dict[str, Any]:
    """The flood's cost from its phases and the jobs' finish times (wall clock); the loss is
    projected to each of `rates` (scrapes per second, by a label for it)."""
    per_phase = []
    for p in phases:
        counted_from = p["start"] + settle_s
        jobs = sum(counted_from <= t < p["end"] for t in finished)
        per_phase.append(jobs / (p["end"] - counted_from))
    # Each flood phase with the quiet phase after it (a quiet phase without a job is no
    # baseline: that pair is left out).
    starts = [
        i for i in range(0, len(phases) - 1, 2) if phases[i]["flood"] and per_phase[i + 1] > 0
    ]
    if not starts:
        raise ValueError(f"no flood/quiet pair of {len(phases)} phases: run longer")
    pairs = [(per_phase[i], per_phase[i + 1]) for i in starts]
    floods = [phases[i] for i in starts]
    quiets = [phases[i + 1] for i in starts]
    flood_s = sum(p["end"] - p["start"] for p in floods)
    quiet_s = sum(p["end"] - p["start"] for p in quiets)
    scrapes = sum(p["scrapes"] for p in floods)
    rate = scrapes / flood_s
    on = sum(a for a, _ in pairs) / len(pairs)
    off = sum(b for _, b in pairs) / len(pairs)
    ratio = on / off
    loss_per_rate = (1.0 - ratio) / rate if rate else float("nan")
    broker_on = sum(p["broker_cpu_s"] for p in floods) / flood_s
    broker_off = sum(p["broker_cpu_s"] for p in quiets) / quiet_s
    # The flood phases also ran fewer jobs, each with the quiet phases' CPU per job.
    jobs_cpu_on = on * broker_off / off
    scraper_cpu = sum(p["scraper_cpu_s"] for p in floods)
    return {
        "phases": len(phases),
        "pairs": len(pairs),
        "flood_scrapes_per_s": rate,
        "jobs_per_s_flood": on,
        "jobs_per_s_quiet": off,
        "ratio_pooled": ratio,
        "ratio_per_pair": [a / b for a, b in pairs],
        "ratio_per_pair_median": median([a / b for a, b in pairs]),
        # Extra broker CPU per scrape: the render and its HTTP request and response.
        "broker_cpu_ms_per_scrape": (broker_on - jobs_cpu_on) / rate * 1000.0 if rate else 0.0,
        "scraper_cpu_ms_per_scrape": scraper_cpu / scrapes * 1000.0 if scrapes else 0.0,
        "loss_per_scrape_per_s": loss_per_rate,
        "projected_loss": {label: r * loss_per_rate for label, r in rates.items()},
    }
