"""Facts for the offline summariser: what the newly old part of a history shows.

Reads the nodes a compaction folds away and sorts what they show into bullets by kind
(`Facts`): the user's requests and stated constraints, the tool calls done, failed and
pending with their key arguments, the assistant's conclusions and last stated plan, Zotero
resources and files touched. Every bullet says where it came from (S3): `(user)`, `(tool)`
or `(inferred)` (the assistant's words are inferences). Deterministic: no model is called.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.planning.plan import Profile
from ..core.text.constraints import STEP_START, sentences
from ..core.text.identifiers import error_line, extract_identifiers
from ..core.values.held import TEXT_MEMO_BYTES, held_memo
from ..core.values.messages import (
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
from ..core.values.tool_calls import ITEM_CHARS, one_line
from ..core.values.tool_calls import READ_TOOLS as _READ_TOOLS
from ..core.values.tool_calls import SHELL_TOOLS as _SHELL_TOOLS
from ..core.values.tool_calls import WRITE_TOOLS as _WRITE_TOOLS
from ..core.values.tool_calls import call_text as _call_text
from ..core.values.tool_calls import key_argument as _key_argument
from ..core.values.tree import message_nodes
from .user_statements import (
    clean_prose,
    clip_words,
    is_noise,
    user_statements,
)
from .user_words import clip_statement, injected, pasted_errors, split_typed, statement_of

# --------------------------------------------------------------------------- text helpers

_DECISION = re.compile(
    r"\b(?:I'll|I will|we'll|we will|decided|decision|chose|choose|going with|"
    r"switch(?:ed)? to|will use|opted|settled on)\b|決定|にします|採用",
    re.IGNORECASE,
)
# "rather than" / "instead of" choose only when someone does: "the pattern is deliberate
# rather than accidental" in a drafted paragraph is prose, not a decision.
_CHOICE = re.compile(r"\b(?:rather than|instead of)\b", re.IGNORECASE)
_CHOOSER = re.compile(r"\b(?:I|we|let's|let us|use|using|go with)\b", re.IGNORECASE)


def _is_decision(sentence: str) -> bool:
    return bool(_DECISION.search(sentence)) or bool(
        _CHOICE.search(sentence) and _CHOOSER.search(sentence))
_PLAN = re.compile(
    r"\b(?:next|then|will|I'll|we'll|let me|plan|todo|remaining|still need|want me to|"
    r"shall I|should I|would you like|after that)\b|次に|予定|していきます",
    re.IGNORECASE,
)
_NARRATION = re.compile(
    r"^(?:let me|let's|now let|now i'll|i'll (?:check|look|read|run|start)|first,? )",
    re.IGNORECASE,
)
_READONLY_SHELL = re.compile(
    r"^\s*(?:cd\s+\S+\s*&&\s*)?(?:grep|rg|find|ls|cat|head|tail|awk|wc|sed\s+-n|echo|pwd|"
    r"which|tree|file|stat|git\s+(?:status|log|diff|show))\b"
)
# A command the user ran themselves (Pi's `!command`, `formats.pi.bash_execution_text`):
# it reaches the model as a user message, but only the command is the user's; its output is
# data (fetched pages, files) and never a goal or a constraint, whatever it says. The whole
# rest of the message is output: a ``` inside it cannot end it early.
_USER_COMMAND = re.compile(r"^Ran `([^`\n]*)`\n(?:```|\(no output\))")
_TIMES = re.compile(r"\s+\(×\d+\)$")

GOAL_CHARS = 500
# The session's task (its first statement) is carried whole up to this length by default
# (a fifth of the summary's room, `task_chars`), then clipped head and tail with its node id
# (SPEC S8).
TASK_CHARS = 1_500


def task_chars(summary_tokens: int) -> int:
    """How long the session's task may stay whole in a summary of `summary_tokens`: a fifth
    of its room (about three characters a token), at least 400 characters."""
    return max(400, summary_tokens * 3 // 5)
LATER_REQUEST = "(user) Later request: "  # a request after the goal: a restatement
# The Next Steps line when the last answer stated no plan: it points at the request of its
# time, so once a newer plan replaces it, it says nothing true about the present.
NO_STATED_STEP = "(inferred) No next step was stated; continue from the latest request: "
# Marks what the user pasted (an error they saw), never what they said (SPEC S8).
PASTED = "(pasted)"




def _substantial(sentence: str, words: int = 4) -> bool:
    """Long enough to carry meaning: not "Perfect!" or "ok" (CJK has no spaces)."""
    if len(sentence.split()) >= words:
        return True
    return not sentence.isascii() and sum(1 for ch in sentence if ord(ch) >= 0x2E80) >= 2 * words


@held_memo(TEXT_MEMO_BYTES)
def norm_item(item: str) -> str:
    """The form two bullets are compared in: case, spacing and a `(×N)` count ignored."""
    # Cached: sections compare every new item against the ones they hold.
    return " ".join(_TIMES.sub("", item).lower().split())


# --------------------------------------------------------------------------- collected facts


@dataclass
class Facts:
    """New bullets found in the newly old nodes, by kind, oldest first."""

    goal: list[str] = field(default_factory=list)
    # The user's statements (SPEC S8): (item, node id), oldest first; the first is also
    # `goal[0]`.
    statements: list[tuple[str, str | None]] = field(default_factory=list)
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
    # What the user decided and asked next, verbatim (`user_statements`), and the user's
    # corrections: each replaces the earlier decision it corrects.
    user_decisions: list[str] = field(default_factory=list)
    user_next_steps: list[str] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)
    # Whether a user request was seen: the conversation moved on since the last summary.
    new_request: bool = False


@dataclass
class _Turn:
    request: str | None
    messages: list[Message] = field(default_factory=list)
    node_id: str | None = None  # the request's node


def user_command(msg: Message) -> str | None:
    """The command of a user-run shell command's message (Pi `!command`), else None."""
    if msg.role != "user":
        return None
    m = _USER_COMMAND.match(msg.text)
    return m.group(1) if m else None


