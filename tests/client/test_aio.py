"""`AsyncClient` over real HTTP: the same calls as `Client`, sessions per task, typed errors."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from firepool.api.schemas import JobOut
from firepool.client import AsyncClient, WaitTimeoutError
from firepool.model import JobState, NotFoundError, RequestValidationError
from firepool.testing.broker import LiveBroker


def test_submit_list_cancel_and_errors(broker: LiveBroker) -> None:
    async def main() -> None:
        async with AsyncClient(broker.url, broker.tokens["alice"]) as client:
            job = await client.submit("cpu", ["python", "main.py"], env={"K": "V"})
            assert (await client.get(job.id)) == job
            assert [j.id for j in await client.list(state="QUEUED")] == [job.id]
            assert (await client.cancel(job.id)).state == JobState.CANCELLED
            assert (await client.wait(job.id)).state == JobState.CANCELLED
            assert [p.name for p in await client.pools()] == ["cpu", "gpu"]
            with pytest.raises(RequestValidationError) as bad:
                await client.submit_spec({"pool": "cpu", "command": ["x"], "podz": 2})
            assert bad.value.field == "podz"
            with pytest.raises(NotFoundError):
                await client.get("0" * 16)
            other = await client.submit("cpu", ["y"])
            with pytest.raises(WaitTimeoutError):
                await client.wait(other.id, timeout=0.1)

    asyncio.run(main())


def test_sessions_are_per_task(broker: LiveBroker) -> None:
    async def agent(client: AsyncClient, name: str) -> list[str]:
        async with client.session(lease_tag=name, queue=f"q-{name}"):
            tags = []
            for _ in range(2):
                job = await client.submit("cpu", ["x"])
                tags.append(f"{job.lease_tag}/{job.queue}")
                await asyncio.sleep(0.01)
            return tags

    async def main() -> list[list[str]]:
        async with AsyncClient(broker.url, broker.tokens["alice"]) as client:
            results = await asyncio.gather(*(agent(client, f"a{i}") for i in range(3)))
            assert (await client.submit("cpu", ["z"])).lease_tag == ""
            return list(results)

    assert asyncio.run(main()) == [[f"a{i}/q-a{i}"] * 2 for i in range(3)]


def test_an_async_session_submits_and_runs_itself(broker: LiveBroker) -> None:
    async def main() -> tuple[JobOut, JobOut, JobOut]:
        async with AsyncClient(broker.url, broker.tokens["alice"]) as client:
            session = client.session(lease_tag="async-agent", queue="agents")
            submitted = await session.submit("cpu", ["x"])
            running = asyncio.create_task(session.run("cpu", ["y"], wait_timeout=30))
            while not (found := await client.list(queue="agents")) or len(found) < 2:
                await asyncio.sleep(0.01)
            broker.finish(found[-1].id, exit_code=0)
            plain = await client.submit("cpu", ["z"])
            return submitted, await running, plain

    submitted, ran, plain = asyncio.run(main())
    assert (submitted.lease_tag, submitted.queue) == ("async-agent", "agents")
    assert (ran.lease_tag, ran.state, ran.exit_code) == ("async-agent", JobState.SUCCEEDED, 0)
    assert plain.lease_tag == ""


def test_follow_and_wait(broker: LiveBroker) -> None:
    async def main() -> tuple[str, JobState]:
        async with AsyncClient(broker.url, broker.tokens["alice"]) as client:
            job = await client.submit("cpu", ["x"])
            broker.start(job.id)

            def finish() -> None:
                broker.log(job.id, "one\n")
                time.sleep(0.2)
                broker.log(job.id, "two\n")
                broker.finish(job.id)

            worker = asyncio.create_task(asyncio.to_thread(finish))
            text = "".join([chunk async for chunk in client.logs(job.id, follow=True)])
            await worker
            return text, (await client.wait(job.id, timeout=10)).state

    assert asyncio.run(main()) == ("one\ntwo\n", JobState.SUCCEEDED)


def test_wait_is_one_long_poll(broker: LiveBroker) -> None:
    async def main() -> tuple[JobState, list[str]]:
        async with AsyncClient(broker.url, broker.tokens["alice"]) as client:
            job = await client.submit("cpu", ["x"])
            gets: list[str] = []

            async def seen(request: httpx.Request) -> None:
                if request.method == "GET":
                    gets.append(str(request.url))

            client._http.event_hooks["request"].append(seen)

            def finish() -> None:
                time.sleep(0.3)
                broker.finish(job.id)

            worker = asyncio.create_task(asyncio.to_thread(finish))
            done = await client.wait(job.id, timeout=50)
            await worker
            return done.state, gets

    state, gets = asyncio.run(main())
    assert state == JobState.SUCCEEDED
    assert len(gets) == 1 and "wait_s=30" in gets[0]
