"""Human (Rich) rendering of command results. JSON output never goes through here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

from ..core.messages import Message, Node
from ..core.projection import project
from ..core.tree import Branch, DamagedBranch
from .app import console

MAX_TREE_ROWS = 400
SHOW_PAGE = 200  # nodes a terminal shows of the tree (the JSON output lists all by default)


def _preview(node: Node, width: int = 70) -> str:
    msg = node.message
    event = node.pin_event
    if event is not None:  # SPEC N2
        what = event.text.replace("\n", " ")[:width] if event.action == "pin" else event.pin_id
        return f"[bold cyan]{event.action.upper()}[/] {escape(what)}"
    if msg is None:
        cp = node.checkpoint
        assert cp is not None
        return f"[bold magenta]CHECKPOINT[/] by {cp.summarizer}, {cp.tokens_before} tokens before"
    text = msg.text.replace("\n", " ").strip()
    if not text and msg.tool_calls:
        text = ", ".join(f"{c.name}()" for c in msg.tool_calls)
    if not text and msg.tool_results:
        r = msg.tool_results[0]
        text = ("[error] " if r.is_error else "") + r.output.replace("\n", " ")
    text = text[:width] + ("…" if len(text) > width else "")
    return f"[cyan]{msg.role}[/] {text}"


def render_import(payload: dict[str, Any], warnings: Sequence[str]) -> None:
    console.print(f"[green]imported[/] {payload['format']} session → [bold]{payload['session_id']}"
                  f"[/]: {payload['messages']} messages, {payload['checkpoints']} checkpoints")
    if payload["skipped"]:
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(payload["skipped"].items()))
        console.print(f"skipped (counted, not lost): {skipped}")
    for w in list(warnings)[:10]:
        console.print(f"[yellow]warning[/] {w}")


def render_compaction(payload: dict[str, Any]) -> None:
    status = payload["status"]
    if status == "noop":
        console.print(f"[yellow]nothing to compact[/]: {payload['reason']}")
    elif status == "stale":
        console.print(f"[red]stale[/]: the branch changed while summarising ({payload['reason']});"
                      " nothing was committed")
    else:
        console.print(
            f"[green]compacted[/]: checkpoint {payload['checkpoint_id']} folds "
            f"{payload['summarized_messages']} messages; {payload['kept_messages']} kept raw; "
            f"~{payload['tokens_before']} → ~{payload['tokens_after']} tokens "
            f"({payload['summarizer']})"
        )


def render_projection(payload: dict[str, Any]) -> None:
    console.print(f"model {payload['model']}: ~{payload['estimated_tokens']} tokens of "
                  f"{payload['safe_input_limit']} safe")
    for m in payload["messages"]:
        content = m.get("content")
        text = content if isinstance(content, str) else str(content)
        console.print(f"[cyan]{m['role']}[/] {(text or '')[:160]}")


def render_tree(info: Any, nodes: Sequence[Node], branch: Branch | DamagedBranch,
                model_view: Branch | DamagedBranch | None = None, *, page: bool = False) -> None:
    """Durable tree on the left, the model's view on the right.

    `page`: `nodes` are a page of the tree (the branch's last nodes and the forks off
    them), drawn from the page's oldest node. `model_view`: the branch the projection is
    derived from when `branch` is only a page.
    """
    children: dict[str | None, list[Node]] = {}
    ids = {n.id for n in nodes}
    for n in nodes:
        children.setdefault(n.parent_id if n.parent_id in ids else None, []).append(n)
    on_branch = {n.id for n in (branch.nodes if isinstance(branch, Branch) else branch.readable)}
    title = (f"durable history: the last {len(nodes)} nodes (--last to see more)" if page
             else f"durable history: {len(nodes)} nodes")
    tree = Tree(title)
    shown = 0
    # Iterative walk: a linear run is drawn flat (siblings under one parent), and only a
    # fork opens a nested level, so a 900-message session is not 900 levels deep.
    stack: list[tuple[Tree, Node]] = [(tree, r) for r in reversed(children.get(None, []))]
    while stack and shown < MAX_TREE_ROWS:
        parent, node = stack.pop()
        shown += 1
        mark = "" if node.id in on_branch else "[dim](off branch)[/] "
        leaf = " [bold green]← leaf[/]" if node.id == info.leaf_id else ""
        added = parent.add(f"{mark}{_preview(node)}{leaf}")
        kids = children.get(node.id, [])
        holder = parent if len(kids) == 1 else added
        stack.extend((holder, kid) for kid in reversed(kids))
    if shown >= MAX_TREE_ROWS:
        tree.add(f"[dim]… {len(nodes) - shown} more nodes (use --json for all)[/]")
    table = Table.grid(padding=(0, 2))
    table.add_row(tree, _model_view(model_view or branch))
    console.print(table)


def _model_view(branch: Branch | DamagedBranch) -> Panel:
    if isinstance(branch, DamagedBranch):
        problems = "\n".join(str(p) for p in branch.problems)
        return Panel(f"[red]read-only: damaged history[/]\n{problems}", title="model view")
    p = project(branch)
    lines = []
    if p.summary is not None:
        lines.append(f"[magenta]summary[/] ({len(p.summary.summary)} chars, "
                     f"{len(p.summary.ledger.entries)} ledger ids)")
    for node in p.messages[-25:]:
        assert isinstance(node.payload, Message)
        lines.append(_preview(node, 50))
    if len(p.messages) > 25:
        lines.insert(1 if p.summary else 0, f"[dim]… {len(p.messages) - 25} earlier raw[/]")
    return Panel("\n".join(lines) or "(empty)", title="what the model sees")
