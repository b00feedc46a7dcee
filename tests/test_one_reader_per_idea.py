"""One reader per idea (issue 39): each idea has one module (docs/architecture.md, "One
engine behind every face"), and a second implementation fails here where it can be seen in
the source. The behaviour of the readers themselves is tested beside them; here, that the
faces use them and that they agree where two shapes used to disagree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import contextfold
from contextfold.core.money.costs import summarizer_name, summary_cost
from contextfold.core.money.prices import PriceBook
from contextfold.core.values.messages import Usage
from contextfold.runtime.compaction import CompactionOutcome
from contextfold.wire.parts import tool_arguments
from contextfold.wire.usage import usage_cache_inside

PACKAGE = Path(contextfold.__file__).parent


def calls(name: str) -> dict[str, list[int]]:
    """Module path -> the lines where `name(...)` is called (a bare name or an attribute)."""
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else \
                    node.func.attr if isinstance(node.func, ast.Attribute) else None
                if called == name:
                    found.setdefault(str(path.relative_to(PACKAGE)), []).append(node.lineno)
    return found


def test_the_call_finder_can_fail() -> None:
    assert "wire/usage.py" in calls("usage_cache_inside") or "wire/usage.py" in calls("Usage")
    assert calls("no_such_function_anywhere") == {}


# The session drivers: the four shapes of a session (issue 39) and the evaluation's.
DRIVERS = ("runtime/", "replay.py", "replay_session.py", "integrations/openai_agents.py",
           "evaluate/runner.py")


def test_a_sizer_is_built_in_the_session_driver_only() -> None:
    """`Sizer(` (the sizing memo of a session's model) is constructed in `runtime/driver.py`
    only (`session_sizer`): a face that builds its own keeps a second cache beside it."""
    assert set(calls("Sizer")) == {"runtime/driver.py"}


def test_the_session_drivers_derive_budgets_in_the_driver_only() -> None:
    """Among the session drivers, a budget is derived (`derive_budget(`) in
    `runtime/driver.py` only (`budget_for`); the model resolver derives the budget of a
    resolved model, and faces that only show a model's numbers may ask it too."""
    derived = {path for path in calls("derive_budget") if path.startswith(DRIVERS)}
    assert derived == {"runtime/driver.py"}


def test_a_providers_usage_is_read_in_one_module() -> None:
    """A `Usage` is made from a provider's report only in `wire/usage.py`; the others that
    make one add usages up (`core/values/messages.py`) or model a request no provider answered
    (`core/money/prices.py`). A face that reads usage itself is a second reader."""
    assert set(calls("Usage")) == {"wire/usage.py", "core/values/messages.py",
                                   "core/money/prices.py"}


def test_tool_arguments_are_parsed_in_one_module() -> None:
    """No module parses a tool call's arguments but `core/values/tool_calls.tool_arguments` (the
    wire readers import it from `wire/parts`): a `json.loads` of something named like a
    call's arguments or input elsewhere is a second parser."""
    second: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() == "core/values/tool_calls.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "loads" and node.args and \
                    any(word in ast.unparse(node.args[0]).lower() for word in ("arg", "input")):
                second.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert second == []


def _modules() -> list[tuple[str, ast.Module]]:
    return [(path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(PACKAGE.rglob("*.py"))]


# A provider's usage fields. Read by key (`u["input_tokens"]`, `.get(...)`, `getattr(u, ...)`)
# only in `wire/`; the nested and provider-only ones not even as attributes (contextfold's own
# `Cost` has `input_tokens`, a model's info `output_tokens`: those attributes are ours).
USAGE_FIELDS = {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                "cached_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                "cache_read_tokens", "cache_write_tokens", "prompt_tokens_details",
                "input_tokens_details", "input_token_details", "cacheRead", "cacheWrite"}
PROVIDER_ONLY = {"completion_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
                 "cache_read_tokens", "prompt_tokens_details", "input_tokens_details",
                 "input_token_details"}
# Reads of these names that are not a provider's report, each with its reason.
NOT_A_REPORT = {("cli/eval_cmd.py", "input_tokens"), ("cli/eval_cmd.py", "cached_tokens"),
                ("cli/eval_cmd.py", "output_tokens")}  # the eval report's own `Cost.to_json`


def usage_reads(tree: ast.Module) -> list[tuple[str, int]]:
    """The provider usage fields `tree` reads, with their lines."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and node.args:
            func, args = node.func, node.args
            if isinstance(func, ast.Attribute) and func.attr == "get" and \
                    isinstance(args[0], ast.Constant):
                key = args[0].value
            elif isinstance(func, ast.Name) and func.id == "getattr" and len(args) > 1 and \
                    isinstance(args[1], ast.Constant):
                key = args[1].value
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and \
                node.attr in PROVIDER_ONLY:
            key = node.attr
        if key in USAGE_FIELDS:
            found.append((str(key), node.lineno))
    return found


def test_the_usage_scan_can_fail() -> None:
    tree = ast.parse("a = u['prompt_tokens'] + u.get('cached_tokens') + "
                     "getattr(u, 'input_tokens') + u.input_tokens_details.cached_tokens + "
                     "cost.input_tokens")
    assert sorted(k for k, _ in usage_reads(tree)) == [
        "cached_tokens", "input_tokens", "input_tokens_details", "prompt_tokens"]


def test_no_face_reads_a_providers_usage_fields_itself() -> None:
    """A face hands the provider's usage object to `wire/` (`usage_of` of its protocol, or
    `wire/usage` with the field names); reading a count itself is a second usage reader with
    its own rule (three integrations did)."""
    second = [f"{rel}:{line} {key}" for rel, tree in _modules() if not rel.startswith("wire/")
              for key, line in usage_reads(tree) if (rel, key) not in NOT_A_REPORT]
    assert second == []


# The content-part types of OpenAI's Responses items: a module that compares a part's type
# with one of them is reading items, which `wire/openai_responses.read_input` (through
# `wire/openai_chat.read_content`) does for every face.
RESPONSES_PARTS = {"input_text", "output_text", "input_image", "input_file",
                   "summary_text", "reasoning_text", "refusal"}


def test_responses_items_are_read_in_wire_only() -> None:
    second = []
    for rel, tree in _modules():
        if rel.startswith("wire/"):
            continue
        second += [f"{rel}:{node.lineno}" for node in ast.walk(tree)
                   if isinstance(node, ast.Compare) and any(
                       isinstance(c, ast.Constant) and c.value in RESPONSES_PARTS
                       for c in ast.walk(node))]
    assert second == []


@pytest.mark.parametrize("name", ["Parsed", "WireError", "StreamReader", "CachedRead"])
def test_one_class_of_each_name_in_the_proxy(name: str) -> None:
    """The proxy's three protocols share one `Parsed` request (the Responses one extends
    it with its items), one `WireError`, one stream reader."""
    where = [rel for rel, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.ClassDef) and node.name == name]
    assert len(where) == 1, where


def test_a_summarisers_model_is_named_in_one_module() -> None:
    """The `llm:` / `llm-` prefix of a summariser's name is taken off in `core/money/costs.py`
    only (a compaction's outcome stripped `llm:` and not `llm-`). Writing the name (an
    f-string `llm:{model}`) is not reading it."""
    where = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        written = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                   for part in node.values}
        where += [str(path.relative_to(PACKAGE)) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith(("llm:", "llm-")) and id(node) not in written]
    assert set(where) == {"core/money/costs.py"}


# --------------------------------------------------------------------------- the one rules


@pytest.mark.parametrize("summarizer", ["llm:gpt-4o-mini", "llm-gpt-4o-mini"])
def test_a_compactions_price_is_the_checkpoints(summarizer: str) -> None:
    usage = Usage(input=1_000, output=200)
    book = PriceBook.packaged()
    outcome = CompactionOutcome(status="compacted", summarizer=summarizer,
                                summarizer_usage=usage)
    assert summarizer_name(summarizer, usage) == "gpt-4o-mini"
    assert outcome.cost() == summary_cost(summarizer, usage, book)
    assert outcome.cost().usd is not None and outcome.cost().usd > 0
    assert CompactionOutcome(status="compacted", summarizer="extractive").cost().usd in (0, None)


def test_usage_with_the_cache_inside_the_input_counts_each_token_once() -> None:
    names = {"prompt": "input", "output": "output", "cache_read": "details.read",
             "cache_write": "details.write"}
    usage = usage_cache_inside({"input": 1_000, "output": 50,
                                "details": {"read": 600, "write": 100}}, names, "m")
    assert usage == Usage(input=300, output=50, cache_read=600, cache_write=100, model="m")
    assert usage_cache_inside({"input": 10, "details": {"read": 50}}, names, None) == Usage(
        input=0, cache_read=10)  # a server's nonsense never goes negative
    assert usage_cache_inside({"input": -1}, names, None) is None  # one validation rule
    assert usage_cache_inside({"details": {"read": 5}}, names, None) is None
    assert usage_cache_inside({}, names, None) is None


@pytest.mark.parametrize("raw,parsed", [
    (None, {}), ("", {}), ("  ", {}), ('{"q": 1}', {"q": 1}), ({"q": 1}, {"q": 1}),
    ("{broken", "{broken"), ("[1]", [1])])
def test_tool_arguments_one_rule(raw: object, parsed: object) -> None:
    assert tool_arguments(raw) == parsed


# The item types of OpenAI's Responses input. A dict written outside `wire/` with one of
# them as its `type` (a literal, or `dict(type=...)`) is a second writer of the protocol's
# items: `wire/openai_responses.render_message` writes them for every face (the Agents SDK
# session wrote its own beside the proxy's, which disagreed on files and errors). An easy
# input message (`{"role", "content"}`) looks like a chat message and is not caught here.
RESPONSES_ITEMS = {"function_call", "function_call_output", "custom_tool_call",
                   "custom_tool_call_output", "reasoning", "compaction"}


def item_writes(tree: ast.AST) -> list[tuple[str, int]]:
    """The Responses items (and content parts) `tree` writes, with their lines."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            fields = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "dict":
            fields = {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
        else:
            continue
        kind = fields.get("type")
        value = kind.value if isinstance(kind, ast.Constant) else None
        if value in RESPONSES_ITEMS | RESPONSES_PARTS or \
                (value == "message" and "role" in fields):
            found.append((str(value), node.lineno))
    return found


def test_the_item_writer_scan_can_fail() -> None:
    tree = ast.parse('a = {"type": "function_call_output", "call_id": c}\n'
                     'b = dict(type="reasoning", summary=[])\n'
                     'c = {"type": "message", "role": "user", "content": []}\n'
                     'd = {"type": "text", "text": t}\n'
                     'e = {"type": "message", "id": "m"}\n')
    assert [k for k, _ in item_writes(tree)] == [
        "function_call_output", "reasoning", "message"]


def test_responses_items_are_written_in_wire_only() -> None:
    second = [f"{rel}:{line} {kind}" for rel, tree in _modules()
              if not rel.startswith("wire/") for kind, line in item_writes(tree)]
    assert second == []
