"""`LoopThread`: a private event loop on a daemon thread, for integrations that own a store.

A store an integration opens itself lives on this loop, not on the framework's: LangGraph's
`invoke` runs nodes in plain threads with no loop at all, and Inspect AI runs every `eval()`
on a fresh loop, where a database connection opened by an earlier `eval()` cannot be used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """One event loop, started on first use on a daemon thread named `name`."""

    def __init__(self, name: str = "contextfold") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name=self._name,
                                 daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop thread and wait for it (from a thread without a loop)."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure()).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop thread and await it from the caller's own loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._ensure()))
