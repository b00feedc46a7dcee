"""The offline summariser: a checkpoint summary built from the structure of the history.

No model is called, so it is the default when none is configured and the fallback when the
LLM summariser fails. It is deterministic and fills every section of the profile (S2) from
what the history shows: the user's requests and stated constraints, the tool calls done,
failed and pending with their key arguments, the assistant's conclusions and last stated
plan, errors, Zotero resources and files touched. Every bullet says where it came from
(S3): `(user)`, `(tool)` or `(inferred)` (the assistant's words are inferences).

An update (S4) merges the previous summary's sections with the new content, deduplicates,
and trims the oldest items of the largest sections first until the text fits the summary
budget minus the ledger budget. Trimming is stated in the text, never silent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ..core.estimator import estimate_text
from ..core.ledger import error_line, extract_identifiers
from ..core.messages import (
    AnnotationPart,
    ApprovalPart,
    CollectionPart,
    EpubLocationPart,
    LedgerEntry,
    Message,
    Node,
    PdfPagePart,
    TagPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from ..core.plan import Plan, Profile
from .prompts import CRITICAL, PROGRESS_SECTION, PROGRESS_SUBSECTIONS, parse_sections, sections_for

Count = Callable[[str], int]
OMITTED_NOTE = "earlier items omitted for size; the durable history has them"


class SummaryBudgetTooSmall(ValueError):
    """The summary budget cannot hold even the section headings of the profile."""


# --------------------------------------------------------------------------- text helpers

# Western sentences end with punctuation and a space; CJK ones with 。！？ and no space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])|\n+")
# A constraint: a modal anywhere ("themes must never explode"), or an imperative near the
# start of the sentence ("ok, use rgb values", "no console logs") not said of oneself
# ("i don't think ..." is an opinion, not a rule).
_CONSTRAINT_ANYWHERE = re.compile(
    r"\b(?:must|mustn't|never|always|make sure|ensure|should|shouldn't|not allowed|no more)\b"
    r"|ください|しないで|しないこと|してはいけない|禁止|必ず|だけ|のみ|べき|守って|使って|使わない",
    re.IGNORECASE,
)
_IMPERATIVE = re.compile(
    r"^(?:\W*\w+\W+){0,2}?(?<!\bi )(?<!\bwe )(?<!\bit )(?<!\bthat )(?<!\byou )"
    r"(?:don't|dont|do not|only|keep|use|avoid|stop|prefer|no)\b",
    re.IGNORECASE,
)
_TASK = re.compile(
    r"\b(?:we need|i need|i want|let's|lets|now (?:we|let|i)|next|new task|instead|please|"
    r"can you|could you|create|implement|add|fix|port|write|build|make|find|search|research|"
    r"investigate|read|update|refactor|release|compare|summari[sz]e|collect|look (?:for|into))\b"
    r"|ください|してほしい|したい|調べて|探して|まとめて|作成|実装|教えて",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:I'll|I will|we'll|we will|decided|decision|chose|choose|going with|instead of|"
    r"switch(?:ed)? to|will use|opted|settled on|rather than)\b|決定|にします|採用",
    re.IGNORECASE,
)
_PLAN = re.compile(
    r"\b(?:next|then|will|I'll|we'll|let me|plan|todo|remaining|still need|want me to|"
    r"shall I|should I|would you like|after that)\b|次に|予定|していきます",
    re.IGNORECASE,
)
_NARRATION = re.compile(
    r"^(?:let me|let's|now let|now i'll|i'll (?:check|look|read|run|start)|first,? )",
    re.IGNORECASE,
)
_SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "run_command", "exec"})
_READONLY_SHELL = re.compile(
    r"^\s*(?:cd\s+\S+\s*&&\s*)?(?:grep|rg|find|ls|cat|head|tail|awk|wc|sed\s+-n|echo|pwd|"
    r"which|tree|file|stat|git\s+(?:status|log|diff|show))\b"
)
_STEP_START = re.compile(r"^(?:(?:next|then|after that|afterwards)\b|次に|その後)", re.IGNORECASE)
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")
_NOISE_USER = re.compile(
    r"^\s*(?:/\S*\s*$|\[Request interrupted|<command-|<local-command|Caveat:)", re.IGNORECASE
)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s*)?")
_OMITTED = re.compile(r"^\((\d+) earlier items? omitted for size")
_TIMES = re.compile(r"\s+\(×\d+\)$")

_READ_TOOLS = frozenset({"read", "view", "cat", "open", "read_file", "readfile"})
_WRITE_TOOLS = frozenset({
    "edit", "write", "multiedit", "notebookedit", "str_replace_editor", "apply_patch",
    "create", "write_file", "edit_file", "create_file",
})
_KEY_ARGS = (
    "path", "file_path", "filePath", "notebook_path", "command", "cmd", "query", "q", "url",
    "pattern", "item_key", "itemKey", "attachment_key", "attachmentKey", "collection_key",
    "collectionKey", "key", "doi", "collection", "title", "name", "id",
)
_ITEM_CHARS = 300
_GOAL_CHARS = 500


def _one_line(text: str, limit: int = _ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)


def _sentences(text: str) -> list[str]:
    out = []
    for raw in _SENTENCE_END.split(_CODE_BLOCK.sub("\n", text)):
        s = _NUMBERED.sub("", raw.strip().lstrip("#").strip()).strip("*_ ")
        if len(s) > 2 and not s.startswith("```"):
            out.append(s)
    return out


def _substantial(sentence: str, words: int = 4) -> bool:
    """Long enough to carry meaning: not "Perfect!" or "ok" (CJK has no spaces)."""
    cjk = sum(1 for ch in sentence if ord(ch) >= 0x2E80)
    return len(sentence.split()) >= words or cjk >= 2 * words


@lru_cache(maxsize=1 << 16)
def _norm(item: str) -> str:
    # Cached: sections compare every new item against the ones they hold.
    return " ".join(_TIMES.sub("", item).lower().split())


# --------------------------------------------------------------------------- collected facts


@dataclass
class _Facts:
    """New bullets found in the newly old nodes, by kind, oldest first."""

    goal: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    critical: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_modified: list[str] = field(default_factory=list)


@dataclass
class _Turn:
    request: str | None
    messages: list[Message] = field(default_factory=list)


def _turns(nodes: Sequence[Node]) -> list[_Turn]:
    turns: list[_Turn] = []
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        if msg.role == "user" and msg.text.strip() and not _NOISE_USER.match(msg.text):
            turns.append(_Turn(request=msg.text.strip()))
        elif not turns:
            turns.append(_Turn(request=None))
        turns[-1].messages.append(msg)
    return turns


def _key_argument(call: ToolCallPart) -> str:
    data = call.input
    if isinstance(data, dict):
        for key in _KEY_ARGS:
            value = data.get(key)
            if isinstance(value, (str, int)) and str(value).strip():
                return _one_line(str(value), 160)
        text = json.dumps(data, ensure_ascii=False, default=str)
    else:
        text = str(data)
    return _one_line(text, 120) if text not in ("{}", "") else ""


_SHELL_TAIL = re.compile(r"\s*(?:2>&1|\|\s).*$")


def _call_text(call: ToolCallPart) -> str:
    arg = _key_argument(call)
    if call.name.lower() in _SHELL_TOOLS:
        # `npm run check 2>&1 | grep error` and `... | tail -5` are one check run twice.
        arg = _SHELL_TAIL.sub("", arg) or arg
    return f"{call.name} `{arg}`" if arg else call.name


def _add_counted(items: list[str], item: str) -> None:
    """Append `item`, or count a repeat of the same item as `(×N)` on the first one."""
    key = _norm(item)
    for i, old in enumerate(items):
        if _norm(old) == key:
            m = re.search(r"\(×(\d+)\)$", old)
            n = int(m.group(1)) + 1 if m else 2
            items[i] = f"{_TIMES.sub('', old)} (×{n})"
            return
    items.append(item)


def _final_answer(turn: _Turn) -> str | None:
    """The reply that closed the turn: its last complete assistant text without tool calls.

    A text next to a tool call is narration ("Let me check…"), not a conclusion; a turn
    whose last reply is such narration was left unfinished.
    """
    for msg in reversed(turn.messages):
        if msg.role != "assistant" or msg.status != "complete":
            continue
        if msg.tool_calls:
            return None
        if msg.text.strip():
            return msg.text
    return None


def _collect(nodes: Sequence[Node], profile: Profile) -> _Facts:
    facts = _Facts()
    turns = _turns(nodes)
    _requests(turns, facts)
    _tool_work(nodes, turns, profile, facts)
    _conclusions(turns, profile, facts)
    _resources(nodes, facts)
    return facts


def _requests(turns: list[_Turn], facts: _Facts) -> None:
    first = True
    for turn in turns:
        if turn.request is None:
            continue
        if first:
            facts.goal.append(f"(user) {_one_line(turn.request, _GOAL_CHARS)}")
            first = False
        elif _substantial(turn.request, words=5) and _TASK.search(turn.request):
            facts.goal.append(f"(user) Later request: {_one_line(turn.request)}")
        for sentence in _sentences(turn.request):
            if sentence.endswith(("?", "？")) or _STEP_START.match(sentence):
                continue  # a question or "next, do X" is a request, not a standing rule
            if _CONSTRAINT_ANYWHERE.search(sentence) or _IMPERATIVE.search(sentence):
                facts.constraints.append(f"(user) {_one_line(sentence)}")


def _tool_work(nodes: Sequence[Node], turns: list[_Turn], profile: Profile, f: _Facts) -> None:
    results: dict[str, ToolResultPart] = {}
    rejected: set[str] = set()
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        for result in msg.tool_results:
            results[result.call_id] = result
        for part in msg.parts:
            if isinstance(part, ApprovalPart) and part.state == "rejected":
                rejected.add(part.call_id)
    last_turn = turns[-1] if turns else None
    unresolved: dict[str, str] = {}  # tool name -> its latest failure in the last turn
    file_tools = _READ_TOOLS | _WRITE_TOOLS if profile == "coding" else frozenset()
    inspections = 0
    for turn in turns:
        for msg in turn.messages:
            if msg.role != "assistant":
                continue
            for call in msg.tool_calls:
                text = _call_text(call)
                result = results.get(call.id)
                name = call.name.lower()
                failure = ""
                if call.id in rejected or (result is not None and result.denied):
                    failure = f"(user) Denied: {text}"
                elif result is not None and result.is_error:
                    failure = f"(tool) {text} failed: {error_line(result.output, 200)}"
                elif result is not None:
                    if name in file_tools:
                        # Coding: file reads and writes are listed under Files, not Done.
                        lst = f.files_modified if name in _WRITE_TOOLS else f.files_read
                        lst.append(f"(tool) {_key_argument(call) or call.name}")
                    elif name in _SHELL_TOOLS and _READONLY_SHELL.match(_key_argument(call)):
                        inspections += 1  # grep/ls/cat: how the work was found, not work
                    else:
                        _add_counted(f.done, f"(tool) {text}")
                elif msg.is_closed_without_result:
                    failure = f"(tool) {text} was cut off: the reply ended before a result"
                else:
                    f.in_progress.append(f"(tool) {text}: awaiting its result")
                if failure:
                    _add_counted(f.critical, failure)
                if turn is last_turn:
                    # A later success of the same tool in the last turn resolves a failure.
                    if failure:
                        unresolved[call.name] = failure
                    else:
                        unresolved.pop(call.name, None)
    f.blocked.extend(unresolved.values())
    if inspections:
        f.done.append(f"(tool) plus {inspections} read-only shell inspections (grep, ls, cat, …)")


def _conclusions(turns: list[_Turn], profile: Profile, f: _Facts) -> None:
    for i, turn in enumerate(turns):
        answer = _final_answer(turn)
        is_last = i == len(turns) - 1
        if answer is None:
            if is_last and turn.request is not None:
                f.in_progress.append(f"(user) {_one_line(turn.request)} (no final answer yet)")
                f.next_steps.append(f"(user) Finish: {_one_line(turn.request)}")
            continue
        sentences = [x for x in _sentences(answer) if not _NARRATION.match(x)]
        for sentence in sentences[-2:]:
            if sentence.endswith(("?", "？", ":", "：")) or not _substantial(sentence):
                continue
            item = f"(inferred) {_one_line(sentence)}"
            if _STEP_START.match(sentence):
                continue  # "Next I will …" is a plan: Next Steps takes it
            if _DECISION.search(sentence):
                f.decisions.append(item)
            elif profile == "coding":
                f.done.append(item)
            else:
                f.findings.append(item)
        if is_last:
            plan = [s for s in sentences if _PLAN.search(s)][-5:]
            f.next_steps.extend(f"(inferred) {_one_line(s)}" for s in plan)
            if not plan and turn.request is not None:
                f.next_steps.append(
                    "(inferred) No next step was stated; continue from the latest request: "
                    + _one_line(turn.request)
                )


def _resources(nodes: Sequence[Node], f: _Facts) -> None:
    seen_pdf: dict[str, int] = {}
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        for part in msg.parts:
            if isinstance(part, ZoteroItemPart):
                extra = f" — {part.citation}" if part.citation else ""
                f.resources.append(f"(tool) Item {part.item_key}: {part.title}{extra}".rstrip(": "))
            elif isinstance(part, PdfPagePart):
                key = f" ({part.attachment_key})" if part.attachment_key else ""
                of = f" of {part.total_pages}" if part.total_pages else ""
                item = f"(tool) PDF {part.attachment_name}{key}: last at page {part.page}{of}"
                # The latest page read is what resumption needs: replace the older bullet.
                where = seen_pdf.get(part.attachment_name)
                if where is not None:
                    f.resources[where] = item
                else:
                    seen_pdf[part.attachment_name] = len(f.resources)
                    f.resources.append(item)
            elif isinstance(part, EpubLocationPart):
                name = part.attachment_name or "EPUB"
                f.resources.append(f"(tool) EPUB {name}: section {part.section_index}, "
                                   f"href {part.href}, CFI {part.cfi}")
            elif isinstance(part, AnnotationPart):
                on = f" on item {part.parent_item_key}" if part.parent_item_key else ""
                page = f", page {part.page}" if part.page else ""
                f.resources.append(f"(tool) Annotation {part.annotation_key}{on}{page}")
                quote = f"“{_one_line(part.text, 200)}”" if part.text else ""
                comment = f" — comment: {_one_line(part.comment, 120)}" if part.comment else ""
                if quote or comment:
                    f.findings.append(
                        f"(tool) {quote}{comment} [annotation {part.annotation_key}{on}{page}]"
                    )
            elif isinstance(part, CollectionPart):
                f.resources.append(f"(tool) Collection {part.key}: {part.name}".rstrip(": "))
            elif isinstance(part, TagPart):
                f.resources.append(f"(tool) Tag {part.tag}")
    typed = " ".join(f.resources)
    for entry in extract_identifiers(nodes):
        if entry.kind.startswith("zotero_") and entry.value not in typed:
            label = entry.kind.removeprefix("zotero_").replace("_", " ").capitalize()
            note = f": {_one_line(entry.note, 160)}" if entry.note else ""
            f.resources.append(f"(tool) {label} {entry.value}{note}")


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
    items = [f"(user) Instructions for this summary: {_one_line(text, _GOAL_CHARS)}"]
    known: list[LedgerEntry] = [
        *plan.previous_ledger.entries, *plan.previous_ledger.evicted,
        *extract_identifiers(plan.newly_old),
    ]
    for pattern, kinds, label in _REQUESTED_KINDS:
        if pattern.search(text):
            values = list(dict.fromkeys(e.value for e in known if e.kind in kinds))
            if values:
                items.append(f"(tool) {label} (kept as instructed): " + ", ".join(values))
    return items


# --------------------------------------------------------------------------- sections


@dataclass
class _Section:
    """One rendered list: a section, or one Progress subsection."""

    heading: str  # "## Name" or "### Sub"
    items: list[str] = field(default_factory=list)
    pinned: set[str] = field(default_factory=set)  # normalised items never trimmed
    omitted: int = 0
    box: str = ""  # "[x] " / "[ ] " for Done / In Progress
    parent: bool = False  # a "## Progress" heading whose lists are the subsections

    def add(self, items: Iterable[str], *, pin: bool = False) -> None:
        for item in items:
            key = _norm(item)
            if not key or key in ("(none)", "none"):
                continue
            # A repeated item moves to the end: it is recent again, so trimmed last.
            self.items = [i for i in self.items if _norm(i) != key]
            self.items.append(item)
            if pin:
                self.pinned.add(key)

    def lines(self) -> list[str]:
        out = [self.heading]
        if self.parent:
            return out
        bullets = [f"- {self.box}{item}" for item in self.items]
        if self.omitted:
            # After the pinned lead items (the original goal), before the rest.
            lead = 0
            while lead < len(self.items) and _norm(self.items[lead]) in self.pinned:
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


def _build_sections(plan: Plan, facts: _Facts) -> list[_Section]:
    profile = plan.profile
    names = sections_for(profile)
    progress = PROGRESS_SECTION[profile]
    previous = parse_sections(plan.previous_summary or "", profile)
    sections: dict[str, _Section] = {}
    ordered: list[_Section] = []
    for name in names:
        if name == progress:
            head = _Section(f"## {name}", parent=True)
            ordered.append(head)
            for sub, box in zip(PROGRESS_SUBSECTIONS, ("[x] ", "[ ] ", ""), strict=True):
                sections[f"{name}/{sub}"] = _Section(f"### {sub}", box=box)
                ordered.append(sections[f"{name}/{sub}"])
        else:
            sections[name] = _Section(f"## {name}")
            ordered.append(sections[name])
    # Previous content first: it is older than anything in the newly old nodes.
    for name, body in previous.items():
        parsed, omitted = _parse_previous(body)
        for sub, items in parsed.items():
            target = _previous_target(name, sub, progress, sections)
            target.add(items)
            target.omitted += omitted.get(sub, 0)
    if any(t.request for t in _turns(plan.newly_old)):
        # The conversation moved on since the previous summary: its open items may have
        # been resolved, so they become context rather than claims about the present.
        for sub in ("In Progress", "Blocked"):
            old = sections[f"{progress}/{sub}"]
            sections[CRITICAL].add(_mark_earlier(i, sub) for i in old.items)
            sections[CRITICAL].omitted += old.omitted
            old.items, old.omitted = [], 0
    _place_new(plan, facts, sections, names, progress)
    return ordered


def _mark_earlier(item: str, sub: str) -> str:
    if "[earlier " in item:
        return item
    return f"{item} [earlier {sub.lower()}; may be resolved since]"


def _previous_target(name: str, sub: str, progress: str, sections: dict[str, _Section]) -> _Section:
    if name == progress:
        match = next((s for s in PROGRESS_SUBSECTIONS if s.lower() == sub.lower()), "Done")
        return sections[f"{progress}/{match}"]
    return sections[name]


def _place_new(
    plan: Plan, facts: _Facts, sections: dict[str, _Section], names: tuple[str, ...],
    progress: str,
) -> None:
    goal, constraints, nxt = names[0], names[1], "Next Steps"
    decisions = "Decisions" if plan.profile == "research" else "Key Decisions"
    g = sections[goal]
    new_goals = list(facts.goal)
    if g.items and new_goals and not new_goals[0].startswith("(user) Later request:"):
        # Update mode: the session's goal is the previous one; this is a later request.
        new_goals[0] = new_goals[0].replace("(user) ", "(user) Later request: ", 1)
    g.add(new_goals)
    if not g.items:
        # Never an empty checkpoint: say plainly that no request was seen.
        n = sum(1 for node in plan.newly_old if node.message is not None)
        g.add([f"(inferred) No user request appears in the {n} compacted messages"])
    if g.items:
        # The first request of the whole session is the goal: never trimmed.
        g.pinned.add(_norm(g.items[0]))
    sections[constraints].add(facts.constraints)
    sections[f"{progress}/Done"].add(facts.done)
    sections[f"{progress}/In Progress"].add(facts.in_progress)
    sections[f"{progress}/Blocked"].add(facts.blocked)
    sections[decisions].add(facts.decisions)
    if facts.next_steps:
        # The last stated plan replaces the old one: stale next steps mislead.
        sections[nxt].items = []
        sections[nxt].add(facts.next_steps)
    critical = sections[CRITICAL]
    if plan.profile == "research":
        sections["Findings and Evidence"].add(facts.findings)
        sections["Key Zotero Resources"].add(facts.resources)
    else:
        critical.add(facts.resources)
        sections["Files Modified"].add(facts.files_modified)
        modified = {_norm(i) for i in sections["Files Modified"].items}
        read = sections["Files Read"]
        read.add(facts.files_read)
        read.items = [i for i in read.items if _norm(i) not in modified]
    critical.add(facts.critical)
    critical.add(_instruction_items(plan), pin=True)


# --------------------------------------------------------------------------- fitting


def _render(ordered: list[_Section]) -> str:
    blocks: list[str] = []
    for section in ordered:
        lines = section.lines()
        if section.heading.startswith("## ") and blocks:
            blocks.append("")
        blocks.extend(lines)
    return "\n".join(blocks).strip() + "\n"


def _fit(ordered: list[_Section], budget: int, count: Count) -> str:
    text = _render(ordered)
    if count(text) <= budget:
        return text
    cost = {id(s): [count(f"- {s.box}{i}\n") for i in s.items] for s in ordered}
    note = count(f"- (999 {OMITTED_NOTE})\n")
    frame = count("\n".join(s.heading for s in ordered)) + len(ordered)

    def estimate() -> int:
        lists = sum(sum(c) for c in cost.values())
        return frame + lists + note * sum(1 for s in ordered if s.omitted)

    # Fast pass on per-item costs: drop the oldest unpinned item of the heaviest list.
    while estimate() > budget and _drop_one(ordered, cost):
        pass
    # Exact pass: re-measure the whole text, dropping one more item while it is over.
    text = _render(ordered)
    while count(text) > budget and _drop_one(ordered, cost):
        text = _render(ordered)
    limit = _ITEM_CHARS
    while count(text) > budget and limit > 20:
        # Only pinned items are left: shorten them rather than lose them.
        limit //= 2
        for s in ordered:
            s.items = [_one_line(i, limit) for i in s.items]
        text = _render(ordered)
    if count(text) > budget:
        for s in ordered:
            s.omitted += len(s.items)
            s.items = []
        text = _render(ordered)
    if count(text) > budget:
        raise SummaryBudgetTooSmall(
            f"a summary budget of {budget} tokens cannot hold the section headings "
            f"({count(text)} tokens); use a model with a larger output budget"
        )
    return text


def _drop_one(ordered: list[_Section], cost: dict[int, list[int]]) -> bool:
    """Drop the oldest unpinned item of the list with the most unpinned weight."""
    best: tuple[_Section, int] | None = None
    weight = -1
    for s in ordered:
        costs = cost[id(s)]
        if s.pinned:
            free = [i for i, item in enumerate(s.items) if _norm(item) not in s.pinned]
            w = sum(costs[i] for i in free)
        else:
            free, w = (([0], sum(costs)) if s.items else ([], 0))
        if free and w > weight:
            best, weight = (s, free[0]), w
    if best is None:
        return False
    section, i = best
    del section.items[i]
    del cost[id(section)][i]
    section.omitted += 1
    return True


# --------------------------------------------------------------------------- entry point


def summary_token_budget(plan: Plan) -> int:
    """Tokens the summary text may take: the summary budget minus the ledger's share."""
    return plan.budget.summary_budget - plan.budget.ledger_budget


def summarize_extractive(plan: Plan, count: Count = estimate_text) -> str:
    """A checkpoint summary of `plan` without a model: deterministic, valid, within budget.

    Fills every section of `plan.profile` from the newly old nodes, merged with the
    previous summary in update mode (S4), honouring `plan.instructions` where an
    extractive summariser can (M6): they are recorded in Critical Context, and the
    identifiers they name ("keep all DOIs") are listed there in full.
    """
    budget = summary_token_budget(plan)
    if budget <= 0:
        raise SummaryBudgetTooSmall(
            f"no room for a summary: summary budget {plan.budget.summary_budget} minus "
            f"ledger budget {plan.budget.ledger_budget} is {budget} tokens"
        )
    facts = _collect(plan.newly_old, plan.profile)
    ordered = _build_sections(plan, facts)
    return _fit(ordered, budget, count)
