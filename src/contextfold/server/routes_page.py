"""The endpoints the web page needs besides the core API (docs/web.md): search over the
branch, pins, rename and archive, export, the context breakdown and the server's settings.

Each translates: recall is the store's index (SPEC L1, L4), pins are the runtime's pin
events (N1-N2), the breakdown is `core.report.breakdown` over the conversation's own estimate, the
export is `formats.request.export_session` (built on `core.render.export`). Rename and archive
write only session metadata: history is append-only and is never deleted here.
"""

from __future__ import annotations

import json
import os
import weakref
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import Field

from ..store.values import SessionInfo
from ..titles import PAGE_KEY
from .deps import Body, Manager, Tenant
from .views import iso, node_json

router = APIRouter(prefix="/v1")
SEARCH_LIMIT = 50


# ------------------------------------------------------------------ the session list


def face_of(metadata: dict[str, Any]) -> str:
    """Which face wrote the session: import, proxy, service, else the CLI or library."""
    if metadata.get("imported_format"):
        return "import"
    if isinstance(metadata.get("proxy"), dict) or metadata.get("proxy_stats"):
        return "proxy"
    if metadata.get("service"):
        return "service"
    return "cli"


def page_meta(metadata: dict[str, Any]) -> dict[str, Any]:
    raw = metadata.get(PAGE_KEY)
    return raw if isinstance(raw, dict) else {}


def shown_title(info: SessionInfo) -> str:
    """The title every face shows (`contextfold.titles`: renamed, stored, "Untitled")."""
    from ..titles import shown_title as shown

    return shown(info.title, info.metadata)


async def last_message_at(store: Any, info: SessionInfo) -> str | None:
    """When the branch's last message was written (not a checkpoint's or a pin's time);
    read from the branch's newest nodes only."""
    if info.leaf_id is None:
        return None
    page = await store.load_branch_page(info.id, limit=16)
    nodes = getattr(page, "nodes", None) or getattr(page, "readable", ())
    messages = [n for n in nodes if n.message is not None]
    if messages:
        return iso(messages[-1].created_at)
    return iso(nodes[-1].created_at) if nodes else None


async def list_fields(store: Any, info: SessionInfo) -> dict[str, Any]:
    """What the page's session list shows besides the core fields."""
    return {"title": shown_title(info), "face": face_of(info.metadata),
            "archived": bool(page_meta(info.metadata).get("archived")),
            "last_message_at": await last_message_at(store, info)}


class SessionPatch(Body):
    title: str | None = Field(None, max_length=500)
    archived: bool | None = None


@router.patch("/sessions/{session_id}")
async def patch_session(session_id: str, body: SessionPatch, who: Tenant,
                        sessions: Manager) -> dict[str, Any]:
    """Rename (`title`; "" goes back to the stored title) or archive (`archived`: hidden
    from the page's list, nothing deleted) a session."""
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    store = sessions.store.for_tenant(who)
    meta = dict(page_meta((await store.get_session(session_id)).metadata))
    if body.title is not None:
        meta["title"] = body.title.strip()
    if body.archived is not None:
        meta["archived"] = body.archived
    info = await store.update_session_metadata(session_id, {PAGE_KEY: meta})
    live.info = info
    return {"session_id": session_id, **await list_fields(store, info)}


# ------------------------------------------------------------------ search (SPEC L1, L4)


@router.get("/sessions/{session_id}/search")
async def search(session_id: str, who: Tenant, sessions: Manager,
                 q: Annotated[str, Query(min_length=1, max_length=500)],
                 limit: Annotated[int, Query(ge=1, le=SEARCH_LIMIT)] = 20) -> dict[str, Any]:
    """Full-text search over this session's own branch (compacted parts included), best
    first: the recall index the model's `history_search` uses."""
    from ..runtime.recall import hit_dict

    # 404 for another tenant's session (W1); the whole id, whatever prefix was given
    session_id = (await sessions.get(who, session_id)).session_id
    store = sessions.store.for_tenant(who)
    hits = await store.search_history(session_id, q, limit=limit)
    return {"session_id": session_id, "query": q,
            "hits": [{**hit_dict(h), "created_at": iso(h.node.created_at)} for h in hits]}


# ------------------------------------------------------------------ pins (SPEC N1, N2)


class NewPin(Body):
    text: str | None = Field(None, min_length=1, max_length=20_000)
    node_id: str | None = Field(None, min_length=1)


