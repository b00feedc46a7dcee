"""The framework-free parts of the integrations: imports and Responses item conversion."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contextfold.core.values.messages import Usage
from contextfold.integrations.responses_items import (
    chat_messages,
    items_to_messages,
    message_items,
    paired,
)


def test_core_and_integrations_package_import_no_framework():
    """`import contextfold` and the integrations package never import a framework."""
    code = ("import sys, contextfold, contextfold.integrations, "
            "contextfold.integrations.responses_items, contextfold.integrations.loop_thread\n"
            "bad = [m for m in ('agents', 'pydantic_ai', 'langchain', 'langchain_core', "
            "'inspect_ai') "
            "if m in sys.modules]\nprint(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("openai_agents", "agents", "openai-agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("langchain", "langchain", "langchain"),
    ("inspect_ai", "inspect_ai", "inspect"),
    ("inspect_messages", "inspect_ai", "inspect"),
])
def test_without_its_framework_a_module_names_itself_and_the_extra(module, framework, extra):
    """Importing an integration whose framework is missing ends in one sentence naming the
    module imported and the exact install line, not in a traceback from inside it."""
    name = f"contextfold.integrations.{module}"
    code = (f"import sys; sys.modules[{framework!r}] = None\n"
            f"try:\n    import {name}\n"
            "except ImportError as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(f"MissingExtraError {name} needs ")
    assert out.stdout.strip().endswith(f"pip install 'contextfold[{extra}]'")


def test_one_response_is_one_assistant_message_with_its_usage_and_ids():
    """K1, E1: text, reasoning and parallel calls of one response stay one message; outputs
    name their calls; identifiers verbatim; the usage lands on the reply."""
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "find DOI 10.1/x"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
                                                          "text": "look it up"}]},
        {"type": "message", "role": "assistant", "id": "msg_1",
         "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "search",
         "arguments": '{"doi": "10.1/x"}'},
        {"type": "function_call", "call_id": "c2", "name": "fetch", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "hit"},
        {"type": "function_call_output", "call_id": "c2",
         "output": [{"type": "input_text", "text": "page"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    ]
    usage = Usage(input=100, output=10)
    msgs = items_to_messages(items, usage=usage)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
    reply = msgs[1]
    assert [c.id for c in reply.tool_calls] == ["c1", "c2"]
    assert reply.tool_calls[0].input == {"doi": "10.1/x"}
    assert reply.tool_calls[1].input == "not json"
    assert msgs[2].tool_results[0].name == "search" and msgs[3].tool_results[0].output == "page"
    assert "[web_search_call]" in msgs[4].text  # kept, never dropped
    assert msgs[4].usage == usage and reply.usage is None
    back = [i for m in msgs for i in message_items(m)]
    assert not any(i.get("type") == "reasoning" for i in back)  # stored, not replayed
    assert [i["call_id"] for i in back if i.get("type") == "function_call"] == ["c1", "c2"]
    assert back[2]["arguments"] == '{"doi": "10.1/x"}' and back[3]["arguments"] == "not json"


def test_paired_leaves_out_orphans_and_opens_with_the_user():
    """The last guard: an output without its call, a call without its output."""
    items = [
        {"type": "function_call_output", "call_id": "gone", "output": "x"},
        {"role": "assistant", "content": "earlier"},
        {"type": "function_call", "call_id": "open", "name": "t", "arguments": "{}"},
        {"role": "user", "content": "next"},
    ]
    out, dropped = paired(items)
    assert dropped == 2
    chat = chat_messages(out)
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert "tool_calls" not in chat[1]
