"""A pod keeps a bounded amount of each attempt's output, and says so when it cut some
(issue 13, item 0): past `max_output_bytes` a marker line ends the stream and the rest is
dropped, without the job ever blocking on it. A real agent in a real local pod."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pod_helpers import backend_at, make_pod, py, read_log, run_job
from test_server_bad_input import Pod

from firepool.agent.output import marker
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)
BOUND = 4096


@pytest.fixture(scope="module")
def pod() -> Iterator[Pod]:
    with backend_at("bound", max_output_bytes=BOUND) as (backend, loop, _root):
        record, client = loop.run(make_pod(backend, POOL))
        yield Pod(record, client, loop)


def test_output_past_the_bound_is_cut_with_a_marker(pod: Pod) -> None:
    # 1 MiB of stdout in many writes (far more than a pipe holds) and a short stderr.
    code = """
        import sys
        for i in range(1024):
            sys.stdout.write(str(i % 10) * 1023 + "\\n")
        sys.stderr.write("short\\n")
    """
    event, out = pod.loop.run(run_job(pod.client, "bound-1:0", py(code)))
    assert event.exit_code == 0
    expected = "".join(str(i % 10) * 1023 + "\n" for i in range(1024))
    cut = marker("stdout", BOUND).decode()
    assert out == expected[:BOUND] + cut
    assert pod.loop.run(read_log(pod.client, "bound-1:0", "stderr")) == "short\n"
    result = pod.loop.run(pod.client.reset())
    assert result.clean  # what the pod kept is what it reports as not yet stored
    assert result.logs_unacked == {"stdout": BOUND + len(cut), "stderr": len("short\n")}


def test_output_within_the_bound_is_kept_whole(pod: Pod) -> None:
    line = "x" * (BOUND - 1)
    event, out = pod.loop.run(run_job(pod.client, "bound-2:0", py(f"print({line!r})")))
    assert event.exit_code == 0 and out == line + "\n"  # exactly the bound: no marker
    assert pod.loop.run(pod.client.reset()).clean


def test_a_fast_jobs_exit_carries_its_whole_output(pod: Pod) -> None:
    """A job can exit before the launch has started its output copiers; its exit event must
    still wait for them and carry every byte (it once carried an empty output, and the
    reset then reported the bytes as lost). Many fast jobs, so the race is met."""

    async def jobs() -> list[tuple[str, bytes | None, bytes | None]]:
        seen = []
        for i in range(60):
            event, _ = await run_job(pod.client, f"fast-{i}:0", py(f"print({i})"))
            result = await pod.client.reset()
            assert result.clean, result.reason
            expected = f"{i}\n".encode()
            seen.append((event.attempt, expected, event.output and event.output.stdout))
        return seen

    for attempt, expected, carried in pod.loop.run(jobs()):
        assert carried == expected, attempt
