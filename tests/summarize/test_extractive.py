"""The offline extractive summariser (SPEC S2-S5, M4-M6) on hand-built and real histories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan, Profile
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.values.messages import (
    AnnotationPart,
    ApprovalPart,
    Ledger,
    LedgerEntry,
    Message,
    Node,
    PdfPagePart,
    ToolResultPart,
    ZoteroItemPart,
)
from contextfold.summarize.extractive import (
    SummaryBudgetTooSmall,
    summarize_extractive,
    summary_token_budget,
)
from contextfold.summarize.prompts import parse_sections, sections_for
from contextfold.summarize.validate import validate_summary
from tests.builders import assistant, chain, tool_call, tool_result, user
from tests.core.render.test_serialize import load_pi_messages, message_lists

ZOTERO = Path(__file__).parents[1] / "fixtures" / "zotero"
FIRST_PI_REQUEST = "we still need to port over user-message-selector.ts"


def make_plan(
    nodes: list[Node],
    *,
    profile: Profile,
    previous_summary: str | None = None,
    previous_ledger: Ledger | None = None,
    instructions: str | None = None,
    window: int = 200_000,
    max_output: int = 32_000,
) -> Plan:
    budget = derive_budget(ModelCapacity(model="m", context_window=window, max_output=max_output))
    return Plan(
        trigger="manual", session_leaf_id=nodes[-1].id, branch_revision=3,
        first_kept_id=None, previous_checkpoint_id=None, previous_summary=previous_summary,
        previous_ledger=previous_ledger or Ledger(), newly_old=tuple(nodes), kept=(),
        chunks=(tuple(nodes),), tokens_before=0, kept_tokens=0, newly_old_tokens=0,
        budget=budget, summarizer_budget=budget, profile=profile, instructions=instructions,
    )


def summarize_checked(plan: Plan) -> str:
    """Summarise and assert the two guarantees every summary must meet."""
    text = summarize_extractive(plan)
    budget = summary_token_budget(plan)
    assert estimate_text(text) <= budget
    assert validate_summary(text, plan.profile, budget) == []
    return text


def bullets(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def assert_provenance(text: str) -> None:  # S3
    for b in bullets(text):
        b = re.sub(r"^\[[ x]\] ", "", b)
        assert b.startswith(("(user)", "(tool)", "(inferred)", "(none)")) or \
            "omitted for size" in b, b


def research_session() -> list[Node]:
    items_json = (ZOTERO / "items_doc.json").read_text(encoding="utf-8")
    return chain([
        user("Find the plasma physics papers in my Zotero library and summarise what they "
             "report. Only use peer-reviewed sources. Don't include web pages."),
        tool_call("c1", "zotero_search", {"query": "plasma", "limit": 20}),
        tool_result("c1", items_json),
        Message(role="tool", parts=(
            ToolResultPart(call_id="c1b", name="zotero_get_item", output="1 item"),
            ZoteroItemPart(item_key="85MTWF4F", title="Pulsed plasma experiment",
                           citation="IEEE PPPS 2007. doi:10.1109/PPPS.2007.4345875"),
        )),
        tool_call("c2", "zotero_read_pdf", {"attachment_key": "TM8QRS36", "page": 4}),
        Message(role="tool", parts=(
            ToolResultPart(call_id="c2", name="zotero_read_pdf", output="page text"),
            PdfPagePart(attachment_name="ppps2007.pdf", attachment_key="TM8QRS36", page=4,
                        total_pages=12, text="The discharge reached 3 kA."),
            AnnotationPart(annotation_key="ANNO4KEY", parent_item_key="85MTWF4F",
                           text="peak current of 3 kA", comment="key result", page="4"),
        )),
        assistant("The 2007 PPPS paper reports a peak current of 3 kA on page 4. "
                  "I will focus on the IEEE conference papers rather than the web pages."),
        user("引用はAPA形式で書いてください。ウェブページは使わないでください。"
             "次にPLASMA 2002の論文を調べてください。"),
        tool_call("c3", "zotero_read_pdf", {"attachment_key": "QQQQ2002", "page": 1}),
        tool_result("c3", "Error: attachment QQQQ2002 not found\nat reader", is_error=True),
        assistant("The PLASMA 2002 attachment could not be opened. Next I will search for "
                  "another copy of the PLASMA 2002 paper."),
    ])


# --------------------------------------------------------------------------- real coding data


def test_pi_session_goal_constraint_and_identifiers_survive():  # S2, S3 on real data
    nodes = chain(load_pi_messages(limit=300))
    text = summarize_checked(make_plan(nodes, profile="coding"))
    sections = parse_sections(text, "coding")
    assert FIRST_PI_REQUEST in sections["Goal"]
    assert "(user) truncated text must stop when it encounters a new line" in \
        sections["Constraints & Preferences"]
    assert "packages/coding-agent/src/tui/user-message-selector.ts" in sections["Files Modified"]
    assert "packages/coding-agent/src/tui/oauth-selector.ts" in sections["Files Read"]
    assert "npm run check" in sections["Progress"]
    assert "error TS2739" in sections["Critical Context"]
    assert_provenance(text)


def test_pi_session_repeated_updates_stay_one_valid_summary_within_budget():  # S4, M4-M5
    msgs = load_pi_messages()
    nodes = chain(msgs)
    starts = [i for i, n in enumerate(nodes) if n.is_user_message]
    cuts = [*starts[:: max(1, len(starts) // 6)][1:], len(nodes)]
    summary: str | None = None
    begin = 0
    for end in cuts:
        plan = make_plan(nodes[begin:end], profile="coding", previous_summary=summary,
                         window=32_000, max_output=8_000)
        summary = summarize_checked(plan)
        # One summary, never a stack: every heading exactly once.
        for name in sections_for("coding"):
            assert summary.count(f"## {name}\n") == 1
        assert FIRST_PI_REQUEST in parse_sections(summary, "coding")["Goal"]
        begin = end
    assert summary is not None
    assert "omitted for size" in summary  # trimming happened, and says so
    assert "invalid themes must NEVER explode" in summary  # S8: the user's words, verbatim
    assert "packages/coding-agent/CHANGELOG.md" in summary


def test_summary_is_deterministic():  # offline default
    nodes = chain(load_pi_messages(limit=200))
    plan = make_plan(nodes, profile="coding", instructions="keep file paths")
    assert summarize_extractive(plan) == summarize_extractive(plan)


# --------------------------------------------------------------------------- research


def test_research_session_fills_every_section_with_provenance():  # S2, S3
    text = summarize_checked(make_plan(research_session(), profile="research"))
    s = parse_sections(text, "research")
    assert list(s) == list(sections_for("research"))
    assert "Find the plasma physics papers" in s["Research Goal"]
    # S8: what the user typed is carried verbatim, a whole message per item.
    assert "Only use peer-reviewed sources. Don't include web pages." in s["Research Goal"]
    assert ("(user) 引用はAPA形式で書いてください。ウェブページは使わないでください。"
            "次にPLASMA 2002" in s["User Requirements and Constraints"])
    assert "(user) Later request: 引用はAPA形式" in s["Research Goal"]
    assert "- [x] (tool) zotero_search `plasma`" in s["Research Progress"]
    assert "- [x] (tool) zotero_read_pdf `TM8QRS36`" in s["Research Progress"]
    assert "(tool) zotero_read_pdf `TM8QRS36` failed" not in s["Research Progress"]
    assert "QQQQ2002" in s["Research Progress"]  # the failure blocks the latest request
    assert "“peak current of 3 kA” — comment: key result" in s["Findings and Evidence"]
    assert "(inferred) The 2007 PPPS paper reports a peak current of 3 kA on page 4." in \
        s["Findings and Evidence"]
    for needle in ("85MTWF4F", "Pulsed plasma experiment", "ppps2007.pdf (TM8QRS36): last at "
                   "page 4 of 12", "ANNO4KEY", "PQKBRC33"):
        assert needle in s["Key Zotero Resources"], needle
    # PQKBRC33 was only listed by the search: its key is kept, not the title of a paper
    # the session never discussed (issue 11).
    assert "Sherlock Holmes in Babylon" not in s["Key Zotero Resources"]
    assert "I will focus on the IEEE conference papers" in s["Decisions"]
    assert "Next I will" not in s["Decisions"]
    assert "search for another copy of the PLASMA 2002 paper" in s["Next Steps"]
    assert "Error: attachment QQQQ2002 not found" in s["Critical Context"]
    assert_provenance(text)


def test_instructions_are_recorded_and_all_dois_listed():  # M6
    previous = Ledger(entries=(LedgerEntry(kind="doi", value="10.9999/from-earlier"),),
                      evicted=(LedgerEntry(kind="doi", value="10.9999/evicted-earlier"),))
    plan = make_plan(research_session(), profile="research", previous_ledger=previous,
                     instructions="Keep all DOIs, please.")
    critical = parse_sections(summarize_checked(plan), "research")["Critical Context"]
    assert "(user) Instructions for this summary: Keep all DOIs, please." in critical
    items = json.loads((ZOTERO / "items_doc.json").read_text(encoding="utf-8"))
    dois = [i["data"]["DOI"] for i in items if i["data"].get("DOI")]
    for doi in [*dois, "10.9999/from-earlier", "10.9999/evicted-earlier"]:
        assert doi in critical, doi


def test_instruction_identifiers_are_pinned_under_a_tight_budget():  # M6
    plan = make_plan(research_session(), profile="research", instructions="keep all DOIs",
                     window=6_000, max_output=2_000)
    text = summarize_checked(plan)
    assert "10.1126/science.1195912" in text and "10.2307/2321200" in text


# --------------------------------------------------------------------------- tool outcomes


def test_tool_outcomes_done_failed_denied_cut_off_and_pending():  # S2, S3
    nodes = chain([
        user("clean the build and run the tests"),
        tool_call("c1", "bash", {"command": "make clean"}), tool_result("c1", "ok"),
        tool_call("c2", "bash", {"command": "rm -rf /"}),
        Message(role="tool", parts=(ToolResultPart(call_id="c2", denied=True),)),
        tool_call("c3", "delete_db", {"name": "prod"}),
        Message(role="user", parts=(ApprovalPart(call_id="c3", state="rejected"),)),
        Message(role="assistant", parts=tool_call("c4", "bash", {"command": "pytest"}).parts,
                status="aborted"),
        tool_call("c5", "bash", {"command": "make test"}),
    ])
    s = parse_sections(summarize_checked(make_plan(nodes, profile="coding")), "coding")
    assert "- [x] (tool) bash `make clean`" in s["Progress"]
    assert "- [ ] (tool) bash `make test`: awaiting its result" in s["Progress"]
    assert "(user) Denied: bash `rm -rf /`" in s["Critical Context"]
    assert "(user) Denied: delete_db `prod`" in s["Critical Context"]
    assert "bash `pytest` was cut off" in s["Critical Context"]
    assert "(user) clean the build and run the tests (no final answer yet)" in s["Progress"]


def test_later_success_resolves_a_blocker():  # S2
    nodes = chain([
        user("run the checks"),
        tool_call("c1", "bash", {"command": "npm run check"}),
        tool_result("c1", "src/a.ts(1,1): error TS1005", is_error=True),
        tool_call("c2", "bash", {"command": "npm run check"}), tool_result("c2", "ok"),
        assistant("All checks pass now after fixing the syntax error in src/a.ts."),
    ])
    s = parse_sections(summarize_checked(make_plan(nodes, profile="coding")), "coding")
    assert "### Blocked\n- (none)" in s["Progress"]
    assert "error TS1005" in s["Critical Context"]  # still recorded as context


# --------------------------------------------------------------------------- update mode


def test_update_merges_previous_summary_and_supersedes_stale_items():  # S4, M4
    previous = "\n\n".join([
        "## Goal\n- (user) ORIGINAL GOAL",
        "## Constraints & Preferences\n- (user) never touch prod",
        "## Progress\n### Done\n- [x] (tool) bash `make lint`\n### In Progress\n"
        "- [ ] (tool) bash `make deploy`: awaiting its result\n### Blocked\n- (none)",
        "## Key Decisions\n- (inferred) use SQLite",
        "## Next Steps\n- (inferred) OLD NEXT STEP",
        "## Critical Context\n- (3 earlier items omitted for size; the durable history has "
        "them)\n- (tool) old error",
        "## Files Read\n- (tool) src/a.py",
        "## Files Modified\n- (none)",
    ])
    nodes = chain([
        user("now add a health check endpoint"),
        tool_call("c1", "edit", {"path": "src/a.py"}), tool_result("c1", "edited"),
        assistant("Added /health in src/a.py. Next I will write a test for it."),
    ])
    text = summarize_checked(make_plan(nodes, profile="coding", previous_summary=previous))
    s = parse_sections(text, "coding")
    assert s["Goal"].startswith("- (user) ORIGINAL GOAL")
    assert "(user) Later request: now add a health check endpoint" in s["Goal"]
    assert "never touch prod" in s["Constraints & Preferences"]
    assert "bash `make lint`" in s["Progress"]
    assert "make deploy" not in s["Progress"]  # open items of before are not current claims
    assert "make deploy`: awaiting its result [earlier in progress; may be resolved since]" in \
        s["Critical Context"]
    assert "(3 earlier items omitted for size" in s["Critical Context"]
    assert "OLD NEXT STEP" not in s["Next Steps"]
    assert "Next I will write a test for it." in s["Next Steps"]
    assert "src/a.py" in s["Files Modified"] and "src/a.py" not in s["Files Read"]


def test_a_superseded_placeholder_next_step_is_not_carried_as_context():  # S4, S6
    """"Continue from the latest request: …" names the request of its time: once a newer
    plan replaces it, carrying it into Critical Context contradicts the new Next Steps."""
    previous = "\n\n".join([
        "## Goal\n- (user) Draft the review",
        "## Next Steps\n- (inferred) No next step was stated; continue from the latest "
        "request: Draft paragraph 2\n- (user) Finish: Draft paragraph 3\n"
        "- (inferred) Compare the two editions next",
        "## Critical Context\n- (none)",
    ])
    nodes = chain([user("Draft paragraph 6."), assistant("Here is paragraph 6. Next I will "
                                                          "check its citations.")])
    text = summarize_checked(make_plan(nodes, profile="research", previous_summary=previous))
    s = parse_sections(text, "research")
    assert "paragraph 2" not in text and "paragraph 3" not in text
    assert "Next I will check its citations." in s["Next Steps"]
    # A real plan that was replaced is still context, marked as possibly done.
    assert "Compare the two editions next [earlier next step; may be done since]" in \
        s["Critical Context"]


def test_rather_than_in_prose_is_not_a_decision():  # S2
    nodes = chain([
        user("Draft paragraph 1."),
        assistant("The author argues that the pattern is deliberate rather than accidental, "
                  "citing letters from 1901. We will use the 1902 edition rather than the "
                  "serial text."),
    ])
    s = parse_sections(summarize_checked(make_plan(nodes, profile="research")), "research")
    assert "deliberate rather than accidental" not in s["Decisions"]
    assert "We will use the 1902 edition rather than the serial text." in s["Decisions"]


def test_freeform_previous_summary_is_kept_as_context():  # S4
    previous = "The user asked to migrate the database. We chose Postgres 16."
    nodes = chain([user("continue the migration"), assistant("Migrated the users table.")])
    text = summarize_checked(make_plan(nodes, profile="coding", previous_summary=previous))
    assert "We chose Postgres 16." in parse_sections(text, "coding")["Critical Context"]


# --------------------------------------------------------------------------- budgets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(), st.integers(4_000, 200_000), st.sampled_from(["research", "coding"]),
       st.one_of(st.none(), st.sampled_from(["keep all DOIs", "keep paths and errors"])))
def test_any_history_gives_a_valid_summary_within_budget(msgs, window, profile, instructions):
    # S2, S5: whatever the history and model size, the result validates and fits.
    plan = make_plan(chain(msgs), profile=profile, instructions=instructions, window=window,
                     max_output=min(32_000, window // 2))
    first = summarize_checked(plan)
    again = make_plan(chain(msgs, prefix="m"), profile=profile, previous_summary=first,
                      window=window, max_output=min(32_000, window // 2))
    summarize_checked(again)


def test_budget_too_small_for_headings_is_a_clear_error():
    nodes = chain([user("hello"), assistant("hi")])
    with pytest.raises(SummaryBudgetTooSmall, match="cannot hold the section headings"):
        summarize_extractive(make_plan(nodes, profile="research", window=400, max_output=100))
