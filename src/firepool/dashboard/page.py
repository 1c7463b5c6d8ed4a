"""The dashboard's HTML: pure functions from the broker's figures to escaped markup.

Why hand-written HTML and no template engine or front-end build: the page is a few tables,
bars and two line charts (inline SVG drawn here, no charting library), refreshed by polling
one server-rendered fragment; `html.escape` on every value is the whole injection defence,
and nothing has to be built or fetched from a CDN (the broker often runs where nothing
outside can be reached). The shell page (`SHELL`) holds no data: the
browser keeps the API token in its session storage and sends it as a bearer token with every
fragment request, exactly like the SDK, so no cookie (and no CSRF surface) is involved.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from firepool.api.schemas import JobOut, PodView
from firepool.model import PoolSpec, PoolStats, RoundAllocation, TimelinePoint

#: Pod states that count as busy (a job holds the pod).
BUSY = frozenset({"assigned", "running"})
REFRESH_MS = 2000

SHELL = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>firepool</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; margin: 0 0 .5em; }}
h2 {{ font-size: 1.05em; margin: 1.4em 0 .4em; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: .2em .7em .2em 0; text-align: left; white-space: nowrap; }}
th {{ border-bottom: 1px solid #999; }}
.num {{ text-align: right; }}
.bar {{ display: inline-block; width: 160px; height: .8em; background: #eee;
        position: relative; vertical-align: middle; }}
.bar span {{ position: absolute; left: 0; top: 0; bottom: 0; }}
.held {{ background: #9ecae1; }} .busy {{ background: #3182bd; }}
.SUCCEEDED {{ color: #2a7; }} .FAILED {{ color: #c33; }} .CANCELLED {{ color: #a3a; }}
.QUEUED {{ color: #b80; }} .RUNNING {{ color: #08c; }}
#login-error {{ color: #c33; }}
svg.chart {{ background: #fafafa; border: 1px solid #ddd; margin-right: 1.5em; }}
svg.chart polyline {{ fill: none; stroke-width: 1.6; }}
svg.chart text {{ font-size: 10px; fill: #555; }}
.s-held {{ stroke: #9ecae1; }} .s-busy {{ stroke: #08519c; }}
.s-p50 {{ stroke: #31a354; }} .s-p90 {{ stroke: #fd8d3c; }} .s-p99 {{ stroke: #de2d26; }}
.key span {{ display: inline-block; width: 1em; height: 3px; vertical-align: middle;
            margin: 0 .3em 0 .8em; }}
.k-held {{ background: #9ecae1; }} .k-busy {{ background: #08519c; }}
.k-p50 {{ background: #31a354; }} .k-p90 {{ background: #fd8d3c; }}
.k-p99 {{ background: #de2d26; }}
.muted {{ color: #777; }}
</style>
</head>
<body>
<h1>firepool</h1>
<form id="login" hidden>
  <label>API token <input id="token" type="password" autocomplete="off" size="48"></label>
  <button id="unlock" type="submit">Unlock</button>
  <span id="login-error"></span>
</form>
<div id="panel" hidden></div>
<script>
const KEY = "firepool-token";
const login = document.getElementById("login");
const panel = document.getElementById("panel");
function locked(message) {{
  sessionStorage.removeItem(KEY);
  panel.hidden = true;
  login.hidden = false;
  document.getElementById("login-error").textContent = message || "";
}}
async function refresh() {{
  const token = sessionStorage.getItem(KEY);
  if (!token) {{ locked(""); return; }}
  let response;
  try {{
    response = await fetch("/dashboard/panel", {{headers: {{Authorization: "Bearer " + token}}}});
  }} catch (err) {{ return; }}
  if (response.status === 401) {{ locked("the broker refused this token"); return; }}
  if (!response.ok) {{ return; }}
  panel.innerHTML = await response.text();
  login.hidden = true;
  panel.hidden = false;
}}
login.addEventListener("submit", (event) => {{
  event.preventDefault();
  sessionStorage.setItem(KEY, document.getElementById("token").value.trim());
  refresh();
}});
refresh();
setInterval(refresh, {REFRESH_MS});
</script>
</body>
</html>
"""


#: Elastic rounds shown as columns (the newest).
ROUNDS_SHOWN = 8


@dataclass(frozen=True, slots=True)
class PanelData:
    caller: str
    now: float
    pools: Sequence[PoolSpec]
    stats: Sequence[PoolStats]
    pods: Sequence[PodView]
    jobs: Sequence[JobOut]
    timeline: Sequence[TimelinePoint] = ()
    rounds: Sequence[RoundAllocation] = ()
    #: Which of the rounds' jobs are the caller's (only those are named).
    own: frozenset[str] = frozenset()