def is_request(msg: Message) -> bool:
    """A message the user typed themselves (not a slash command, a notice an agent put in
    the user role, or a command's output) with something typed in it: where requests,
    statements, decisions and next steps come from (SPEC S8)."""
    return (msg.role == "user" and bool(msg.text.strip()) and not injected(msg.text)
            and bool(split_typed(msg.text).typed))


def _turns(nodes: Sequence[Node]) -> list[_Turn]:
    turns: list[_Turn] = []
    for node, msg in message_nodes(nodes):
        if is_request(msg):
            turns.append(_Turn(request=msg.text.strip(), node_id=node.id))
        elif not turns:
            turns.append(_Turn(request=None))
        turns[-1].messages.append(msg)
    return turns


_SHELL_READ = re.compile(
    r"^\s*(?:cd\s+\S+\s*&&\s*)?(?:cat|head|tail|less|more|sed\s+-n\s+\S+)\s+(.*)$")
_PATHISH = re.compile(r"^[\w.~/-]*[/.][\w.~/-]*$")


def shell_read_paths(call: ToolCallPart) -> list[str]:
    """The files a read-only shell command (`cat a.py b.py`, `head -n 5 x.md`) reads."""
    data = call.input if isinstance(call.input, dict) else {}
    command = next((str(data[k]) for k in ("command", "cmd") if isinstance(data.get(k), str)),
                   "")
    m = _SHELL_READ.match(command.split("|")[0].split("&&")[-1] if "&&" in command
                          else command.split("|")[0])
    if not m:
        return []
    words = [w.strip("'\"") for w in m.group(1).split()]
    return [w for w in words if not w.startswith("-") and not w.isdigit() and _PATHISH.match(w)
            and not w.startswith((">", "<"))]


_COUNT = re.compile(r"\(×(\d+)\)$")


