"""Sections of the offline summary: the previous summary merged with the new facts.

Builds the profile's sections (S2) in order. In update mode (S4) the previous summary's
bullets come first, as they are older; repeated items move to the end (recent again);
items left open by a previous summary become context once the conversation has moved on;
the user's instructions are recorded in Critical Context with the identifiers they ask
to keep (M6). What does not fit is counted in an "omitted" bullet, never dropped silently.

One list (`Section`: its items, what was omitted, a previous summary's lists read back) is
in `extractive_list`; this module decides which lists a summary has and what goes in each.
"""

from __future__ import annotations

import re

from ..core.planning.plan import Plan, Profile
from ..core.values.messages import LedgerEntry
from ..core.values.tool_calls import one_line
from .extractive_facts import GOAL_CHARS, LATER_REQUEST, NO_STATED_STEP, Facts, norm_item
from .extractive_list import (  # noqa: F401  (re-exported; moved out in issue 39)
    _BULLET,
    _OMITTED,
    _SHORTEST,
    _STATEMENTS_OMITTED,
    _WORDS,
    CLIPPED,
    NAMED_NODES,
    OMITTED_NOTE,
    RECALL_PREFIX,
    STATEMENTS_NOTE,
    Section,
    _parse_body,
    _parse_previous,
    _similar,
    _without_near_duplicates,
    _word_set,
    clip_item,
)
from .prompts import CRITICAL, PROGRESS_SECTION, PROGRESS_SUBSECTIONS, parse_sections, sections_for

# --------------------------------------------------------------------------- instructions

_REQUESTED_KINDS: tuple[tuple[re.Pattern[str], tuple[str, ...], str], ...] = (
    (re.compile(r"\bdois?\b", re.I), ("doi",), "DOIs"),
    (re.compile(r"\b(?:urls?|links?)\b", re.I), ("url",), "URLs"),
    (re.compile(r"\b(?:paths?|files?)\b", re.I), ("path",), "File paths"),
    (re.compile(r"\b(?:zotero|keys?|items?|citations?)\b", re.I),
     ("zotero_item", "zotero_attachment", "zotero_annotation", "zotero_collection", "zotero_key"),
     "Zotero keys"),
    (re.compile(r"\b(?:commits?|hash(?:es)?)\b", re.I), ("commit",), "Commits"),
    (re.compile(r"\berrors?\b", re.I), ("tool_error",), "Errors"),
)


def _instruction_items(plan: Plan) -> list[str]:
    """M6: record the user's instructions, and list the identifiers they ask to keep."""
    text = (plan.instructions or "").strip()
    if not text:
        return []
    items = [f"(user) Instructions for this summary: {one_line(text, GOAL_CHARS)}"]
    known: list[LedgerEntry] = [
        *plan.previous_ledger.entries, *plan.previous_ledger.evicted,
        *plan.identifiers(),
    ]
    for pattern, kinds, label in _REQUESTED_KINDS:
        if pattern.search(text):
            values = list(dict.fromkeys(e.value for e in known if e.kind in kinds))
            if values:
                items.append(f"(tool) {label} (kept as instructed): " + ", ".join(values))
    return items


# --------------------------------------------------------------------------- sections

# What a resumed agent can least afford to lose is kept longest when the summary must be
# trimmed: the goal and the user's constraints (users complain most about lost
# instructions), then the decisions, then what is open now; what was done, found or read
# goes first (the durable history has it, the ledger keeps its identifiers).
RANKS: dict[str, int] = {
    "Research Goal": 4, "Goal": 4,
    "User Requirements and Constraints": 4, "Constraints & Preferences": 4,
    "Decisions": 3, "Key Decisions": 3,
    "Critical Context": 2, "Next Steps": 2, "In Progress": 2, "Blocked": 2,
    "Findings and Evidence": 1, "Key Zotero Resources": 1, "Files Modified": 1,
    "Done": 0, "Files Read": 0,
}
# The share of the budget each list draws on (SPEC S9): the goal and the user's words, the
# decisions, the next steps, the critical context, what was found, and the progress (done,
# under way, blocked, files read).
KINDS: dict[str, str] = {
    "Research Goal": "user", "Goal": "user",
    "User Requirements and Constraints": "user", "Constraints & Preferences": "user",
    "Decisions": "decisions", "Key Decisions": "decisions",
    "Next Steps": "next",
    "Critical Context": "critical",
    "Findings and Evidence": "findings", "Key Zotero Resources": "findings",
    "Files Modified": "findings",
    "Done": "progress", "In Progress": "progress", "Blocked": "progress",
    "Files Read": "progress",
}


def user_section(profile: Profile) -> str:
    """The section that carries the user's statements (SPEC S8) in `profile`."""
    return sections_for(profile)[1]