def _e(value: object) -> str:
    return html.escape("-" if value is None or value == "" else str(value))


def _row(cells: Iterable[str], *, head: bool = False) -> str:
    tag = "th" if head else "td"
    return "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"


def _table(name: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    body = "".join(_row(r) for r in rows) or _row(["<span class='muted'>none</span>"])
    head = _row(header, head=True)
    return f"<table id='{name}'><thead>{head}</thead><tbody>{body}</tbody></table>"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _bar(held: int, busy: int, ceiling: int) -> str:
    scale = max(ceiling, held, 1)
    return (
        f"<span class='bar' title='{busy} busy of {held} held, ceiling {ceiling}'>"
        f"<span class='held' style='width:{100 * held / scale:.0f}%'></span>"
        f"<span class='busy' style='width:{100 * busy / scale:.0f}%'></span></span>"
    )


Series = tuple[str, Sequence[tuple[float, float | None]]]


def chart(name: str, series: Sequence[Series], *, unit: str, width: int = 460) -> str:
    """An inline SVG line chart of `series` (css class, [(time, value or None)]) over a
    shared time axis; a None value breaks its line. Server-rendered: no script, no library."""
    height, pad = 120, 4
    times = [t for _, points in series for t, _ in points]
    values = [v for _, points in series for _, v in points if v is not None]
    head = f"<svg class='chart' id='{name}' width='{width}' height='{height + 16}'>"
    if len(times) < 2:
        return head + "<text x='8' y='20'>collecting samples</text></svg>"
    t0, t1 = min(times), max(times)
    top = max(values, default=0.0) or 1.0
    span = max(t1 - t0, 1e-9)

    def xy(t: float, v: float) -> str:
        x = pad + (width - 2 * pad) * (t - t0) / span
        y = pad + (height - 2 * pad) * (1 - v / top)
        return f"{x:.1f},{y:.1f}"

    lines = []
    for css, points in series:
        run: list[str] = []
        for t, v in [*points, (t1, None)]:
            if v is None:
                if len(run) > 1:
                    lines.append(f"<polyline class='{css}' points='{' '.join(run)}'/>")
                elif run:
                    x, y = run[0].split(",")
                    lines.append(f"<circle class='{css}' cx='{x}' cy='{y}' r='1.5'/>")
                run = []
            else:
                run.append(xy(t, v))
    label = f"{top:.3g}{unit}" if unit == "s" else f"{top:.0f}{unit}"
    ago = f"-{span:.0f} s" if span < 120 else f"-{span / 60:.0f} min"
    axis = (
        f"<text x='{pad}' y='12'>{html.escape(label)}</text>"
        f"<text x='{pad}' y='{height + 12}'>{ago}</text>"
        f"<text x='{width - 30}' y='{height + 12}'>now</text>"
    )
    return head + "".join(lines) + axis + "</svg>"


def _key(*names: str) -> str:
    return (
        "<span class='key'>" + "".join(f"<span class='k-{n}'></span>{n}" for n in names) + "</span>"
    )


def charts(timeline: Sequence[TimelinePoint]) -> str:
    held = [(p.at, float(p.held)) for p in timeline]
    busy = [(p.at, float(p.busy)) for p in timeline]
    p50 = [(p.at, p.start_p50) for p in timeline]
    p90 = [(p.at, p.start_p90) for p in timeline]
    p99 = [(p.at, p.start_p99) for p in timeline]
    return (
        "<div><b>held vs busy pods</b>" + _key("held", "busy") + "<br>"
        + chart("capacity-chart", [("s-held", held), ("s-busy", busy)], unit=" pods")
        + "</div><div><b>start latency</b> (jobs ended in each interval)"
        + _key("p50", "p90", "p99") + "<br>"
        + chart("latency-chart", [("s-p50", p50), ("s-p90", p90), ("s-p99", p99)], unit="s")
        + "</div>"
    )  # fmt: skip


def elastic_table(rounds: Sequence[RoundAllocation], own: frozenset[str]) -> str:
    """Pods per elastic job (rows) in the newest rounds (columns); another caller's jobs are
    summed in one row, never named."""
    shown = list(rounds)[-ROUNDS_SHOWN:]
    jobs = sorted({job for r in shown for job in r.pods if job in own})
    header = ["job", *(f"round {r.round}" for r in shown)]
    rows = [[_e(job), *(_e(r.pods.get(job, "")) for r in shown)] for job in jobs]
    others = [sum(n for job, n in r.pods.items() if job not in own) for r in shown]
    if any(others) or any(job not in own for r in shown for job in r.pods):
        rows.append(["<span class='muted'>other callers</span>", *(str(n) for n in others)])
    policy = shown[-1].policy if shown else "-"
    note = f"<p class='muted'>pods given to each elastic job per round (policy {_e(policy)})</p>"
    return note + _table("elastic", header, rows)


def panel(data: PanelData) -> str:
    """The fragment the shell polls: pools, queue, plots over time, elastic rounds, pods and
    the caller's recent jobs."""
    shapes = {p.name: p for p in data.pools}
    pool_rows = []
    for s in data.stats:
        held = sum(s.pods.values())
        busy = sum(n for (_, state), n in s.pods.items() if state in BUSY)
        spec = shapes.get(s.pool)
        shape = "-"
        if spec is not None:
            shape = (
                f"{spec.accelerators_per_pod}x {spec.accelerator}"
                if spec.accelerator
                else f"{spec.cpus_per_pod:g} cpu"
            )
        limit = "" if s.budget_limit is None else f" / {s.budget_limit}"
        pool_rows.append(
            [
                _e(s.pool),
                _e(shape),
                f"{s.floor} / {s.idle_cap} / {s.ceiling}",
                f"<span class='held-count'>{held}</span>",
                f"<span class='busy-count'>{busy}</span>",
                _bar(held, busy, s.ceiling),
                f"<span class='queued'>{s.queued}</span>",
                _e(f"{s.budget_used}{limit} {s.budget_resource}"),
                f"{s.held_pod_seconds:,.0f}",
            ]
        )
    pod_rows = [
        [
            _e(p.name),
            _e(p.pool),
            _e(p.role),
            _e(p.state),
            _e(p.owner),
            _e(p.lease_tag),
            _e(p.job),
            _e(f"{max(0.0, data.now - p.created_at):.0f}s"),
        ]
        for p in sorted(data.pods, key=lambda p: (p.pool, p.name))
    ]
    waits: list[float] = []
    job_rows = []
    for j in data.jobs:
        t = j.timings
        waited = None
        if t.first_instruction is not None and t.submitted is not None:
            waited = t.first_instruction - t.submitted
            waits.append(waited)
        ran = None if t.started is None or t.finished is None else t.finished - t.started
        paths = ", ".join(f"{p.acquisition.value} ({p.reason})" for p in j.pods) or "-"
        job_rows.append(
            [
                _e(j.id),
                f"<span class='{_e(j.state.value)}'>{_e(j.state.value)}</span>",
                _e(j.pool),
                _e(j.queue),
                f"<span class='path'>{html.escape(paths)}</span>",
                _seconds(waited),
                _seconds(ran),
                _e(j.exit_code),
                _e(j.error_class.value if j.error_class else None),
            ]
        )
    queued = sum(s.queued for s in data.stats)
    latency = " · ".join(f"p{q} {_seconds(percentile(waits, q))}" for q in (50, 90, 99))
    stamp = time.strftime("%H:%M:%S", time.localtime(data.now))
    return "".join(
        [
            f"<p class='muted'>signed in as <b id='caller'>{_e(data.caller)}</b>"
            f" · updated {stamp} · every {REFRESH_MS // 1000}s</p>",
            "<h2>Pools</h2>",
            _table(
                "pools",
                [
                    "pool",
                    "shape",
                    "floor / idle cap / ceiling",
                    "held",
                    "busy",
                    "",
                    "queued",
                    "budget",
                    "held pod-s",
                ],
                pool_rows,
            ),
            f"<h2>Queue</h2><p id='queue'>{queued} job(s) queued across every pool</p>",
            "<h2>Over time</h2><div style='display:flex;flex-wrap:wrap'>",
            charts(data.timeline),
            "</div>",
            "<h2>Elastic jobs</h2>",
            elastic_table(data.rounds, data.own),
            "<h2>Pods</h2>",
            _table(
                "pods",
                ["pod", "pool", "role", "state", "owner", "tag", "job", "age"],
                pod_rows,
            ),
            "<h2>Your recent jobs</h2>",
            f"<p id='latency'>start latency (submit to first instruction): {latency}</p>",
            _table(
                "jobs",
                ["job", "state", "pool", "queue", "acquisition", "waited", "ran", "exit", "error"],
                job_rows,
            ),
        ]
    )
