"""The signals between the broker's hooks, its action executor and its loops.

Hooks are called from request threads as well as the event loop, so every signal goes
through the loop (`call_soon_threadsafe`) unless it already runs there. The loops wait on
these events instead of polling: a submission wakes the dispatcher at once, a pod event
asks the scaler for its pool now rather than at the next 30 s pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class Wakeups:
    """The event loop the broker runs on, the events its loops wait for, and whether it is
    closing (every loop ends at its next turn once it is)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        #: A dispatch pass is due (a `Dispatch` action, a submission, a release).
        self.dispatch = asyncio.Event()
        #: A scaler pass is due for the pools in `reconcile_pools`.
        self.reconcile = asyncio.Event()
        self.reconcile_pools: dict[str, None] = {}  # ordered, without repeats
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def signal(self, event: asyncio.Event) -> None:
        """Set `event` from any thread (nothing before the broker runs on its loop)."""
        loop = self.loop
        if loop is None:
            return
        try:
            running_loop = asyncio.get_running_loop()
        except RuntimeError:
            running_loop = None
        if running_loop is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run `callback(*args)` on the broker's loop (a hook on a request thread)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(callback, *args)

    def ask_reconcile(self, pool: str) -> None:
        """On the loop: a scaler pass for `pool` soon."""
        self.reconcile_pools[pool] = None
        self.reconcile.set()