def empty_sections(profile: Profile) -> tuple[list[Section], dict[str, Section]]:
    """Every section of `profile` in order, empty; and the fillable ones by name."""
    progress = PROGRESS_SECTION[profile]
    sections: dict[str, Section] = {}
    ordered: list[Section] = []
    for name in sections_for(profile):
        if name == progress:
            ordered.append(Section(f"## {name}", parent=True))
            for sub, box in zip(PROGRESS_SUBSECTIONS, ("[x] ", "[ ] ", ""), strict=True):
                sections[f"{name}/{sub}"] = Section(f"### {sub}", box=box,
                                                    rank=RANKS.get(sub, 0),
                                                    kind=KINDS.get(sub, "progress"))
                ordered.append(sections[f"{name}/{sub}"])
        else:
            sections[name] = Section(f"## {name}", rank=RANKS.get(name, 0),
                                     kind=KINDS.get(name, "progress"),
                                     statements=name == user_section(profile))
            ordered.append(sections[name])
    return ordered, sections


def load_summary(sections: dict[str, Section], text: str, profile: Profile,
                 sources: dict[str, str] | None = None) -> None:
    """Add the bullets of a summary `text` (and its omitted counts) to `sections`.

    A summary written for another profile (the session changed, SPEC S10) is read by its
    sections' equivalents. `sources`: the node each known statement came from (normalised
    statement -> node id), so a statement carried on can still be clipped with its node."""
    progress = PROGRESS_SECTION[profile]
    for name, body in parse_sections(text, profile, aliases=True).items():
        parsed, omitted, nodes = _parse_body(body)
        for sub, items in parsed.items():
            target = _previous_target(name, sub, progress, sections)
            if target.statements:
                items = items[::-1]  # shown newest first, held oldest first
            for item in items if sources else ():
                node = sources.get(norm_item(item.removeprefix("(user) ")))
                if node:
                    target.sources[norm_item(item)] = node
            target.add(items)
            target.omitted += omitted.get(sub, 0)
            if sub == "":
                # The note lists them most telling first: keep that order as their rank.
                for i, n in enumerate(nodes[::-1]):
                    if n not in target.omitted_nodes:
                        target.omitted_nodes.append(n)
                        target.omitted_rank[n] = 2.0 - i / 1e4


def statement_sources(plan: Plan) -> dict[str, str]:
    """The node each statement the previous check carried came from (normalised text ->
    node id): a statement carried on in the summary text can still be named by its node."""
    check = plan.previous_details.get("check") or {}
    return {norm_item(str(c["text"])): str(c["node_id"])
            for c in check.get("carried") or () if c.get("kind") == "statement"
            and c.get("text") and c.get("node_id")}


def build_sections(plan: Plan, facts: Facts) -> list[Section]:
    """Every section of `plan.profile` in order: the previous summary's items, then `facts`."""
    profile = plan.profile
    progress = PROGRESS_SECTION[profile]
    ordered, sections = empty_sections(profile)
    # Previous content first: it is older than anything in the newly old nodes.
    load_summary(sections, plan.previous_summary or "", profile, statement_sources(plan))
    critical = sections[CRITICAL]
    critical.items = [i for i in critical.items if not i.startswith(RECALL_PREFIX)]
    if facts.new_request:
        # Items already carried once as "earlier" context are not carried again: after two
        # requests they are history (still searchable there), and carrying them on would
        # fill Critical Context, which outranks the current turn's own findings.
        critical = sections[CRITICAL]
        stale = [i for i in critical.items if "[earlier " in i]
        critical.items = [i for i in critical.items if "[earlier " not in i]
        critical.omitted += len(stale)
        # The conversation moved on since the previous summary: its open items may have
        # been resolved, so they become context rather than claims about the present.
        for sub in ("In Progress", "Blocked"):
            old = sections[f"{progress}/{sub}"]
            sections[CRITICAL].add(_mark_earlier(i, sub) for i in old.items)
            sections[CRITICAL].omitted += old.omitted
            old.items, old.omitted = [], 0
    _place_new(plan, facts, sections, sections_for(profile), progress)
    return ordered


def _original_and_latest(goal: Section) -> list[str]:
    """The Goal section: the original goal and the latest restatement, not every request;
    returns the earlier restatements it lets go.

    Every later request stays in the durable history (and its work under Progress), and
    in the user section as what the user said (S8); the goal a resumed agent needs is
    where the session started and where it is now.
    """
    later = [i for i in goal.items if i.startswith(LATER_REQUEST)]
    goal.items = [i for i in goal.items if not i.startswith(LATER_REQUEST)] + later[-1:]
    return later[:-1]


_FINISH = "(user) Finish: "


