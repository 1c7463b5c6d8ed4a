"""Package upload: stream in, check, keep by digest, record who uploaded it first."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool

from firepool.api.context import ApiContext
from firepool.packages import StoredPackage


async def upload(context: ApiContext, caller: str, body: AsyncIterator[bytes]) -> StoredPackage:
    pending = context.packages.begin()
    try:
        async for chunk in body:
            if chunk:
                pending.write(chunk)
        stored = await run_in_threadpool(pending.commit)
    finally:
        pending.abort()
    await run_in_threadpool(
        context.store.add_package, stored.digest, stored.size, caller=caller, now=context.clock()
    )
    context.metrics.packages_stored.labels(str(stored.created).lower()).inc()
    return stored