@router.post("/sessions/{session_id}/pins", status_code=201)
async def pin(session_id: str, body: NewPin, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """Pin a text, or a message of the branch (`node_id`), verbatim (refused over the pin
    budget, with the numbers)."""
    live = await sessions.get(who, session_id)
    await sessions.ensure_not_compacting(live, "pin")
    sessions.ensure_writable(live, "pin")
    node_id = body.node_id
    if node_id is not None:  # a unique prefix of the node's id is enough
        from ..store.refs import resolve_node_id

        node_id = await resolve_node_id(live.conv.store, live.session_id, node_id)
    made = await live.conv.pin(body.text, node_id=node_id)
    sessions.publish_gauge(live)
    return {"pin": made.model_dump(mode="json", exclude_none=True),
            "pins": [p.model_dump(mode="json", exclude_none=True) for p in live.conv.pins()]}


@router.delete("/sessions/{session_id}/pins/{pin_id}")
async def unpin(session_id: str, pin_id: str, who: Tenant,
                sessions: Manager) -> dict[str, Any]:
    """Remove an active pin (an unpin event: the pin stays in the history)."""
    live = await sessions.get(who, session_id)
    await sessions.ensure_not_compacting(live, "unpin")
    sessions.ensure_writable(live, "unpin")
    await live.conv.unpin(pin_id)
    sessions.publish_gauge(live)
    return {"pins": [p.model_dump(mode="json", exclude_none=True) for p in live.conv.pins()]}


# ------------------------------------------------------------------ context breakdown

# conversation -> ((leaf, revision, capacity), whole-history tokens, checkpoints)
_FULL: weakref.WeakKeyDictionary[Any, tuple[Any, int, int]] = weakref.WeakKeyDictionary()


@router.get("/sessions/{session_id}/context")
async def context(session_id: str, who: Tenant, sessions: Manager) -> dict[str, Any]:
    """The next request by category (system, tools, checkpoint, pins, messages, tool
    results) and the free space below the safe input limit; adds up to the gauge."""
    from ..core.report.breakdown import context_report, history_figures
    from ..core.values.tree import Branch

    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    sessions.ensure_writable(live, "show the context")
    conv = live.conv
    sizer = conv.sizer
    estimate = conv.estimate()
    # The whole branch is read once per leaf and model, not on every refresh of the page.
    key = (getattr(conv.branch, "leaf_id", None), getattr(conv.branch, "revision", None),
           conv.capacity)
    known = _FULL.get(conv)
    if known is None or known[0] != key:
        branch = await conv.store.load_full_branch(session_id)
        nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
        full, checkpoints = history_figures(nodes, sizer.costs, system=sizer.system,
                                            tools=sizer.tool_json)
        known = (key, full, checkpoints)
        _FULL[conv] = known
    _, full, checkpoints = known
    return {"session_id": session_id, "model": conv.capacity.model,
            **context_report(conv.projection(), sizer.costs, system=sizer.system,
                             tools=sizer.tool_json, used=estimate.tokens,
                             method=estimate.method, limit=conv.budget.safe_input_limit,
                             threshold=conv.budget.auto_threshold,
                             context_window=conv.capacity.context_window,
                             full_history=full, checkpoints=checkpoints)}


# ------------------------------------------------------------------ export


@router.get("/sessions/{session_id}/export")
async def export(session_id: str, who: Tenant, sessions: Manager,
                 format: Literal["openai", "anthropic"] = "openai") -> Response:
    """A JSON download: the session, its whole durable branch, and the next request as the
    provider would get it (`core.render.export`: always a list the provider accepts)."""
    from ..core.values.tree import Branch
    from ..formats.request import export_session

    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the whole id, whatever prefix was given
    conv = live.conv
    branch = await conv.store.load_full_branch(session_id)
    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    document: dict[str, Any] = {
        "contextfold_export": 1, "session": await sessions.session_json(live),
        "branch": [node_json(n) for n in nodes],
    }
    if not live.read_only:
        document["request"] = {"format": format, "model": conv.capacity.model,
                               **export_session(conv.projection(), format=format,
                                                system=conv.system)}
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in session_id)
    return Response(json.dumps(document, ensure_ascii=False, indent=1),
                    media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="session-{name}.json"'})


# ------------------------------------------------------------------ settings


@router.get("/settings")
async def settings(who: Tenant, sessions: Manager) -> dict[str, Any]:
    """What the server runs with: the default model and window, the summariser, and the
    providers whose key it holds (names of the variables, never a value)."""
    from ..providers.factory import PROVIDERS

    config = sessions.config
    resolved = sessions.models.resolve(None, None)
    summarizer = sessions.summarizer
    keys = [{"provider": p.name, "label": p.label, "env_var": p.env_var}
            for p in PROVIDERS.values() if p.env_var and os.environ.get(p.env_var)]
    return {"tenant": who, "auth": config.auth, "default_model": resolved.name,
            "default_context_window": resolved.capacity.context_window,
            "safe_input_limit": resolved.budget.safe_input_limit,
            "summarizer": (config.summarizer_model or getattr(summarizer, "name", None)
                           or "extractive (offline)"),
            "allowed_models": list(config.allow_models) or None,
            "provider_keys": keys}


__all__ = ["router"]