def _replace_corrected(decisions: Section, correction: str) -> None:
    """A user's correction replaces the decision it corrects (most shared words; else the
    latest the user stated), which stays in the durable history."""
    words = set(_WORDS.findall(correction.lower()))
    users = [i for i in decisions.items if i.startswith("(user) ")]
    if users:
        best = max(reversed(users), key=lambda i: len(words & set(_WORDS.findall(i.lower()))))
        decisions.items.remove(best)
    decisions.add([correction])


def _mark_earlier(item: str, sub: str, since: str = "resolved") -> str:
    if "[earlier " in item:
        return item
    return f"{item} [earlier {sub.lower()}; may be {since} since]"


def _previous_target(name: str, sub: str, progress: str, sections: dict[str, Section]) -> Section:
    if name == progress:
        match = next((s for s in PROGRESS_SUBSECTIONS if s.lower() == sub.lower()), "Done")
        return sections[f"{progress}/{match}"]
    return sections[name]


def _place_new(
    plan: Plan, facts: Facts, sections: dict[str, Section], names: tuple[str, ...],
    progress: str,
) -> None:
    goal, constraints, nxt = names[0], names[1], "Next Steps"
    decisions = "Decisions" if plan.profile == "research" else "Key Decisions"
    g = sections[goal]
    new_goals = list(facts.goal)
    statements = list(facts.statements)
    if g.items and new_goals and not new_goals[0].startswith(LATER_REQUEST):
        # Update mode: the session's goal is the previous one; this is a later request.
        new_goals[0] = new_goals[0].replace("(user) ", LATER_REQUEST, 1)
    elif new_goals and statements:
        # The session's task: the goal carries it, clipped with its node when it must be.
        task_node = statements[0][1]
        if task_node:
            g.sources[norm_item(new_goals[0])] = task_node
        statements = statements[1:]
    g.add(new_goals)
    user = sections[constraints]
    _original_and_latest(g)  # the requests it lets go are statements in `user` (S8)
    if not g.items:
        # Never an empty checkpoint: say plainly that no request was seen.
        n = sum(1 for node in plan.newly_old if node.message is not None)
        g.add([f"(inferred) No user request appears in the {n} compacted messages"])
    if g.items:
        # The first request of the whole session is the goal: never trimmed.
        g.pinned.add(norm_item(g.items[0]))
    for item, node_id in statements:
        user.add_statement(item, node_id)
    sections[f"{progress}/Done"].add(facts.done)
    sections[f"{progress}/In Progress"].add(facts.in_progress)
    sections[f"{progress}/Blocked"].add(facts.blocked)
    sections[decisions].add(facts.decisions)
    # The user's own decisions outrank the assistant's; a correction replaces the decision
    # it corrects (the one it shares most words with, else the latest the user stated).
    sections[decisions].add(facts.user_decisions)
    for correction in facts.corrections:
        _replace_corrected(sections[decisions], correction)
    if facts.next_steps or facts.user_next_steps:
        # The last stated plan replaces the old one: stale next steps mislead as plans,
        # but may still matter, so they stay as context, marked as possibly done.
        # Next steps the user set stay until the user sets new ones.
        old = sections[nxt]
        keep_user = [] if facts.user_next_steps else [
            i for i in old.items if i.startswith("(user) ") and not i.startswith(_FINISH)]
        fresh = {norm_item(n) for n in facts.next_steps} | {norm_item(i) for i in keep_user}
        # A placeholder ("continue from the latest request", "Finish: …") names an older
        # request: carried on as context it would contradict the new Next Steps.
        superseded = [i for i in old.items if norm_item(i) not in fresh
                      and not i.startswith((NO_STATED_STEP, _FINISH))]
        sections[CRITICAL].add(_mark_earlier(i, "next step", "done") for i in superseded)
        sections[CRITICAL].omitted += old.omitted
        old.items, old.omitted = [], 0
        old.add(keep_user)
        old.add(facts.user_next_steps)
        old.add(facts.next_steps)
    critical = sections[CRITICAL]
    if plan.profile == "research":
        sections["Findings and Evidence"].add(facts.findings)
        sections["Key Zotero Resources"].add(facts.resources)
    elif plan.profile == "general":  # no files, no library: what was found is context
        sections[f"{progress}/Done"].add(facts.findings)
        critical.add(facts.resources)
        critical.add(f"(tool) {f.removeprefix('(tool) ')} (modified)" for f in facts.files_modified)
    else:
        critical.add(facts.resources)
        sections["Files Modified"].add(facts.files_modified)
        modified = {norm_item(i) for i in sections["Files Modified"].items}
        read = sections["Files Read"]
        read.add(facts.files_read)
        read.items = [i for i in read.items if norm_item(i) not in modified]
    critical.add(facts.critical)
    critical.add(_instruction_items(plan), pin=True)
