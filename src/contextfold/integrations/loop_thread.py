"""`LoopThread`: a private event loop on a daemon thread, for integrations that own a store;
`HeldStore`: an integration's store and the mirror over it, on that loop when it is theirs.

A store an integration opens itself lives on this loop, not on the framework's: LangGraph's
`invoke` runs nodes in plain threads with no loop at all, and Inspect AI runs every `eval()`
on a fresh loop, where a database connection opened by an earlier `eval()` cannot be used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..runtime.mirror import Mirror
    from ..store.protocol import SessionStore

T = TypeVar("T")

__all__ = ["HeldStore", "LoopThread"]


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


class HeldStore:
    """An integration's store and the mirror over it (made on first use by `make_mirror`).

    `store`: an open `SessionStore`, the application's, used on the caller's event loop; or
    a database URL or path (None: the default contextfold database), opened on first use on
    a `LoopThread` of its own (`owned`), so sync and async callers and each new event loop
    reach the same connection. Only an owned store is closed here.
    """

    def __init__(self, store: SessionStore | str | None, *, thread: str,
                 make_mirror: Callable[[SessionStore], Mirror]) -> None:
        self.owned = store is None or isinstance(store, str)
        self.url: str | None = store if isinstance(store, str) else None
        self.store: SessionStore | None = None if isinstance(store, str) else store
        self.mirror: Mirror | None = None
        self.loop = LoopThread(thread)
        self._make_mirror = make_mirror

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` where the store lives: on the loop thread when the store is owned."""
        return await (self.loop.arun(coro) if self.owned else coro)

    def refuse_sync(self, refused: str) -> None:
        """Raise RuntimeError(`refused`) unless the store is owned: an application's store
        lives on the application's own loop, which sync code cannot reach."""
        if not self.owned:
            raise RuntimeError(refused)

    async def ready(self) -> Mirror:
        """The mirror, the store opened and the mirror made on first use (call it where
        the store lives: inside `run`)."""
        if self.mirror is None:
            if self.store is None:
                from ..store import open_store

                self.store = await open_store(self.url)
            self.mirror = self._make_mirror(self.store)
        return self.mirror

    async def aclose(self) -> None:
        """Close an owned store, once its mirror's background work is done."""
        if self.owned and self.store is not None:
            await self.run(self._close())

    def close(self) -> None:
        """Sync form of `aclose` (from a thread without a running loop)."""
        if self.owned and self.store is not None:
            self.loop.run(self._close())

    async def _close(self) -> None:
        mirror, store = self.mirror, self.store
        if mirror is not None:
            await mirror.wait_idle()
        self.mirror = self.store = None
        if store is not None:
            await store.close()
