"""Live sessions of one worker: a `Conversation` per session, opened on the tenant's store.

Each session's settings (model, window, system prompt, base_url) are stored in its
metadata under "service", so any worker can open it. Before an operation the worker reads
the session row and its compaction lease in one statement, unless it is itself running
something on the session, and re-reads the branch (O(tail)) only when the row's leaf or
revision moved, so writes made by other workers are seen. Runtime events go to the hub
(SSE on any worker); "compacting" on another worker is read from the store's compaction
lease (docs/service.md, Several workers).

The open sessions are held in the worker's one cache of what it keeps per conversation
(`Held`, SPEC Y14: bounded by estimated bytes, `--memory-cache`, least recently used out),
with the store's write memos: a session running something is never evicted, and an evicted
one is opened again from the store when it is asked for, so memory does not grow with the
number of sessions served. What is held of one session, and its size, is `server.live`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, replace
from typing import Any

from ..billing import session_bill
from ..core.sizing.resolver import recorded_model
from ..core.values.held import Held
from ..core.values.messages import text_message
from ..core.values.tree import Branch, DamagedBranch
from ..runtime import Conversation, Event, SendAbortedError
from ..runtime.fitting import RECHECK_SECONDS
from ..store.protocol import SessionStore
from ..store.sql.liveness import holder_is_dead
from ..store.sql_store import SqlSessionStore
from .config import ServiceConfig
from .errors import ApiError
from .hub import Hub
from .live import META_KEY, UNREAD, Live, Settings
from .models import Opened, ServerModels, refuse_unavailable
from .views import event_json, gauge_json, iso, state_json

REMOTE_POLL = 0.25


class SessionManager:
    """Opens, caches and refreshes the live sessions of one worker."""

    def __init__(self, store: SessionStore, config: ServiceConfig, hub: Hub) -> None:
        self.store = store
        self.config = config
        self.hub = hub
        self.models = ServerModels(config)
        # Built once per worker: the configured object (tests), else --summarizer-model's.
        self.summarizer = config.summarizer if config.summarizer is not None else \
            self.models.summarizer()
        # The worker's one cache of what it holds per conversation (SPEC Y14): the open
        # sessions ("live", tenant, session) and the store's write memos.
        self.held = Held(config.memory_bytes)
        if isinstance(store, SqlSessionStore):
            store.hold_memos_in(self.held)
        self._opening: dict[tuple[str, str], asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()  # evicted conversations closing
        hub.on_cancel = self._cancel_local

    # ------------------------------------------------------------------ models

    def _reopen(self, live: Live) -> None:
        """Follow the recorded model of a session without a stored one (SPEC B4: explicit,
        else recorded, else the default), re-checked against this server (Y8)."""
        settings = live.settings
        if settings.model is not None or live.conv.branch is None:
            return
        recorded = recorded_model(live.conv.branch)
        if recorded is None or recorded == live.opened.resolved.name:
            return
        opened = self.models.open(None, settings.context_window, settings.base_url, recorded)
        if opened.resolved != live.opened.resolved:
            live.conv._set_model(opened.chat, opened.resolved.capacity)  # idle: just opened
            live.opened = opened

    # ------------------------------------------------------------------ opening

    async def create(self, tenant: str, settings: Settings, title: str | None) -> Live:
        opened = self.models.choose(settings.model, settings.context_window, settings.base_url)
        settings = replace(settings, model=opened.resolved.name)  # kept if the default moves
        store = self.store.for_tenant(tenant)
        info = await store.create_session(title=title, metadata={META_KEY: _meta(settings)})
        return await self._open(tenant, store, info, opened, settings)

    async def get(self, tenant: str, session_id: str) -> Live:
        """The live session, re-read from the store unless something runs on it here.

        Another tenant's session raises `SessionNotFoundError` (404) from the scoped store.
        `session_id` may be shortened to any unique prefix, or be `latest` (`store.refs`,
        over the tenant's store: never another tenant's session); an ambiguous one is a
        400 listing the candidates. A live session's whole id costs no read.
        """
        if ("live", tenant, session_id) not in self.held:
            from ..store.refs import resolve_session_id

            session_id = await resolve_session_id(self.store.for_tenant(tenant), session_id)
        key = (tenant, session_id)
        lock = self._opening.setdefault(key, asyncio.Lock())
        async with lock:
            live = self.held.get(("live", *key))
            if live is None:
                try:
                    store = self.store.for_tenant(tenant)
                    info = await store.get_session(session_id)
                    settings = Settings.from_metadata(info.metadata)
                    opened = self.models.open(settings.model, settings.context_window,
                                              settings.base_url)
                    return await self._open(tenant, store, info, opened, settings)
                finally:
                    if ("live", *key) not in self.held:  # not opened, or evicted at once
                        self._opening.pop(key, None)
            live.lease = UNREAD
            if not live.active:
                async with live.lock:  # held: the cache does not evict it meanwhile
                    await self._refresh(live)
                self.resize(live)
            return live

    async def _refresh(self, live: Live) -> None:
        """Pick up what other workers wrote: the branch and a model switch.

        One read gives the session row and the compaction lease; the branch is re-read
        only when its leaf or revision moved (every write moves the revision, SPEC C1):
        an unchanged session costs one statement, however long its tail (issue 26).
        """
        info, live.lease = await live.conv.store.session_and_lease(live.session_id)
        live.info = info
        settings = Settings.from_metadata(info.metadata)
        if settings != live.settings and not live.active:
            opened = self.models.open(settings.model, settings.context_window,
                                      settings.base_url)
            live.conv._set_model(opened.chat, opened.resolved.capacity)  # idle here
            live.settings, live.opened = settings, opened
        branch = live.conv.branch
        if isinstance(branch, Branch) and (branch.leaf_id, branch.revision) == \
                (info.leaf_id, info.branch_revision) and \
                time.monotonic() - live.checked_at < self.recheck_seconds:
            return  # what this worker holds is what is stored
        # Moved, or held a while: read again, each row checked against its hash, so a row
        # edited in place makes the session read-only here as in a fresh process (SPEC D2;
        # one O(tail) read per session per `recheck_seconds`, none per request).
        await live.conv.reload()
        live.checked_at = time.monotonic()
        self._reopen(live)

    recheck_seconds = RECHECK_SECONDS

    async def _open(self, tenant: str, store: SessionStore, info: Any, opened: Opened,
                    settings: Settings) -> Live:
        """Open the session's conversation here and hold it in the cache."""
        conv = await Conversation.open(
            store, info.id, model=opened.chat, capacity=opened.resolved.capacity,
            system=settings.system, summarizer=self.summarizer,
            summarizer_timeout=self.config.summarizer_timeout)
        live = Live(tenant, conv, settings, opened, info)
        conv.subscribe(lambda event: self._on_event(live, event))
        if self.config.on_conversation is not None:
            maybe = self.config.on_conversation(conv)
            if asyncio.iscoroutine(maybe):
                await maybe
        self._reopen(live)
        live.on_evicted = self._evicted
        self.held.put(("live", tenant, live.session_id), live, live.size())
        return live

    def resize(self, live: Live) -> None:
        """The session's branch or memos changed (a turn, a compaction, a refresh): its new
        size in the cache, which evicts idle sessions to its bound."""
        key = ("live", live.tenant, live.session_id)
        if self.held.get(key) is live:
            self.held.resize(key, live.size())

    def _evicted(self, live: Live) -> None:
        self._opening.pop((live.tenant, live.session_id), None)
        task = asyncio.get_running_loop().create_task(live.conv.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def open_sessions(self) -> list[Live]:
        """The sessions open here now."""
        out = []
        for key in self.held:
            if isinstance(key, tuple) and key[0] == "live":
                live = self.held.peek(key)
                if live is not None:
                    out.append(live)
        return out

    async def close(self) -> None:
        for live in self.open_sessions():
            with contextlib.suppress(Exception):
                await live.conv.close()
            self.held.pop(("live", live.tenant, live.session_id))
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def fork(self, live: Live, node_id: str, title: str | None) -> Live:
        """Fork at `node_id` (the runtime's checks, SPEC O3) and open the new session with
        the same settings; it belongs to the same tenant."""
        forked = await live.conv.fork(node_id, title=title)
        await forked.close()
        await forked.store.update_session_metadata(forked.session_id,
                                                   {META_KEY: _meta(live.settings)})
        return await self.get(live.tenant, forked.session_id)

    async def switch_model(self, live: Live, model: str, context_window: int | None) -> None:
        """Switch the session's model here and in its stored settings (other workers); the
        session's base_url stays, and is checked for the new model's provider (SPEC Y8)."""
        self.ensure_writable(live, "switch the model")
        settings = replace(live.settings, model=model, context_window=context_window)
        opened = self.models.choose(model, context_window, settings.base_url)
        live.conv.switch_model(opened.chat, opened.resolved.capacity)
        await live.conv.store.update_session_metadata(live.session_id,
                                                      {META_KEY: _meta(settings)})
        live.settings, live.opened = settings, opened
        self.resize(live)  # a new sizer: its memo of costs starts again
        self.publish_gauge(live)

    def ensure_writable(self, live: Live, operation: str) -> None:
        """SPEC D2: 409 `read_only`, with the damage found, for a write to a damaged session."""
        if live.read_only:
            problems = damage(live.conv.branch)
            raise ApiError(409, "read_only", f"cannot {operation}: the session's stored "
                           "history is damaged, so it is read-only"
                           + (f" ({'; '.join(problems)})" if problems else ""),
                           problems=problems)

    def ensure_servable(self, live: Live) -> None:
        """409 `model_unavailable` before a turn (nothing stored), when this server cannot
        serve the session's model now."""
        refuse_unavailable(live.opened)

    # ------------------------------------------------------------------ state and events

    async def remote_compaction(self, live: Live) -> bool:
        """Whether another process holds the session's compaction lease (a holder whose
        process is gone on this machine does not count: its lease is void, SPEC C4)."""
        holder = live.take_lease()
        if holder is UNREAD:
            holder = await live.conv.store.lease_holder(live.session_id)
        return isinstance(holder, str) and not holder_is_dead(holder)

    async def state(self, live: Live) -> dict[str, Any]:
        """idle / busy / compacting / failed, compactions on other workers included."""
        remote = not live.conv.state.compacting and await self.remote_compaction(live)
        return state_json(live.conv.state, busy=live.turns > 0, remote_compaction=remote)

    async def session_json(self, live: Live) -> dict[str, Any]:
        """The Session object of docs/service.md."""
        conv = live.conv
        branch = conv.branch
        healthy = branch is not None and not isinstance(branch, DamagedBranch)
        read_only = live.read_only
        return {
            "session_id": live.session_id, "title": live.title,
            "created_at": iso(live.info.created_at), **asdict(live.settings),
            "model": live.opened.resolved.name,
            "context_window": conv.capacity.context_window,
            "leaf_id": branch.leaf_id if healthy else live.info.leaf_id,  # type: ignore[union-attr]
            "revision": branch.revision if healthy else live.info.branch_revision,  # type: ignore[union-attr]
            "read_only": read_only,
            "problems": await self.problems(live) if read_only else [],
            "model_available": live.opened.available,
            "model_problem": live.opened.problem,
            "state": await self.state(live),
            "gauge": gauge_json(conv.gauge()) if not read_only else None,
        }

    async def cost_json(self, live: Live) -> dict[str, Any]:
        """What the session cost and what its full history would have (SPEC Q4), over the
        whole branch, worked out once per revision: the one read that loads the history
        summarised away, so only `GET /v1/sessions/{id}` answers it, never a turn."""
        branch = live.conv.branch
        key = (branch.leaf_id, branch.revision) if isinstance(branch, Branch) else \
            (live.info.leaf_id, live.info.branch_revision)
        cached = live.cost
        if cached is not None and cached[0] == key:
            return cached[1]
        full = await live.conv.store.load_full_branch(live.session_id)
        # The one bill `contextfold sessions` shows too: same model resolution, same prices
        # (`billing`), with the settings this worker runs the session with and its default.
        metadata = {**live.info.metadata, META_KEY: _meta(live.settings)}
        cost = session_bill(full, metadata, self.models.resolver).to_json()
        live.cost = (key, cost)
        self.resize(live)
        return cost

    async def problems(self, live: Live) -> list[str]:
        """What is damaged in a read-only session (SPEC D2): in the loaded tail, else in the
        summarised history (read whole: damaged sessions are rare and small to report)."""
        found = damage(live.conv.branch)
        if not found:
            found = damage(await live.conv.store.load_full_branch(live.session_id))
        return found or ["marked read-only"]

    def publish_state(self, live: Live) -> None:
        self.hub.publish(live.session_id, "state",
                         state_json(live.conv.state, busy=live.turns > 0))

    def publish_gauge(self, live: Live) -> None:
        if not live.conv.read_only:
            self.hub.publish(live.session_id, "gauge", gauge_json(live.conv.gauge()))

    def _on_event(self, live: Live, event: Event) -> None:
        conv = live.conv
        sid = conv.session_id
        self.hub.publish(sid, event.kind, event_json(event))
        if event.kind.startswith("compaction_") and event.kind != "compaction_started":
            self.hub.publish(sid, "state", state_json(conv.state, busy=live.turns > 0))
            if not conv.read_only:
                self.hub.publish(sid, "gauge", gauge_json(conv.gauge()))
            self.resize(live)  # the branch was folded (or the attempt ended)
        elif event.kind == "compaction_started":
            self.hub.publish(sid, "state", state_json(conv.state))

    # ------------------------------------------------------------------ compaction control

    async def ensure_not_compacting(self, live: Live, operation: str) -> None:
        """SPEC U4 across workers: 409 while this session compacts here or elsewhere."""
        if live.conv.state.compacting or await self.remote_compaction(live):
            reason = f"cannot {operation} while a compaction is running; wait for it to " \
                     "finish or cancel it"
            raise ApiError(409, "compacting", reason, reason=reason)

    async def wait_remote_compaction(self, live: Live, text: str) -> None:
        """SPEC U2/U3 across workers: a send waits for another worker's compaction; if it
        is cancelled or fails, the send is aborted (nothing sent or saved)."""
        if live.conv.state.compacting:
            return  # this worker's: `Conversation.send` waits for it itself
        with self.hub.subscribe(live.session_id) as sub:
            if not await self.remote_compaction(live):
                # No other worker compacts as the turn starts: the turn's answer reports
                # that state, without reading the lease again (a statement per turn fewer,
                # issue 26). A request in between makes it read again (`_get`).
                live.lease = None
                return
            while True:
                event = await sub.get(REMOTE_POLL)
                if event is not None and event.name in ("compaction_cancelled",
                                                        "compaction_failed"):
                    reason = "cancelled" if event.name == "compaction_cancelled" else "failed"
                    raise SendAbortedError(text_message("user", text), reason,
                                           str(event.data.get("reason") or ""))
                if event is not None and event.name.startswith("compaction_") and \
                        event.name != "compaction_started":
                    break
                if event is None and not await self.remote_compaction(live):
                    break
        await live.conv.reload()

    async def cancel(self, live: Live) -> bool:
        """Cancel the session's compaction here, or ask the worker running it (C4)."""
        if live.conv.cancel_compaction():
            return True
        if not await self.remote_compaction(live):
            return False
        self.hub.request_cancel(live.session_id)
        return True

    def _cancel_local(self, session_id: str) -> bool:
        cancelled = False
        for live in self.open_sessions():
            if live.session_id == session_id:
                cancelled = live.conv.cancel_compaction() or cancelled
        return cancelled


def _meta(settings: Settings) -> dict[str, Any]:
    return {k: v for k, v in asdict(settings).items() if v is not None}


def damage(branch: Any) -> list[str]:
    """The problems of a damaged branch, as sentences (none for a healthy one)."""
    return [str(p) for p in branch.problems] if isinstance(branch, DamagedBranch) else []
