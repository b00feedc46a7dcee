"""A live tool loop over real HTTP keeps its recent rounds raw when it compacts (SPEC K6)."""

from __future__ import annotations

import pytest

from contextfold.core.values.messages import ToolResultPart
from contextfold.core.view.projection import TURN_HEADING, checkpoint_text, project
from tests.fakeserver import Reply, ToolCallSpec
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    assert_requests_fit,
    open_conversation,
    runtime_fixtures,
    words,
)

store, close_models, fake = runtime_fixtures()

REQUEST = "Go through src/ file by file and fix every lint error; run the checks as you go."


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_long_tool_loop_compacts_at_a_round_and_keeps_the_latest_round(
        fake, store, protocol):  # K6 P2 A4
    conv = await open_conversation(store, fake, protocol, window=32_000, max_output=8_192)
    rounds = 40
    fake.enqueue(*[Reply(tool_calls=(ToolCallSpec("read", {"path": f"src/m{r}.py"}),))
                   for r in range(rounds)], Reply(text="All files are clean now."), kind="chat")

    async def read(calls):
        return [ToolResultPart(call_id=c.id, name=c.name,
                               output=words(900, f"{c.input['path']}:")) for c in calls]

    result = await conv.send(REQUEST, run_tools=read)
    assert result.turn_complete and result.text == "All files are clean now."
    compacted = [c for c in result.compactions if c.status == "compacted"]
    assert compacted, "forty big rounds must not fit a 32k window"
    # Every compaction kept recent rounds raw, never an empty tail.
    assert all(c.kept_messages > 0 and c.kept_tokens > 0 for c in compacted)
    branch = conv.branch
    projection = project(branch)
    cp = projection.summary
    assert cp is not None and cp.turn is not None
    assert cp.turn.request == REQUEST and cp.turn.rounds_folded > 0
    assert TURN_HEADING in checkpoint_text(cp)
    # The projection continues with an assistant round after the checkpoint, and holds the
    # last tool call with its result.
    assert projection.messages[0].message.role == "assistant"
    last_call = next(n for n in reversed(projection.messages) if n.message.tool_calls)
    call_id = last_call.message.tool_calls[0].id
    assert any(r.call_id == call_id for n in projection.messages
               for r in n.message.tool_results)
    # What the server received fitted the window and was a valid tool sequence every time.
    assert_requests_fit(fake, 32_000)
    await conv.close()
