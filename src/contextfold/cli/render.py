"""Human (Rich) rendering of command results. JSON output never goes through here.

Everything a user, a model or a tool wrote is shown as written: it is wrapped in `Text`
(never parsed as Rich markup), printed with `soft_wrap` (no inserted line breaks) and passed
through `visible`, which only makes terminal control characters readable (an escape
sequence in a tool result must not repaint your terminal) and expands tabs. Those helpers
(`visible`, `plain`, `say`, `preview`) are in `safe_text`; this module lays out each command's
result with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from .app import console
from .safe_text import (  # noqa: F401  (re-exported; moved out in issue 39)
    _CONTROL,
    PREVIEW_CHARS,
    _args,
    message_text,
    plain,
    preview,
    say,
    visible,
)

if TYPE_CHECKING:
    from ..core.values.messages import Node
    from ..core.values.tree import Branch, DamagedBranch

SHOW_PAGE = 200  # nodes a terminal shows of the tree (the JSON output lists all by default)


def render_import(payload: dict[str, Any], warnings: Sequence[str]) -> None:
    say(("imported", "green"), f" {payload['format']} session → ",
        (payload["session_id"], "bold"),
        f": {count(payload['messages'], 'message')}, "
        f"{count(payload['checkpoints'], 'checkpoint')}")
    if payload["skipped"]:
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(payload["skipped"].items()))
        say(f"skipped (counted, not lost): {skipped}")
    for w in list(warnings)[:10]:
        say(("warning", "yellow"), " ", w)
    if len(warnings) > 10:
        say(f"… {len(warnings) - 10} more warnings (--json lists none; re-import to see them)")


def render_sessions(rows: Sequence[dict[str, Any]]) -> None:
    """The sessions as a table, one line per session at any width: the id and the times are
    never cut (they are what a user copies and compares); the title and the model take what
    is left, cut with an ellipsis, never wrapped mid-word; on a narrow terminal the first
    message's time, then the checkpoint count, then the model, then what was saved, then
    the cost are left out (`--json` has every field). Cost (SPEC Q4): USD as billed and
    saved against sending the full history, "—" where nothing is known (no price for the
    model, or no usage recorded)."""
    from rich import box
    from rich.table import Table

    if not rows:
        say("no sessions yet: try `contextfold import FILE` or `contextfold demo`")
        return

    def widest(header: str, cells: Iterable[str]) -> int:
        return max([len(header), *(len(c) for c in cells)])

    # (header, width, justify, cell) in display order; the optional ones in the order they go.
    columns: list[tuple[str, int, str, Any]] = [
        ("session", widest("session", (r["session_id"] for r in rows)), "left",
         lambda r: Text(r["session_id"], style="bold")),
        ("first message", 16, "left", lambda r: Text(_when(r["first_message_at"]))),
        ("last message", 16, "left", lambda r: Text(_when(r["last_message_at"]))),
        ("msgs", widest("msgs", (f"{r['messages']:,}" for r in rows)), "right",
         lambda r: Text(f"{r['messages']:,}")),
        ("ckpts", widest("ckpts", (f"{r['checkpoints']:,}" for r in rows)), "right",
         lambda r: Text(f"{r['checkpoints']:,}")),
        ("cost", widest("cost", (_billed(r) for r in rows)), "right",
         lambda r: Text(_billed(r))),
        ("saved", widest("saved", (_saved(r) for r in rows)), "right",
         lambda r: Text(_saved(r))),
        ("model", min(28, widest("model", (r["model"] or "unknown" for r in rows))), "left",
         lambda r: plain(r["model"] or "unknown")),
    ]
    gap, least_title = 3, 12  # a space each side of the column rule; the title's minimum
    for optional in ("first message", "ckpts", "model", "saved", "cost"):
        if sum(c[1] + gap for c in columns) + least_title <= console.width:
            break
        columns = [c for c in columns if c[0] != optional]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    for header, width, justify, _ in columns:
        # An exact width: Rich never wraps a cell or shrinks a column sized here.
        table.add_column(header, no_wrap=True, justify=justify, width=width)  # type: ignore[arg-type]
    title_width = max(5, console.width - sum(c[1] + gap for c in columns))
    table.add_column("title", no_wrap=True, overflow="ellipsis", width=title_width)
    for r in rows:
        title = plain((r["title"] or "").replace("\n", " "))  # a cell is one line
        if r["read_only"]:
            title = Text("(read-only) ", style="red").append_text(title)
        table.add_row(*(cell(r) for *_, cell in columns), title)
    console.print(table)
    say((f"times are UTC; {count(len(rows), 'session')}", "dim"))


def usd(amount: float | None) -> str:
    """Dollars for a table cell: cents, or four places under a cent; "—" when unknown."""
    if amount is None:
        return "—"
    size = abs(amount)
    digits = f"{size:,.2f}" if size >= 0.01 or size == 0 else f"{size:.4f}"
    return ("-" if amount < 0 and digits.strip("0.") else "") + "$" + digits


def _charged(cost: dict[str, Any] | None) -> bool:
    """Whether a session's `cost` object prices any reported usage (else its $0 is not a
    bill but the absence of one: an import without usage, the offline model)."""
    if not cost:
        return False
    return any((cost.get(part) or {}).get("requests") for part in ("requests", "summarizer"))


def _billed(row: dict[str, Any]) -> str:
    cost = row.get("cost")
    return usd(cost.get("usd")) if cost and _charged(cost) else "—"


def _saved(row: dict[str, Any]) -> str:
    """The saving (`core.money.costs`' one definition); a negative one is a loss, said so."""
    cost = row.get("cost")
    if not cost or not _charged(cost):
        return "—"
    saved = cost.get("saved_usd")
    return f"lost {usd(-saved)}" if isinstance(saved, (int, float)) and saved < 0 and \
        usd(saved).startswith("-") else usd(saved)


def count(n: int, noun: str) -> str:
    """`1 message`, `2 messages`: a count with its noun in the right number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _when(iso: str) -> str:
    """An ISO time as `YYYY-MM-DD HH:MM` (UTC), for a table row."""
    return iso[:16].replace("T", " ")


def render_compaction(payload: dict[str, Any]) -> None:
    status = payload["status"]
    fitted = ""
    if payload.get("model"):
        fitted = f" for {payload['model']} ({payload['context_window']:,}-token window)"
    if status == "noop":
        say(("nothing to compact", "yellow"), fitted, ": ", payload["reason"] or "")
    elif status == "stale":
        say(("stale", "red"), ": the branch changed while summarising (",
            payload["reason"] or "", "); nothing was committed")
    elif status == "busy":
        say(("busy", "yellow"), ": ", payload["reason"] or "")
    elif status == "preview":  # SPEC M7: nothing was committed
        say(("preview", "cyan"), fitted,
            f": would fold {count(payload['summarized_messages'], 'message')}; "
            f"{payload['kept_messages']} kept raw; ~{payload['tokens_before']:,} → "
            f"~{payload['tokens_after']:,} tokens ({payload['summarizer']}); nothing was "
            "committed")
        _why(payload)
        console.print(plain(payload.get("summary") or ""), soft_wrap=True)
        say(("to commit an edit", "bold"), ": save the summary above to a file, edit it, then "
            f"contextfold compact SESSION --summary-file FILE --base {payload['base']}")
    else:
        say(("compacted", "green"), fitted,
            f": checkpoint {payload['checkpoint_id']} folds "
            f"{count(payload['summarized_messages'], 'message')}; {payload['kept_messages']} "
            f"kept raw; ~{payload['tokens_before']:,} → "
            f"~{payload['tokens_after']:,} tokens ({payload['summarizer']})")
        _why(payload)
        if payload.get("why_none_kept"):
            say(("nothing stayed raw", "yellow"), ": ", payload["why_none_kept"])
        if payload.get("note"):
            say(("note", "yellow"), ": ", payload["note"])


def _why(payload: dict[str, Any]) -> None:
    """Issue 40: the compaction's explanation, in the core's one wording."""
    from ..core.report.explain import CompactionExplanation

    explained = CompactionExplanation.from_json(payload.get("explanation") or {})
    if explained is not None:
        say(("why", "bold"), ": ", explained.line())


def render_projection(payload: dict[str, Any]) -> None:
    """The whole next request: every message in full (the checkpoint summary included)."""
    say(("model", "bold"), f" {payload['model']}: ~{payload['estimated_tokens']:,} tokens of "
        f"{payload['safe_input_limit']:,} safe")
    if payload.get("system"):
        say(("system", "cyan"))
        console.print(plain(_content_text(payload["system"])), soft_wrap=True)
    if payload.get("tools"):
        say(("tools", "cyan"), " " + ", ".join(payload["tools"]))
    for m in payload["messages"]:
        say((m["role"], "cyan"))
        console.print(plain(_content_text(m)), soft_wrap=True)


CONTEXT_LABELS = (("system", "System prompt"), ("tools", "Tools"),
                  ("checkpoint", "Checkpoint summary"), ("pins", "Pins"),
                  ("recall", "Recalled excerpts"), ("messages", "Recent messages (tail)"),
                  ("tool_results", "Tool results"))


def render_context(payload: dict[str, Any]) -> None:
    """The `/context` report (`core.report.breakdown.context_report`): a line per category with
    its share of the safe limit, the free space, the next compaction, the saving."""
    limit = max(1, payload["limit"])
    say(("context", "bold"), f" {payload['model']}: {payload['used']:,} of "
        f"{payload['limit']:,} safe tokens ({payload['used'] / limit:.0%}; window "
        f"{payload['context_window']:,})")
    rows = [(label, payload["parts"].get(key, 0)) for key, label in CONTEXT_LABELS]
    rows.append(("Free", payload["free"]))
    width = max(len(label) for label, _ in rows)
    for label, tokens in rows:
        bar = "█" * round(20 * tokens / limit)
        console.print(f"  {label:<{width}}  {tokens:>9,}  {tokens / limit:>4.0%}  {bar}",
                      highlight=False, markup=False)
    if payload.get("scaled"):
        say("  the history's parts are estimates scaled to the measured total")
    nxt = payload.get("next_compaction") or {}
    if nxt:
        if nxt["tokens_to_go"] == 0:
            when = "due now: the request is past the automatic threshold"
        else:
            pace = [count(n, w) for n, w in ((nxt.get("turns"), "turn"),
                                              (nxt.get("requests"), "model request"))
                    if n is not None]
            when = (f"in {nxt['tokens_to_go']:,} tokens" +
                    (f", about {' or '.join(pace[:1])} at this session's pace" if pace else ""))
        say(("next compaction", "cyan"), f" {when} (automatic threshold "
            f"{nxt['auto_threshold']:,} tokens)")
    saved = payload.get("saved_tokens", 0)
    if payload.get("checkpoints"):
        what = (f"saved {saved:,} tokens per request" if saved >= 0 else
                f"lost: the request is {-saved:,} tokens larger than the whole history")
        say(("compaction", "cyan"), f" {what} (the whole history is "
            f"{payload['full_history_tokens']:,} tokens; "
            f"{count(payload['checkpoints'], 'checkpoint')})")
    else:
        say(("compaction", "cyan"), " none yet (the whole history is "
            f"{payload['full_history_tokens']:,} tokens)")


def _content_text(message: Any) -> str:
    """The readable content of one exported message (OpenAI or Anthropic shape)."""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        return "\n".join(_content_text(block) for block in message)
    if not isinstance(message, dict):
        return str(message)
    out: list[str] = []
    content = message.get("content")
    if content is not None and "role" in message:
        out.append(_content_text(content))
    elif "text" in message:
        out.append(str(message["text"]))
    elif message.get("type") == "tool_use":
        out.append(f"→ {message.get('name')}({_args(message.get('input'))})")
    elif message.get("type") == "tool_result":
        out.append(_content_text(message.get("content") or ""))
    elif message.get("type") in ("image", "image_url", "document", "file"):
        out.append(f"[{message.get('type')}]")
    elif "role" not in message:
        out.append(_args(message))
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        out.append(f"→ {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(o for o in out if o)


def render_tree(info: Any, nodes: Sequence[Node], branch: Branch | DamagedBranch,
                model_view: Branch | DamagedBranch | None = None, *,
                page: int | None = None) -> None:
    """The durable tree, one line a node, then what the model sees.

    `page`: `nodes` are the branch's newest `page` nodes and the forks off them (older
    history was not read), drawn from the page's oldest node. `model_view`: the branch the
    projection is derived from when `branch` is only a page.
    """
    from ..core.values.tree import Branch

    ids = {n.id for n in nodes}
    children: dict[str | None, list[Node]] = {}
    for n in nodes:
        children.setdefault(n.parent_id if n.parent_id in ids else None, []).append(n)
    on_branch = {n.id for n in (branch.nodes if isinstance(branch, Branch) else branch.readable)}
    # Depth-first; a linear run stays at one depth and only a fork indents, so a
    # 900-message session is not 900 levels deep.
    rows: list[tuple[int, Node]] = []
    stack: list[tuple[int, Node]] = [(0, r) for r in reversed(children.get(None, []))]
    while stack:
        depth, node = stack.pop()
        rows.append((depth, node))
        kids = children.get(node.id, [])
        step = 0 if len(kids) == 1 else 1
        stack.extend((depth + step, kid) for kid in reversed(kids))
    if page is not None:
        say(("durable history", "bold"), f": the last {count(len(nodes), 'node')}")
        say(("… older nodes not shown (--last N shows more, --last 0 all)", "dim"))
    else:
        say(("durable history", "bold"), f": {count(len(nodes), 'node')}")
    short = short_ids(ids)
    for depth, node in rows:
        line = Text("  " * depth)
        if node.id not in on_branch:
            line.append("(off branch) ", style="dim")
        line.append(short[node.id] + " ", style="dim")
        line.append_text(preview(node))
        leaf = " ← latest" if node.id == info.leaf_id else ""
        # One terminal line per node: the preview gives way, never the id or the latest mark
        # (the branch's newest node; "leaf" is the store's word, not the reader's).
        line.truncate(max(20, console.width - len(leaf)), overflow="ellipsis")
        if leaf:
            line.append(leaf, style="bold green")
        console.print(line, soft_wrap=True, highlight=False)
    console.print()
    _model_view(model_view or branch)


def short_ids(ids: Iterable[str], least: int = 8, longest: int = 16) -> dict[str, str]:
    """Each id cut to its shortest prefix (at least `least` characters) that no other id in
    `ids` shares, like git's short hashes. Ids imported from Pi share a long common head
    (`<session uuid>-<n>`): where the unique prefix would be longer than `longest`, the id is
    shown as its first `least` characters, `…` and the shortest tail no other id ends with
    (`d703a1a9…-1014`), so a row stays one line on an 80-column terminal."""
    ordered = sorted(set(ids))
    out: dict[str, str] = {}
    for i, node_id in enumerate(ordered):
        need = least
        for other in (ordered[i - 1] if i else None,
                      ordered[i + 1] if i + 1 < len(ordered) else None):
            if other is not None:
                need = max(need, _common(node_id, other) + 1)
        out[node_id] = node_id[:need]
    long = [n for n in ordered if len(out[n]) > longest]
    if long:
        # The shortest tail each long id alone ends with (compared with every id).
        reversed_ids = sorted((n[::-1], n) for n in ordered)
        for k, (rev, node_id) in enumerate(reversed_ids):
            if len(out[node_id]) <= longest:
                continue
            need = 2
            for j in (k - 1, k + 1):
                if 0 <= j < len(reversed_ids):
                    need = max(need, _common(rev, reversed_ids[j][0]) + 1)
            # Start the tail at a separator close by (`-944`, not `44`): it reads as a part.
            near = node_id[-need - 3:-need].rfind("-")
            if near >= 0:
                need += len(node_id[-need - 3:-need]) - near
            tail = node_id[-need:]
            if least + 1 + len(tail) < len(node_id):
                out[node_id] = f"{node_id[:least]}…{tail}"
    return out


def _common(a: str, b: str) -> int:
    """The length of the common prefix of `a` and `b`."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _model_view(branch: Branch | DamagedBranch, last: int = 25) -> None:
    from ..core.values.tree import DamagedBranch
    from ..core.view.projection import project

    say(("what the model sees", "bold"))
    if isinstance(branch, DamagedBranch):
        say(("read-only: damaged history", "red"))
        for p in branch.problems:
            say(str(p))
        return
    p = project(branch)
    if p.summary is not None:
        say(("summary", "magenta"), f" ({len(p.summary.summary):,} chars, "
            f"{len(p.summary.ledger.entries)} ledger ids; `contextfold project` prints it)")
    if len(p.messages) > last:
        say((f"… {len(p.messages) - last} earlier raw messages", "dim"))
    for node in p.messages[-last:]:
        line = preview(node)
        line.truncate(max(20, console.width), overflow="ellipsis")
        console.print(line, soft_wrap=True, highlight=False)
    if p.summary is None and not p.messages:
        say("(empty)")
