"""The identifier ledger: deterministic extraction and carry-forward (SPEC S3, S4, M6 support).

Identifiers must survive compaction verbatim; the ledger carries them next to the summary.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.planning.ledger import extract_identifiers, looks_like_path, merge_ledger
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.values.messages import (
    AnnotationPart,
    CollectionPart,
    Ledger,
    LedgerEntry,
    Message,
    PdfPagePart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from contextfold.core.view.projection import render_ledger
from tests.builders import assistant, chain, tool_call, tool_result, user
from tests.core.render.test_serialize import load_pi_messages

ZOTERO = Path(__file__).parents[2] / "fixtures" / "zotero"


def _zotero(name: str) -> str:
    return (ZOTERO / name).read_text(encoding="utf-8")


def _kinds(entries: list[LedgerEntry]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in entries:
        out.setdefault(e.kind, []).append(e.value)
    return out


# --------------------------------------------------------------------------- extraction


def test_typed_zotero_parts_give_keys_with_notes():  # R6, S3
    msg = Message(role="tool", parts=(
        ToolResultPart(call_id="c1", output="3 resources"),
        ZoteroItemPart(item_key="PQKBRC33", title="Sherlock Holmes in Babylon"),
        PdfPagePart(attachment_name="buck.pdf", attachment_key="TM8QRS36", page=3),
        AnnotationPart(annotation_key="ANNOT001", parent_item_key="Z8N84QAJ", text="a quote"),
        CollectionPart(key="9KH9TNSJ", name="Earthquakes"),
    ))
    entries = extract_identifiers(chain([user("q"), msg]))
    by_value = {e.value: e for e in entries}
    assert by_value["PQKBRC33"].kind == "zotero_item"
    assert by_value["PQKBRC33"].note == "Sherlock Holmes in Babylon"
    assert by_value["TM8QRS36"].kind == "zotero_attachment"
    assert by_value["ANNOT001"].kind == "zotero_annotation"
    assert by_value["Z8N84QAJ"].kind == "zotero_item"  # the annotation's parent item
    assert by_value["9KH9TNSJ"] == LedgerEntry(kind="zotero_collection", value="9KH9TNSJ",
                                               note="Earthquakes")


def test_real_zotero_items_json_gives_every_item_key_and_doi():  # R6 on real data
    raw = _zotero("items_doc.json")
    items = json.loads(raw)
    nodes = chain([user("search"), tool_call("c1", "zotero_search", {"q": "x"}),
                   tool_result("c1", raw)])
    kinds = _kinds(extract_identifiers(nodes))
    assert kinds["zotero_item"] == [i["key"] for i in items]
    # A listing of 20 items: keys, not the titles of papers the session never discussed
    # (issue 11); reading one item's record later gives that item its title.
    notes = {e.value: e.note for e in extract_identifiers(nodes)}
    assert set(notes[i["key"]] for i in items) == {""}
    single = json.dumps(items[0])
    later = chain([user("search"), tool_call("c1", "zotero_search", {"q": "x"}),
                   tool_result("c1", raw), tool_call("c2", "zotero_get_item", {}),
                   tool_result("c2", single)])
    notes = {e.value: e.note for e in extract_identifiers(later)}
    assert notes[items[0]["key"]] == items[0]["data"]["title"]
    assert notes[items[1]["key"]] == ""
    dois = [i["data"]["DOI"] for i in items if i["data"].get("DOI")]
    assert kinds["doi"] == dois and "10.2307/2321200" in dois
    # Precision: the API's own links and the library page are not resources to resume.
    assert not any("api.zotero.org" in u or "zotero.org/z_public" in u
                   for u in kinds.get("url", []))


def test_real_zotero_attachment_and_collections_are_typed():  # R6 on real data
    nodes = chain([
        user("show"),
        tool_call("c1", "zotero_attachments", {}),
        tool_result("c1", _zotero("attachments_doc.json")),
        tool_call("c2", "zotero_collections", {}),
        tool_result("c2", _zotero("collections_doc.json")),
    ])
    kinds = _kinds(extract_identifiers(nodes))
    assert kinds["zotero_attachment"] == ["TM8QRS36"]
    assert "47RUN6RI" in kinds["zotero_item"]  # parentItem of the attachment
    collections = json.loads(_zotero("collections_doc.json"))
    assert kinds["zotero_collection"] == [c["key"] for c in collections]


def test_key_fields_in_non_json_tool_output_are_zotero_keys():  # R6
    text = 'found 2 items\n{"key": "NM66T6EF", "title": "x"}, {"key": "PQKBRC33", ...'
    entries = extract_identifiers(chain([tool_call("c1", "search"), tool_result("c1", text)]))
    assert [(e.kind, e.value) for e in entries] == [
        ("zotero_key", "NM66T6EF"), ("zotero_key", "PQKBRC33")]


def test_generic_key_upgraded_by_later_typed_part_keeps_position():  # dedupe
    nodes = chain([
        tool_call("c1", "search"), tool_result("c1", '{"key": "NM66T6EF"'),
        user("see https://example.org/paper"),
        Message(role="tool", parts=(ToolResultPart(call_id="c2"),
                                    ZoteroItemPart(item_key="NM66T6EF", title="Quakes"))),
    ])
    entries = extract_identifiers(nodes)
    assert [e.value for e in entries] == ["NM66T6EF", "https://example.org/paper"]
    assert entries[0].kind == "zotero_item" and entries[0].note == "Quakes"


def test_dois_urls_and_paths_from_prose_and_tool_inputs():
    nodes = chain([
        user("Read doi:10.1126/science.1195912, then https://arxiv.org/abs/1706.03762. "
             "Also check src/contextfold/core/planning/ledger.py and ~/notes/todo.md."),
        tool_call("c1", "read", {"path": "docs/architecture.md"}),
        tool_result("c1", "see also lib/x.py and https://example.com/ignored"),
        tool_call("c2", "web_fetch", {"url": "https://www.zotero.org/support/dev/web_api/v3"}),
    ])
    kinds = _kinds(extract_identifiers(nodes))
    assert kinds["doi"] == ["10.1126/science.1195912"]
    assert kinds["url"] == ["https://arxiv.org/abs/1706.03762",
                            "https://www.zotero.org/support/dev/web_api/v3"]
    assert kinds["path"] == ["src/contextfold/core/planning/ledger.py", "~/notes/todo.md",
                             "docs/architecture.md"]


def test_words_with_slashes_are_not_paths():  # precision
    for token in ("and/or", "TCP/IP", "km/h", "/compact", "11/21/2025", "1/2", "e.g./i.e",
                  "https://x.org/a.py", "read/write", "input/output"):
        assert not looks_like_path(token), token
    for token in ("/usr/local/bin", "src/app/main.py", "./run.sh", "../theme/theme.js",
                  "~/.pi/agent/themes/dark.json", "docs/guide.md"):
        assert looks_like_path(token), token


def test_commit_hashes_only_in_git_contexts():
    nodes = chain([
        user("colors: 8abeb7 and b5bd68 look fine; build 1234567 passed"),
        tool_call("c1", "bash", {"command": "git show 45ffe0a"}),
        tool_result("c1", "commit 45ffe0a1b2\nAuthor: x"),
        tool_call("c2", "bash", {"command": "git commit -m 'Release'"}),
        tool_result("c2", "[main 9dd68ea] Release\n 3 files changed"),
        tool_call("c3", "bash", {"command": "cat colors.txt"}),
        tool_result("c3", "deadbee1 cafe123"),
        assistant("Committed as commit 0629d16."),
    ])
    assert _kinds(extract_identifiers(nodes))["commit"] == [
        "45ffe0a", "45ffe0a1b2", "9dd68ea", "0629d16"]


def test_first_error_line_of_each_tool_error_deduplicated():
    nodes = chain([
        tool_call("c1", "bash", {"command": "npm run check"}),
        tool_result("c1", "> pkg@1.0 check\n> tsc\nsrc/a.ts(3,1): error TS2304: x", is_error=True),
        tool_call("c2", "bash", {"command": "false"}),
        tool_result("c2", "Command exited with code 1", is_error=True),
        tool_call("c3", "bash", {"command": "false"}),
        tool_result("c3", "Command exited with code 1", is_error=True),
        tool_call("c4", "rm", {"path": "/tmp/x/y"}),
        Message(role="tool", parts=(ToolResultPart(call_id="c4", output="no", denied=True,
                                                   is_error=True),)),
    ])
    errors = [e for e in extract_identifiers(nodes) if e.kind == "tool_error"]
    assert [(e.value, e.note) for e in errors] == [
        ("src/a.ts(3,1): error TS2304: x", "bash"), ("Command exited with code 1", "bash")]


def test_real_pi_session_extraction_is_precise():  # real data
    entries = extract_identifiers(chain(load_pi_messages()))
    kinds = _kinds(entries)
    paths = kinds["path"]
    assert "packages/coding-agent/docs/theme.md" in paths
    assert "packages/coding-agent/src/tui/user-message-selector.ts" in paths
    # Path-looking tokens, or plain file names given as a tool's path argument (AGENTS.md).
    assert all(" " not in p and (looks_like_path(p) or "/" not in p) for p in paths)
    assert "AGENTS.md" in paths
    assert len(paths) == len(set(paths)) < 120  # a ledger, not a directory listing
    # Hex colours discussed in the session (#b5bd68, 8abeb7) are not commits.
    assert kinds["commit"] == ["45ffe0a"]
    assert "Command exited with code 1" in kinds["tool_error"]
    assert not any("$" in u for u in kinds.get("url", []))
    assert len(entries) == len({e.value for e in entries})


def test_extraction_is_deterministic_and_first_seen_ordered():
    msgs = load_pi_messages(limit=300)
    first = extract_identifiers(chain(msgs))
    assert first == extract_identifiers(chain(msgs))
    assert first[0].value == "packages/coding-agent/docs/theme.md"


# --------------------------------------------------------------------------- merge


def _e(kind: str, value: str) -> LedgerEntry:
    return LedgerEntry(kind=kind, value=value)


def test_merge_keeps_previous_first_and_appends_new_without_duplicates():  # S4
    prev = Ledger(entries=(_e("doi", "10.1/a"), _e("url", "https://a.org")))
    merged = merge_ledger(prev, [_e("url", "https://a.org"), _e("path", "src/b.py")], 10_000)
    assert [e.value for e in merged.entries] == ["10.1/a", "https://a.org", "src/b.py"]
    assert merged.evicted == ()


def test_merge_evicts_least_critical_oldest_first_and_records_it():  # never silent
    prev = Ledger(entries=(
        _e("url", "https://old.example.org/1"), _e("doi", "10.1000/keep-me"),
        _e("tool_error", "old failure"), _e("zotero_item", "NM66T6EF"),
    ))
    new = [_e("path", "src/new/file.py"), _e("url", "https://new.example.org/2")]
    full = render_ledger(Ledger(entries=(*prev.entries, *new)))
    budget = estimate_text(full) - 15
    merged = merge_ledger(prev, new, budget)
    assert estimate_text(render_ledger(merged)) <= budget
    evicted = [e.value for e in merged.evicted]
    assert evicted[0] == "old failure"  # tool errors go first
    assert "10.1000/keep-me" in [e.value for e in merged.entries]
    assert "NM66T6EF" in [e.value for e in merged.entries]
    assert "dropped for size" in render_ledger(merged)


def test_evicted_identifier_seen_again_comes_back():
    prev = Ledger(entries=(_e("doi", "10.1/a"),), evicted=(_e("url", "https://b.org"),))
    merged = merge_ledger(prev, [_e("url", "https://b.org")], 10_000)
    assert [e.value for e in merged.entries] == ["10.1/a", "https://b.org"]
    assert merged.evicted == ()


_KIND = st.sampled_from(["doi", "url", "path", "commit", "zotero_item", "tool_error", "custom"])
_ENTRY = st.builds(LedgerEntry, kind=_KIND,
                   value=st.text("abcdefghijklmnopqrstuvwxyz0123456789/.", min_size=1,
                                 max_size=30),
                   note=st.text("abc ", max_size=20))


@settings(max_examples=200, deadline=None)
@given(st.lists(_ENTRY, max_size=25), st.lists(_ENTRY, max_size=25), st.integers(1, 600))
def test_merge_fits_budget_and_never_loses_silently(prev_entries, new, budget):
    prev = merge_ledger(Ledger(), prev_entries, 10**9)
    merged = merge_ledger(prev, new, budget)
    values = {e.value for e in (*prev_entries, *new)}
    kept = [e.value for e in merged.entries]
    assert set(kept) | {e.value for e in merged.evicted} == values  # nothing lost silently
    assert len(kept) == len(set(kept))
    if merged.entries:
        assert estimate_text(render_ledger(merged)) <= budget
    if estimate_text(render_ledger(Ledger(entries=tuple(prev.entries) + tuple(
            e for e in new if e.value not in {p.value for p in prev.entries})))) <= budget:
        assert merged.evicted == ()  # it fits: nothing is evicted
    # Repeated compaction with nothing new never loses an identifier that still fits.
    again = merge_ledger(merged, [], budget)
    assert again.entries == merged.entries


def test_merge_eviction_order_by_kind():
    entries = [_e(k, f"value-of-kind-{k}-" + "x" * 40)
               for k in ("doi", "zotero_item", "commit", "path", "url", "tool_error")]
    merged = merge_ledger(Ledger(), entries, estimate_text(render_ledger(
        Ledger(entries=tuple(entries[:2]), evicted=tuple(entries[2:])))))
    assert [e.kind for e in merged.entries] == ["doi", "zotero_item"]
    assert Counter(e.kind for e in merged.evicted) == Counter(
        ["commit", "path", "url", "tool_error"])
    assert [e.kind for e in merged.evicted][:3] == ["tool_error", "url", "path"]


def test_text_parts_of_tool_messages_give_dois_only():
    msg = Message(role="tool", parts=(ToolResultPart(call_id="c1", output=""),
                                      TextPart(text="see 10.1109/PPPS.2007.4345875 at a/b.py")))
    assert [(e.kind, e.value) for e in extract_identifiers(chain([msg]))] == [
        ("doi", "10.1109/PPPS.2007.4345875")]


def test_tool_call_string_input_and_nested_key_fields():
    call = Message(role="assistant", parts=(
        ToolCallPart(id="c1", name="zotero_get", input={"item": {"itemKey": "ABCD2345"}}),
        ToolCallPart(id="c2", name="raw", input="open ./scripts/run.sh now"),
    ))
    values = [(e.kind, e.value) for e in extract_identifiers(chain([call]))]
    assert values == [("zotero_key", "ABCD2345"), ("path", "./scripts/run.sh")]
