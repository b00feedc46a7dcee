"""Sections of the offline summary: the previous summary merged with the new facts.

Builds the profile's sections (S2) in order. In update mode (S4) the previous summary's
bullets come first, as they are older; repeated items move to the end (recent again);
items left open by a previous summary become context once the conversation has moved on;
the user's instructions are recorded in Critical Context with the identifiers they ask
to keep (M6). What does not fit is counted in an "omitted" bullet, never dropped silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.messages import LedgerEntry
from ..core.plan import Plan, Profile
from ..core.tool_calls import one_line
from .extractive_facts import GOAL_CHARS, LATER_REQUEST, NO_STATED_STEP, Facts, norm_item
from .prompts import CRITICAL, PROGRESS_SECTION, PROGRESS_SUBSECTIONS, parse_sections, sections_for

OMITTED_NOTE = "earlier items omitted for size; the durable history has them"
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s*)?")
_OMITTED = re.compile(r"^\((\d+) earlier items? omitted for size")


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


@dataclass
class Section:
    """One rendered list: a section, or one Progress subsection."""

    heading: str  # "## Name" or "### Sub"
    items: list[str] = field(default_factory=list)
    pinned: set[str] = field(default_factory=set)  # normalised items never trimmed
    omitted: int = 0
    box: str = ""  # "[x] " / "[ ] " for Done / In Progress
    parent: bool = False  # a "## Progress" heading whose lists are the subsections
    rank: int = 0  # trim priority: lists of a lower rank are trimmed first (`RANKS`)

    def add(self, items: Iterable[str], *, pin: bool = False) -> None:
        """Append `items` (skipping empty ones); `pin` keeps them from being trimmed."""
        # A repeated item moves to the end: it is recent again, so trimmed last. Done for
        # the whole batch at once (one pass over the held items, not one per new item:
        # issue 26), with the same result as adding one by one: the held items no new one
        # repeats, then the new ones in the order of their last occurrence.
        new: dict[str, str] = {}
        for item in items:
            key = norm_item(item)
            if not key or key in ("(none)", "none"):
                continue
            new.pop(key, None)
            new[key] = item
            if pin:
                self.pinned.add(key)
        if new:
            self.items = [i for i in self.items if norm_item(i) not in new]
            self.items.extend(new.values())

    def lines(self) -> list[str]:
        """The heading and its bullets, with the count of trimmed items, or "(none)"."""
        out = [self.heading]
        if self.parent:
            return out
        bullets = [f"- {self.box}{item}" for item in self.items]
        if self.omitted:
            # After the pinned lead items (the original goal), before the rest.
            lead = 0
            while lead < len(self.items) and norm_item(self.items[lead]) in self.pinned:
                lead += 1
            bullets.insert(lead, f"- ({self.omitted} {OMITTED_NOTE})")
        out += bullets
        if not self.items and not self.omitted:
            out.append("- (none)")
        return out


def _parse_previous(body: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Bullets of one previous section body, by subsection ("" = the section itself)."""
    items: dict[str, list[str]] = {"": []}
    omitted: dict[str, int] = {}
    current = ""
    for raw in body.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("###"):
            current = line.lstrip("#").strip()
            items.setdefault(current, [])
            continue
        m = _BULLET.match(line)
        text = line[m.end():] if m else line
        om = _OMITTED.match(text)
        if om:
            omitted[current] = omitted.get(current, 0) + int(om.group(1))
        elif m or not items[current]:
            items[current].append(text)
        else:
            items[current][-1] += " " + text  # a wrapped continuation line
    return items, omitted


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
                                                    rank=RANKS.get(sub, 0))
                ordered.append(sections[f"{name}/{sub}"])
        else:
            sections[name] = Section(f"## {name}", rank=RANKS.get(name, 0))
            ordered.append(sections[name])
    return ordered, sections


def load_summary(sections: dict[str, Section], text: str, profile: Profile) -> None:
    """Add the bullets of a summary `text` (and its omitted counts) to `sections`."""
    progress = PROGRESS_SECTION[profile]
    for name, body in parse_sections(text, profile).items():
        parsed, omitted = _parse_previous(body)
        for sub, items in parsed.items():
            target = _previous_target(name, sub, progress, sections)
            target.add(items)
            target.omitted += omitted.get(sub, 0)


def build_sections(plan: Plan, facts: Facts) -> list[Section]:
    """Every section of `plan.profile` in order: the previous summary's items, then `facts`."""
    profile = plan.profile
    progress = PROGRESS_SECTION[profile]
    ordered, sections = empty_sections(profile)
    # Previous content first: it is older than anything in the newly old nodes.
    load_summary(sections, plan.previous_summary or "", profile)
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


def _original_and_latest(goal: Section) -> None:
    """The Goal section: the original goal and the latest restatement, not every request.

    Every later request stays in the durable history (and its work under Progress); the
    goal a resumed agent needs is where the session started and where it is now.
    """
    later = [i for i in goal.items if i.startswith(LATER_REQUEST)]
    goal.items = [i for i in goal.items if not i.startswith(LATER_REQUEST)] + later[-1:]


_FINISH = "(user) Finish: "
_WORDS = re.compile(r"\w+")


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
    if g.items and new_goals and not new_goals[0].startswith(LATER_REQUEST):
        # Update mode: the session's goal is the previous one; this is a later request.
        new_goals[0] = new_goals[0].replace("(user) ", LATER_REQUEST, 1)
    g.add(new_goals)
    _original_and_latest(g)
    if not g.items:
        # Never an empty checkpoint: say plainly that no request was seen.
        n = sum(1 for node in plan.newly_old if node.message is not None)
        g.add([f"(inferred) No user request appears in the {n} compacted messages"])
    if g.items:
        # The first request of the whole session is the goal: never trimmed.
        g.pinned.add(norm_item(g.items[0]))
    sections[constraints].add(facts.constraints)
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
    else:
        critical.add(facts.resources)
        sections["Files Modified"].add(facts.files_modified)
        modified = {norm_item(i) for i in sections["Files Modified"].items}
        read = sections["Files Read"]
        read.add(facts.files_read)
        read.items = [i for i in read.items if norm_item(i) not in modified]
    critical.add(facts.critical)
    critical.add(_instruction_items(plan), pin=True)
