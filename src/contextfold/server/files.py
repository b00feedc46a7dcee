"""`POST /v1/import` and `POST /v1/replay`: a recorded session file as the raw body.

The body is spooled to a temporary file (the importers read files, streamed and bounded)
within `--max-import-bytes` (413 above it). Import stores the tree as a new session of the
caller's tenant; replay runs offline (extractive summaries) and answers the report, with
the chart as a JSON series or a PNG (the CLI's `replay --plot`).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from .errors import ApiError
from .routes import Manager, Tenant
from .views import iso

router = APIRouter(prefix="/v1")
Format = Literal["auto", "pi", "claude-code", "openai", "anthropic"]


async def _spool(request: Request, limit: int) -> Path:
    """The request body in a temporary file (the caller deletes it)."""
    handle = tempfile.NamedTemporaryFile(prefix="contextfold-upload-", suffix=".jsonl",  # noqa: SIM115 - closed below, kept for the importer
                                         delete=False)
    size = 0
    try:
        with handle:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "payload_too_large",
                                   f"the upload is larger than {limit} bytes",
                                   limit_bytes=limit)
                handle.write(chunk)
        if size == 0:
            raise ApiError(400, "bad_request", "the request body is empty: send the session "
                           "file as the body")
    except BaseException:
        os.unlink(handle.name)
        raise
    return Path(handle.name)


def _import(path: Path, fmt: str, limit: int) -> Any:
    from ..formats import import_file
    from ..formats.errors import ImportFormatError

    try:
        return import_file(path, fmt, max_bytes=limit)
    except ImportFormatError as exc:
        raise ApiError(400, "bad_request", str(exc).replace(str(path), "upload")) from None


@router.post("/import", status_code=201)
async def import_session(request: Request, who: Tenant, sessions: Manager,
                         format: Format = "auto",
                         title: Annotated[str | None, Query(max_length=500)] = None
                         ) -> dict[str, Any]:
    """Store a Pi / Claude Code / OpenAI / Anthropic session file as a new session."""
    limit = sessions.config.max_import_bytes
    path = await _spool(request, limit)
    try:
        result = await asyncio.to_thread(_import, path, format, limit)
    finally:
        os.unlink(path)
    store = sessions.store.for_tenant(who)
    info = await store.import_tree(result.nodes, result.leaf_id, title=title,
                                   metadata={"imported_format": result.format})
    return {"session_id": info.id, "format": result.format, "nodes": len(result.nodes),
            "messages": result.messages, "leaf_id": info.leaf_id,
            "created_at": iso(info.created_at), "skipped": dict(result.skipped),
            "warnings": list(result.warnings)[:100]}


@router.post("/replay", response_model=None)
async def replay(request: Request, _who: Tenant, sessions: Manager,
                 format: Format = "auto",
                 model: Annotated[str | None, Query(max_length=200)] = None,
                 context_window: Annotated[int | None, Query(ge=256)] = None,
                 overhead: Annotated[int | None, Query(ge=0)] = None,
                 chart: Literal["json", "png"] = "json") -> Any:
    """Replay a recorded session as if contextfold had managed its context: the report
    (the CLI's `replay --json`) with the chart's series, or the chart as PNG."""
    limit = sessions.config.max_import_bytes
    path = await _spool(request, limit)
    try:
        result = await asyncio.to_thread(_import, path, format, limit)
    finally:
        os.unlink(path)
    report = await asyncio.to_thread(_replay, result, model, context_window, overhead)
    if chart == "png":
        png = await asyncio.to_thread(_png, report)
        return Response(png, media_type="image/png")
    return {**report.to_json(), "series": series(report)}


def _replay(result: Any, model: str | None, window: int | None, overhead: int | None) -> Any:
    from ..cli.replay_cmds import _estimate_accuracy, _overhead_from_usage, extractive
    from ..cli.session_cmds import resolve_model
    from ..replay import active_messages, budget_after_overhead, recorded_start, replay_messages

    messages = active_messages(result.nodes, result.leaf_id)
    start = recorded_start(result.nodes, result.leaf_id)
    recorded = next((m.model or (m.usage.model if m.usage else None)
                     for _, m in reversed(messages)
                     if m.role == "assistant" and (m.model or m.usage)), None)
    try:
        capacity, budget = resolve_model(model, recorded, window)
    except LookupError:
        raise ApiError(400, "unknown_model", f"model {model!r} is not in the catalog") from None
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    source, fixed = "overhead", overhead
    if fixed is None:
        fixed = _overhead_from_usage(messages, start, capacity)
        source = "first recorded usage" if fixed is not None else "none"
    try:
        budget_after_overhead(budget, fixed or 0)
    except ValueError as exc:
        raise ApiError(400, "bad_request", f"{exc}; give a larger context_window or a "
                       "smaller overhead") from None
    report = replay_messages(messages, capacity, budget, extractive, start=start,
                             overhead=fixed or 0)
    report.overhead_source = source
    report.estimate = _estimate_accuracy(messages, capacity)
    return report


def series(report: Any) -> dict[str, Any]:
    """The chart as data: request size per request (ours and the recorded agent's), the
    limits, and each compaction (what the PNG draws)."""
    return {
        "requests": [{"request": r.index, "estimated_tokens": r.estimated_tokens,
                      "recorded_tokens": r.recorded_tokens} for r in report.requests],
        "safe_input_limit": report.safe_input_limit,
        "context_window": report.context_window,
        "compactions": [{"before_request": c.before_request, "kept_tokens": c.kept_tokens,
                         "tail_budget": c.tail_budget, "tokens_before": c.tokens_before,
                         "tokens_after": c.tokens_after} for c in report.compactions],
    }


def _png(report: Any) -> bytes:
    try:
        from ..cli.plot import plot_replay
    except ImportError:  # pragma: no cover
        raise ApiError(501, "not_available", "the chart needs matplotlib on the server "
                       "(pip install 'contextfold[plot]'); ask for chart=json") from None
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "replay.png"
        try:
            plot_replay(report, out, title=f"replay on {report.model}")
        except RuntimeError as exc:
            raise ApiError(501, "not_available", f"{exc}; ask for chart=json") from None
        return out.read_bytes()