class Counted:
    """A list of items in which a repeat of an item is counted as `(×N)` on its first
    occurrence instead of appended again.

    The first occurrence is found by the item's normalised form in a dict (issue 26: a
    scan of the whole list per added item made the facts of a long history quadratic).
    Counting keeps an item's normalised form, so the dict stays true as counts change.
    Only `add` may change `items` while this object is in use.
    """

    def __init__(self, items: list[str]) -> None:
        self.items = items
        self._first: dict[str, int] = {}
        for i, old in enumerate(items):
            self._first.setdefault(norm_item(old), i)

    def add(self, item: str) -> None:
        """Append `item`, or count a repeat of the same item as `(×N)` on the first one."""
        key = norm_item(item)
        i = self._first.get(key)
        if i is None:
            self._first[key] = len(self.items)
            self.items.append(item)
            return
        old = self.items[i]
        m = _COUNT.search(old)
        n = int(m.group(1)) + 1 if m else 2
        self.items[i] = f"{_TIMES.sub('', old)} (×{n})"


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


def collect_facts(nodes: Sequence[Node], profile: Profile,
                  identifiers: Sequence[LedgerEntry] | None = None,
                  task_limit: int = TASK_CHARS) -> Facts:
    """The bullets `nodes` (the newly old part of a history) give each section kind.

    `identifiers`: those of `nodes`, when the caller extracted them already (a plan does,
    once per message: `Plan.identifiers`).
    """
    turns = _turns(nodes)
    facts = Facts(new_request=any(t.request for t in turns))
    _requests(turns, facts, task_limit)
    _tool_work(nodes, turns, profile, facts)
    _conclusions(turns, profile, facts)
    _resources(nodes, facts, extract_identifiers(nodes) if identifiers is None else identifiers)
    return facts


# A user's decision or next step is kept verbatim up to this length (then clipped at a
# word boundary, never inside an identifier).
STATEMENT_CHARS = 600


def _requests(turns: list[_Turn], facts: Facts, task_limit: int = TASK_CHARS) -> None:
    first = True
    last_later: str | None = None
    for turn in turns:
        if turn.request is None:
            continue
        said = statement_of(turn.request)
        typed = split_typed(turn.request).typed
        if said is None:  # an acknowledgement ("ok", "continue"): it sets nothing
            pass
        elif first:
            # The span's first request: the session's task when nothing was folded before,
            # verbatim (SPEC S8), clipped head and tail, never dropped; in an update it is
            # a later request (`extractive_sections._place_new` decides).
            facts.goal.append(f"(user) {clip_statement(said, task_limit, turn.node_id)}")
            facts.statements.append((f"(user) {said}", turn.node_id))
            first = False
        else:
            # Every later statement is the user's words, carried in the user section; the
            # latest is also the goal's latest request (`_original_and_latest`).
            facts.statements.append((f"(user) {said}", turn.node_id))
            if _substantial(said, words=2):  # whole in the user section; here its gist
                last_later = f"{LATER_REQUEST}{clip_words(said, min(GOAL_CHARS, task_limit // 2))}"
        for line in pasted_errors(turn.request):
            facts.critical.append(f"{PASTED} {line}")
        decisions, steps, corrections = user_statements(typed)
        facts.user_decisions += [f"(user) {clip_words(s, STATEMENT_CHARS)}" for s in decisions]
        facts.corrections += [f"(user) {clip_words(s, STATEMENT_CHARS)}" for s in corrections]
        facts.user_next_steps += [f"(user) {clip_words(s, STATEMENT_CHARS)}" for s in steps]
    if last_later is not None:
        facts.goal.append(last_later)


