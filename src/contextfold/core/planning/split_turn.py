"""The context of a split turn (SPEC K6): the request verbatim and what the folded rounds did.

When a compaction's boundary falls inside the current turn, the rounds before it are folded
into the summary like any newly old node; the checkpoint also keeps a small, deterministic
`TurnContext`, whatever summariser wrote the summary: the user message that started the
turn, verbatim, and what the folded rounds tried, what failed and which files they read or
modified. Repeated compactions of one long turn merge into it. It is rendered after the
summary (`projection.render_turn_context`) and fits `turn_context_budget`, taken out of
the summary's budget so the checkpoint as a whole keeps its size.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..models.budget import Budget
from ..text.identifiers import error_line
from ..text.text_estimate import Count, estimate_text
from ..values.messages import Checkpoint, Node, ToolResultPart, TurnContext
from ..values.resources import clip_middle
from ..values.tool_calls import call_text, file_touched
from ..view.projection import render_turn_context
from .boundary import Boundary, turn_starts

# Share of the summary budget the turn context may use when there is one.
TURN_CONTEXT_SHARE = 0.25
# The verbatim request may use at most this share of the turn context's budget.
REQUEST_SHARE = 0.5
# Hard caps before fitting: the most recent items are the ones a continuation needs.
_MAX_TRIED, _MAX_FAILED, _MAX_FILES = 60, 20, 80


def turn_context_budget(budget: Budget) -> int:
    """Tokens the turn context of a split-turn checkpoint may take."""
    return max(1, int(budget.summary_budget * TURN_CONTEXT_SHARE))


def turn_context_tokens(turn: TurnContext | None, count: Count = estimate_text) -> int:
    """What the rendered turn context adds to the checkpoint (0 without one)."""
    return 0 if turn is None else count(render_turn_context(turn)) + 2


def split_turn_context(
    region: Sequence[Node],
    boundary: Boundary,
    previous: Checkpoint | None,
    budget: Budget,
    *,
    in_tool_loop: bool = False,
    count: Count = estimate_text,
) -> TurnContext | None:
    """The turn context for a compaction of `region` at `boundary`, or None.

    There is one when the boundary splits the current turn (K6), or when nothing is kept
    while the turn is still running (`in_tool_loop`: its rounds continue after the
    checkpoint). `previous` is the checkpoint being replaced: its turn context carries over
    when the current turn began before `region` (an earlier split of the same turn).
    """
    if not (boundary.split or (in_tool_loop and not boundary.kept)):
        return None
    cut = len(region) - len(boundary.kept)
    starts = turn_starts(region)
    start = starts[-1] if starts else None
    if start is not None and start >= cut:
        return None  # the current turn is kept whole
    if start is not None:
        msg = region[start].message
        assert msg is not None
        base = TurnContext(request_id=region[start].id, request=msg.text)
        folded = region[start + 1 : cut]
    else:
        base = previous.turn if previous is not None and previous.turn is not None \
            else TurnContext()
        folded = region[:cut]
    return fit_turn_context(fold_rounds(base, folded), turn_context_budget(budget), count)


def fold_rounds(turn: TurnContext, nodes: Sequence[Node]) -> TurnContext:
    """`turn` with the tool work of `nodes` (folded rounds of the same turn) merged in."""
    results: dict[str, ToolResultPart] = {}
    rejected: set[str] = set()
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        results.update((r.call_id, r) for r in msg.tool_results)
        rejected.update(a.call_id for a in msg.approvals if a.state == "rejected")
    tried = dict(turn.tried)
    failed = list(turn.failed)
    files = {"read": list(turn.files_read), "modified": list(turn.files_modified)}
    rounds = turn.rounds_folded
    for node in nodes:
        msg = node.message
        if msg is None or msg.role != "assistant" or not msg.tool_calls:
            continue
        rounds += 1
        for call in msg.tool_calls:
            text = call_text(call)
            result = results.get(call.id)
            if call.id in rejected or (result is not None and result.denied):
                _move_last(failed, f"(user) Denied: {text}")
                continue
            if result is not None and result.is_error:
                _move_last(failed, f"(tool) {text} failed: {error_line(result.output, 200)}")
                continue
            touched = file_touched(call)
            if touched is not None and result is not None:
                kind, path = touched
                _move_last(files[kind], path)
                continue
            # Most recent last: a repeated call moves to the end with its count.
            times = tried.pop(text, 0) + 1
            tried[text] = times
    modified = files["modified"]
    return turn.model_copy(update={
        "rounds_folded": rounds,
        "tried": tuple(tried.items()),
        "failed": tuple(failed),
        "files_read": tuple(p for p in files["read"] if p not in modified),
        "files_modified": tuple(modified),
    })


def _move_last(items: list[str], item: str) -> None:
    if item in items:
        items.remove(item)
    items.append(item)


def fit_turn_context(turn: TurnContext, budget: int, count: Count = estimate_text
                     ) -> TurnContext:
    """`turn` within `budget` tokens: the request clipped head+tail beyond its share, then
    the oldest items dropped (and counted in `omitted`) until it fits."""
    request_room = int(budget * REQUEST_SHARE)
    request, clipped = turn.request, turn.request_clipped
    tokens = count(request)
    if tokens > request_room:
        chars = max(200, int(len(request) * request_room / tokens))
        request = clip_middle(request, chars)
        clipped = True
    lists = {
        "tried": list(turn.tried)[-_MAX_TRIED:],
        "failed": list(turn.failed)[-_MAX_FAILED:],
        "files_read": list(turn.files_read)[-_MAX_FILES:],
        "files_modified": list(turn.files_modified)[-_MAX_FILES:],
    }
    omitted = turn.omitted + sum(
        len(getattr(turn, k)) - len(v) for k, v in lists.items())

    def build() -> TurnContext:
        return turn.model_copy(update={
            "request": request, "request_clipped": clipped, "omitted": omitted,
            **{k: tuple(v) for k, v in lists.items()}})

    fitted = build()
    # Drop the oldest item of the longest list until it fits: files read go first, what
    # failed and files modified last (a continuation needs them most).
    order = ("files_read", "tried", "failed", "files_modified")
    while count(render_turn_context(fitted)) > budget:
        victim = max(order, key=lambda k: (len(lists[k]) * (2 if k == "files_read" else 1)))
        if not lists[victim]:
            break
        lists[victim].pop(0)
        omitted += 1
        fitted = build()
    return fitted
