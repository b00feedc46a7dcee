"""`POST /v1/import` and `POST /v1/replay`: a recorded session file as the raw body.

The body is spooled to a temporary file (the importers read files, streamed and bounded)
within `--max-import-bytes` (413 above it). Import stores the tree as a new session of the
caller's tenant; replay runs offline (extractive summaries) and answers the report, with
the chart as a JSON series or a PNG (the CLI's `replay --plot`).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ..replay import replay_series
from ..store import DuplicateNodeError
from .deps import Manager, Tenant
from .errors import ApiError
from .live import META_KEY
from .models import ServerModels
from .views import iso

router = APIRouter(prefix="/v1")
Format = Literal["auto", "pi", "claude-code", "openai", "anthropic"]


UPLOAD_NAME = "upload.jsonl"  # what messages, warnings and derived ids call the file


async def _spool(request: Request, limit: int) -> Path:
    """The request body in a temporary file named `UPLOAD_NAME` in a directory of its own
    (the caller removes both with `_discard`): importers name their file in errors,
    warnings and some node ids, and the server's temporary path is nobody's business."""
    folder = Path(tempfile.mkdtemp(prefix="contextfold-upload-"))
    path = folder / UPLOAD_NAME
    size = 0
    try:
        with path.open("wb") as handle:
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
        _discard(path)
        raise
    return path


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _import(path: Path, fmt: str, limit: int) -> Any:
    from ..formats import import_file
    from ..formats.errors import ImportFormatError

    try:
        return import_file(path, fmt, max_bytes=limit)
    except ImportFormatError as exc:
        raise ApiError(400, "bad_request", str(exc).replace(str(path), UPLOAD_NAME)) from None


async def _uploaded(request: Request, fmt: str, limit: int) -> Any:
    """The session file of the request body, read by its importer from a temporary copy
    that is gone again, whatever happened, when this returns."""
    path = await _spool(request, limit)
    try:
        return await asyncio.to_thread(_import, path, fmt, limit)
    finally:
        _discard(path)


@router.post("/import", status_code=201)
async def import_session(request: Request, who: Tenant, sessions: Manager,
                         format: Format = "auto",
                         title: Annotated[str | None, Query(max_length=500)] = None,
                         filename: Annotated[str | None, Query(max_length=500)] = None
                         ) -> dict[str, Any]:
    """Store a Pi / Claude Code / OpenAI / Anthropic session file as a new session. It keeps
    its recorded model (sized for it; if this server cannot serve that model, the session
    says so and still shows, compacts and replays) and its title: `title`, else the one the
    recording gives itself, else the uploaded file's `filename`."""
    from ..core.sizing.resolver import recorded_model
    from ..core.values.tree import build_branch

    result = await _uploaded(request, format, sessions.config.max_import_bytes)
    recorded = recorded_model(build_branch(result.nodes, result.leaf_id))
    model = sessions.models.resolve(None, None, recorded).name
    store = sessions.store.for_tenant(who)
    try:
        info = await store.import_tree(result.nodes, result.leaf_id,
                                       title=title or result.title or filename,
                                       metadata={"imported_format": result.format,
                                                 META_KEY: {"model": model}})
    except DuplicateNodeError as exc:
        if not exc.holders:
            raise
        # The store names the sessions holding that history (tenant-scoped): the page
        # offers to open the first, the sentence names them all.
        sid, title = exc.holders[0]
        raise ApiError(400, "bad_request", str(exc), session_id=sid, session_title=title,
                       **exc.facts()) from exc
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
    result = await _uploaded(request, format, sessions.config.max_import_bytes)
    report = await asyncio.to_thread(_replay, sessions.models, result, model, context_window,
                                     overhead)
    if chart == "png":
        png = await asyncio.to_thread(_png, report)
        return Response(png, media_type="image/png")
    return {**report.to_json(), "series": _with_checkpoints(report, replay_series(report))}


def _with_checkpoints(report: Any, series: dict[str, Any]) -> dict[str, Any]:
    """Each compaction of the chart with the checkpoint it wrote (summary, ledger), so a
    mark on the page's chart opens it; a replay stores nothing, this is the only copy."""
    from .views import node_json

    written = {n.id: n for n in report.chain if n.checkpoint is not None}
    for mark, record in zip(series["compactions"], report.compactions, strict=True):
        node = written.get(record.checkpoint_id)
        mark.update(trigger=record.trigger, summarized_messages=record.summarized_messages,
                    kept_messages=record.kept_messages,
                    checkpoint=node_json(node) if node is not None else None,
                    # Issue 40: why it ran and what it saved (`core.report.explain`), as replay has
                    # it
                    explanation=record.explanation.to_json()
                    if record.explanation is not None else None)
    return series


def _replay(models: ServerModels, result: Any, model: str | None, window: int | None,
            overhead: int | None) -> Any:
    from ..core.sizing.fit import OverheadTooLargeError
    from ..core.sizing.resolver import WindowTooSmallError
    from ..replay import recorded_session, replay_overhead, replay_recorded
    from ..summarize.extractive import smallest_summary_tokens

    session = recorded_session(result.nodes, result.leaf_id)
    resolved = models.resolve(model, window, session.model)
    try:  # replay compacts a whole recorded history at once: the guaranteed window
        models.resolver.check_window(resolved, smallest_summary_tokens(guaranteed=True))
    except WindowTooSmallError as exc:  # a sentence for a person; the field is in the facts
        raise ApiError(400, "bad_request", exc.explain("context window"),
                       smallest_window=exc.smallest) from None
    capacity, budget = resolved.capacity, resolved.budget
    try:
        fixed = replay_overhead(session, capacity, budget, overhead, "overhead", resolved)
    except OverheadTooLargeError as exc:
        raise ApiError(400, "bad_request", exc.public_message(), **exc.facts()) from None
    return replay_recorded(session, capacity, budget, fixed)


def _png(report: Any) -> bytes:
    from ..replay_plot import replay_png

    try:
        return replay_png(report, title=f"replay on {report.model}")
    except RuntimeError as exc:
        raise ApiError(501, "not_available", f"{exc}; ask for chart=json") from None