def _tool_work(nodes: Sequence[Node], turns: list[_Turn], profile: Profile, f: Facts) -> None:
    results: dict[str, ToolResultPart] = {}
    rejected: set[str] = set()
    for _, msg in message_nodes(nodes):
        for result in msg.tool_results:
            results[result.call_id] = result
        for part in msg.parts:
            if isinstance(part, ApprovalPart) and part.state == "rejected":
                rejected.add(part.call_id)
    last_turn = turns[-1] if turns else None
    unresolved: dict[str, str] = {}  # tool name -> its latest failure in the last turn
    file_tools = _READ_TOOLS | _WRITE_TOOLS if profile == "coding" else frozenset()
    inspections = 0
    done, critical = Counted(f.done), Counted(f.critical)
    for turn in turns:
        for msg in turn.messages:
            command = user_command(msg)
            if command is not None:
                done.add(f"(user) ran `{one_line(command, 160)}`")
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
                        if file_tools:  # `cat src/a.py`: a file read, through any face
                            f.files_read += [f"(tool) {p}" for p in shell_read_paths(call)]
                    else:
                        done.add(f"(tool) {text}")
                elif msg.is_closed_without_result:
                    failure = f"(tool) {text} was cut off: the reply ended before a result"
                else:
                    f.in_progress.append(f"(tool) {text}: awaiting its result")
                if failure:
                    critical.add(failure)
                if turn is last_turn:
                    # A later success of the same tool in the last turn resolves a failure.
                    if failure:
                        unresolved[call.name] = failure
                    else:
                        unresolved.pop(call.name, None)
    f.blocked.extend(unresolved.values())
    if inspections:
        f.done.append(f"(tool) plus {inspections} read-only shell inspections (grep, ls, cat, …)")


def _conclusions(turns: list[_Turn], profile: Profile, f: Facts) -> None:
    for i, turn in enumerate(turns):
        answer = _final_answer(turn)
        is_last = i == len(turns) - 1
        if answer is None:
            said = statement_of(turn.request) if turn.request is not None else None
            if is_last and said is not None:
                request = clip_words(said, ITEM_CHARS)
                f.in_progress.append(f"(user) {request} (no final answer yet)")
                f.next_steps.append(f"(user) Finish: {request}")
            continue
        # Politeness, filler and formatting demonstrations are never progress.
        said = [clean_prose(x) for x in sentences(answer)
                if not _NARRATION.match(x) and not is_noise(x)]
        for sentence in said[-2:]:
            if sentence.endswith(("?", "？", ":", "：")) or not _substantial(sentence):
                continue
            item = f"(inferred) {clip_words(sentence, ITEM_CHARS)}"
            if STEP_START.match(sentence):
                continue  # "Next I will …" is a plan: Next Steps takes it
            if _is_decision(sentence):
                f.decisions.append(item)
            elif profile == "coding":
                f.done.append(item)
            else:
                f.findings.append(item)
        if is_last:
            plan = [s for s in said if _PLAN.search(s)][-5:]
            f.next_steps.extend(f"(inferred) {one_line(s)}" for s in plan)
            said = statement_of(turn.request) if turn.request is not None else None
            if not plan and said is not None:
                f.next_steps.append(NO_STATED_STEP + clip_words(said, ITEM_CHARS))


def _resources(nodes: Sequence[Node], f: Facts, identifiers: Sequence[LedgerEntry]) -> None:
    seen_pdf: dict[str, int] = {}
    for _, msg in message_nodes(nodes):
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
                quote = f"“{one_line(part.text, 200)}”" if part.text else ""
                comment = f" — comment: {one_line(part.comment, 120)}" if part.comment else ""
                if quote or comment:
                    f.findings.append(
                        f"(tool) {quote}{comment} [annotation {part.annotation_key}{on}{page}]"
                    )
            elif isinstance(part, CollectionPart):
                f.resources.append(f"(tool) Collection {part.key}: {part.name}".rstrip(": "))
            elif isinstance(part, TagPart):
                f.resources.append(f"(tool) Tag {part.tag}")
    typed = " ".join(f.resources)
    for entry in identifiers:
        if entry.kind.startswith("zotero_") and entry.value not in typed:
            label = entry.kind.removeprefix("zotero_").replace("_", " ").capitalize()
            note = f": {one_line(entry.note, 160)}" if entry.note else ""
            f.resources.append(f"(tool) {label} {entry.value}{note}")
