"""Preview and edit (SPEC M7): a compaction can be previewed without committing anything; a
user's edited summary is committed through the one compaction path as a new append-only
checkpoint marked as edited (the previous checkpoint stays in the tree), conditionally: a
session that moved since the preview refuses it with a clear error."""

from __future__ import annotations

import pytest

from contextfold.runtime.compaction import (
    USER_EDITED,
    CompactionRequest,
    EditedSummaryError,
    PreviewBase,
    StalePreviewError,
    compact_session,
)
from tests.fakeserver import Reply
from tests.runtime.test_runtime_support import open_conversation, runtime_fixtures, tree_checkpoints

store, close_models, fake = runtime_fixtures()

EDITED = """## Research Goal
- Compare the Kaplan-Meier and Cox estimators on cohort B (user-edited).

## User Requirements and Constraints
- Never overwrite refs/library.bib.

## Research Progress
- (none)

## Findings and Evidence
- (none)

## Key Zotero Resources
- (none)

## Decisions
- We use Kaplan-Meier because censoring is heavy.

## Next Steps
- Compare A against B.

## Critical Context
- (none)"""


async def _session(store, fake):
    conv = await open_conversation(store, fake, "openai", window=16_000)
    fake.enqueue(Reply(text="noted"), Reply(text="ok"), Reply(text="ok"))
    await conv.send("We decided to use Kaplan-Meier because censoring is heavy.")
    await conv.send("Now draft the introduction.")
    await conv.send("Then tighten the wording.")
    return conv


async def test_preview_commits_nothing_and_shows_what_would_be(fake, store):  # M7
    conv = await _session(store, fake)
    before = await conv.history()
    preview = await conv.preview_compaction()
    assert preview.status == "preview" and preview.summary and preview.checkpoint_text
    assert preview.summary in preview.checkpoint_text
    assert preview.base == f"{before.leaf_id}@{before.revision}"
    assert preview.summarized_messages > 0
    after = await conv.history()
    assert [n.id for n in after.nodes] == [n.id for n in before.nodes]  # nothing written
    assert await tree_checkpoints(store, conv.session_id) == []
    data = preview.to_json()
    assert data["status"] == "preview" and data["base"] == preview.base
    # The compaction it previewed commits the same summary (the offline summariser).
    outcome = await conv.compact()
    (cp,) = await tree_checkpoints(store, conv.session_id)
    assert outcome.status == "compacted" and cp.checkpoint.summary == preview.summary
    await conv.close()


async def test_an_edited_summary_is_a_new_checkpoint_marked_edited(fake, store):  # M7
    conv = await _session(store, fake)
    first = await conv.compact()
    fake.enqueue(Reply(text="ok"), Reply(text="ok"))
    await conv.send("A fourth question about cohort C.")
    await conv.send("A fifth question about cohort D.")
    preview = await conv.preview_compaction()
    assert preview.status == "preview"
    outcome = await conv.commit_summary(EDITED, base=preview.base)
    assert outcome.status == "compacted" and outcome.edited
    assert outcome.summarizer == USER_EDITED and outcome.to_json()["edited"] is True
    checkpoints = await tree_checkpoints(store, conv.session_id)
    assert len(checkpoints) == 2 and checkpoints[0].id == first.checkpoint_id  # it stays
    edited = checkpoints[-1].checkpoint
    assert edited.summarizer == USER_EDITED and edited.details["edited_by_user"] is True
    assert "Compare the Kaplan-Meier and Cox" in edited.summary
    assert conv.projection().checkpoint.id == outcome.checkpoint_id
    await conv.close()


async def test_a_stale_preview_is_refused_and_nothing_is_written(fake, store):  # M7 (C1)
    conv = await _session(store, fake)
    preview = await conv.preview_compaction()
    fake.enqueue(Reply(text="ok"))
    await conv.send("the session moves on")
    with pytest.raises(StalePreviewError) as err:
        await conv.commit_summary(EDITED, base=preview.base)
    assert "moved since the preview" in str(err.value) and err.value.kind == "conflict"
    assert await tree_checkpoints(store, conv.session_id) == []
    # The store's check under the compaction lease refuses it too (another writer).
    with pytest.raises(StalePreviewError):
        await compact_session(CompactionRequest(store, conv.session_id, capacity=conv.capacity,
                              budget=conv.budget, summary_text=EDITED,
                              base=PreviewBase.parse(preview.base)))
    assert await tree_checkpoints(store, conv.session_id) == []
    await conv.close()


async def test_bad_edits_are_clear_errors(fake, store):  # M7
    conv = await _session(store, fake)
    with pytest.raises(EditedSummaryError, match="empty"):
        await conv.commit_summary("   ")
    with pytest.raises(EditedSummaryError, match="leaf_id@revision"):
        await conv.commit_summary(EDITED, base="nonsense")
    await conv.compact()
    with pytest.raises(EditedSummaryError, match="nothing to compact"):
        await conv.commit_summary(EDITED)  # M3: the checkpoint is the leaf
    assert conv.state.phase == "idle"  # a refusal, not a failed compaction
    await conv.close()
