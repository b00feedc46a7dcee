"""The session endpoints of docs/service.md, except the turns (see `turns.py`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field, field_validator

from .._net import checked_base_url
from ..core.values.held import Held, text_bytes
from ..core.values.tree import Branch
from .deps import Body, Manager, Tenant
from .errors import ApiError
from .live import Settings
from .routes_page import list_fields
from .sessions import damage
from .sse import KEEPALIVE, sse, sse_response
from .views import projection_json, tree_json

router = APIRouter(prefix="/v1")


class CreateSession(Body):
    model: str | None = Field(None, min_length=1, max_length=200)
    context_window: int | None = Field(None, ge=256, le=100_000_000)
    system: str | None = None
    base_url: str | None = Field(None, min_length=1, max_length=2000)
    title: str | None = Field(None, max_length=500)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_base_url(value)


class Compact(Body):
    instructions: str | None = None
    wait: bool = True
    # SPEC M7: commit this text as the summary (an edited preview), conditional on `base`.
    summary: str | None = Field(None, max_length=2_000_000)
    base: str | None = Field(None, max_length=400)


class Fork(Body):
    node_id: str = Field(..., min_length=1)
    title: str | None = Field(None, max_length=500)


class SwitchModel(Body):
    model: str = Field(..., min_length=1, max_length=200)
    context_window: int | None = Field(None, ge=256, le=100_000_000)


@router.post("/sessions", status_code=201)
async def create_session(body: CreateSession, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """Create a session (201): model (default: the server's), window, system prompt,
    base_url (only one on the server's allowlist), title."""
    limit = sessions.config.max_message_chars
    if body.system is not None and len(body.system) > limit:
        raise ApiError(413, "message_too_large", f"the system prompt is longer than {limit} "
                       "characters")
    settings = Settings(model=body.model, context_window=body.context_window,
                        system=body.system, base_url=body.base_url)
    live = await sessions.create(who, settings, body.title)
    return await sessions.session_json(live)


@router.get("/sessions")
async def list_sessions(who: Tenant, sessions: Manager,
                        limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
                        before: Annotated[str | None, Query(min_length=1,
                                                            max_length=200)] = None
                        ) -> dict[str, Any]:
    """This tenant's sessions (other tenants' are never listed, SPEC W1): every one, oldest
    first; or with `limit`, a page of the newest first, `before` the session id that ended
    the previous page (its `next_before`). A page is one index range of the store, so a
    database a fleet filled for months answers it as fast as an empty one."""
    from .views import iso

    store = sessions.store.for_tenant(who)
    if limit is None:
        if before is not None:
            raise ApiError(400, "invalid_request", "`before` pages a listing: give `limit` too")
        infos, more = await store.list_sessions(), False  # damage on load counts (SPEC D2)
    else:
        after = None
        if before is not None:
            from ..store.refs import resolve_session_id

            # 404 for a session that is not this tenant's, as for any other read.
            info = await store.get_session(await resolve_session_id(store, before))
            after = (info.created_at, info.id)
        page = await store.sessions_newest(limit=limit + 1, before=after, check_damage=True)
        infos, more = page[:limit], len(page) > limit
    out = []
    for info in infos:
        out.append({"session_id": info.id, "title": info.title,
                    "created_at": iso(info.created_at),
                    "last_active_at": iso(info.updated_at),
                    "model": await listed_model(store, info, sessions.held),
                    "leaf_id": info.leaf_id, "revision": info.branch_revision,
                    "read_only": info.read_only, **await list_fields(store, info)})
    if limit is None:
        return {"sessions": out}
    return {"sessions": out, "next_before": out[-1]["session_id"] if more else None}


async def listed_model(store: Any, info: Any, held: Held) -> str | None:
    """The session's model as every face lists it (`billing.billed_model`, which
    `contextfold sessions` shows too): the model it is set to, else the one its branch
    recorded (an imported session's), else the one its metadata names. Read from the branch
    once per revision and model setting (a switch moves no revision), not on every listing:
    remembered in the worker's cache (SPEC Y14)."""
    from ..billing import SERVICE_KEY, billed_model

    key = ("model", info.tenant_id, info.id)
    version = (info.branch_revision, repr(info.metadata.get(SERVICE_KEY)))
    known = held.get(key)
    if known is not None and known[0] == version:
        return known[1]  # type: ignore[no-any-return]
    model = billed_model(await store.load_full_branch(info.id), info.metadata)
    held.put(key, (version, model), text_bytes(key) + text_bytes((version, model)))
    return model


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """One session: settings, leaf, revision, read_only, state, gauge and cost (SPEC Q4)."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    return {**await sessions.session_json(live), "cost": await sessions.cost_json(live)}


@router.get("/sessions/{session_id}/tree")
async def get_tree(session_id: str, who: Tenant, sessions: Manager,
                   limit: Annotated[int | None, Query(ge=1, le=100_000)] = None
                   ) -> dict[str, Any]:
    """Every node of the session's tree (all branches), each with `on_branch`."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    store = live.conv.store
    if limit is None:
        nodes = await store.load_tree(session_id)
        branch = await store.load_full_branch(session_id)
    else:
        nodes = await store.load_tree_page(session_id, limit=limit)
        branch = await store.load_branch_page(session_id, limit=limit)
    shown = branch.nodes if isinstance(branch, Branch) else branch.readable
    leaf = shown[-1].id if shown else None
    tree = tree_json(session_id, leaf, nodes, {n.id for n in shown})
    # SPEC D2: what can be read safely, and that it is only part of it.
    read_only = live.read_only or not isinstance(branch, Branch)
    problems = (damage(branch) or await sessions.problems(live)) if read_only else []
    return {**tree, "read_only": read_only, "problems": problems}


@router.get("/sessions/{session_id}/projection")
async def get_projection(session_id: str, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """What the next request holds, its estimate and the safe limit."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    conv = live.conv
    if live.read_only:
        raise ApiError(409, "read_only", "the session's stored history is damaged; it can be "
                       "read (tree) but not projected", problems=await sessions.problems(live))
    return projection_json(session_id, conv.projection(), conv.estimate(),
                           conv.budget.safe_input_limit, conv.capacity.context_window)


@router.post("/sessions/{session_id}/compact")
async def compact(session_id: str, who: Tenant, sessions: Manager,
                  body: Compact | None = None, preview: bool = False) -> Any:
    """Compact now (SPEC M1-M6); 409 while one runs (U4). `wait: false` answers 202.
    SPEC M7: `?preview=1` answers the checkpoint that would be committed, committing
    nothing; a body `summary` commits that text (409 `stale_preview` when `base` is old)."""
    from .views import outcome_json

    body = body or Compact()
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    await sessions.ensure_not_compacting(live, "compact")
    if live.turns > 0:
        raise ApiError(409, "busy", "cannot compact while a turn is running")
    if preview:  # SPEC M7: what would be committed; nothing is written
        if body.summary is not None:
            raise ApiError(400, "bad_request", "preview shows the summariser's text and "
                           "'summary' commits yours: give one of them")
        outcome = await live.conv.preview_compaction(body.instructions)
        return {"outcome": outcome_json(outcome, "manual"), "preview": True,
                "session": await sessions.session_json(live)}
    if body.summary is not None:  # SPEC M7: the user's edit, a new checkpoint
        outcome = await live.conv.commit_summary(body.summary, base=body.base)
        return {"outcome": outcome_json(outcome, "manual"), "cancelled": False,
                "session": await sessions.session_json(live)}
    if body.base is not None:
        raise ApiError(400, "bad_request", "'base' goes with 'summary' (the preview the "
                       "edit is of)")
    task = asyncio.create_task(live.conv.compact(body.instructions))
    if not body.wait:
        await asyncio.sleep(0)  # let it start, so the state says compacting
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return JSONResponse({"state": await sessions.state(live)}, status_code=202)
    outcome = await asyncio.shield(task)
    cancelled = outcome.status == "noop" and outcome.code == "cancelled"
    return {"outcome": outcome_json(outcome, "manual"), "cancelled": cancelled,
            "session": await sessions.session_json(live)}


@router.post("/sessions/{session_id}/cancel")
async def cancel(session_id: str, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """Cancel a running compaction (C4: nothing of it is written); false if none ran."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    cancelled = await sessions.cancel(live)
    if cancelled:
        await asyncio.sleep(0)  # let the cancellation land before reporting the state
    return {"cancelled": cancelled, "state": await sessions.state(live)}


@router.post("/sessions/{session_id}/fork", status_code=201)
async def fork(session_id: str, body: Fork, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """A new session whose branch ends at assistant node `node_id` (SPEC O3)."""
    from ..store.refs import resolve_node_id

    live = await sessions.get(who, session_id)
    await sessions.ensure_not_compacting(live, "fork")
    if live.turns > 0:
        raise ApiError(409, "busy", "cannot fork while a turn is running")
    node_id = await resolve_node_id(live.conv.store, live.session_id, body.node_id)
    forked = await sessions.fork(live, node_id, body.title)
    return await sessions.session_json(forked)


@router.post("/sessions/{session_id}/model")
async def switch_model(session_id: str, body: SwitchModel, who: Tenant,
                       sessions: Manager) -> dict[str, Any]:
    """Use another model from the next request on (its window applies at once, P2)."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    await sessions.ensure_not_compacting(live, "switch the model")
    if live.turns > 0:
        raise ApiError(409, "busy", "cannot switch the model while a turn is running")
    await sessions.switch_model(live, body.model, body.context_window)
    return await sessions.session_json(live)


@router.get("/sessions/{session_id}/events")
async def events(session_id: str, who: Tenant, sessions: Manager) -> Any:
    """Server-sent events of the session, from any worker (docs/service.md)."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    keepalive = sessions.config.keepalive_seconds

    async def body() -> Any:
        with sessions.hub.subscribe(session_id) as sub:
            yield sse("state", await sessions.state(live))
            if not live.conv.read_only:
                from .views import gauge_json

                yield sse("gauge", gauge_json(live.conv.gauge()))
            while True:
                event = await sub.get(keepalive)
                yield KEEPALIVE if event is None else sse(event.name, event.data)

    return sse_response(body())


__all__ = ["router"]
