"""Identifiers typed in prose (issue 11): Zotero keys, arXiv ids, ISBNs, PMIDs, issue refs,
error codes — captured from what the user or assistant writes, with a false-positive guard
checked by property tests on ordinary English, Japanese and code."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.text.identifiers import USER_CONSTRAINT, USER_WRITTEN, extract_identifiers
from contextfold.core.text.prose_identifiers import prose_identifiers
from tests.builders import assistant, chain, tool_call, tool_result, user
from tests.core.render.test_serialize import load_pi_messages

ROOT = Path(__file__).parents[3]
FIXTURES = Path(__file__).parents[2] / "fixtures"


def _real_zotero_keys() -> list[str]:
    """Every object key of the real Zotero API responses (items, collections, attachments)."""
    keys: set[str] = set()
    for path in (FIXTURES / "zotero").glob("*.json"):
        keys.update(re.findall(r'"(?:key|parentItem)"\s*:\s*"([A-Z0-9]{8})"', path.read_text()))
    return sorted(keys)


REAL_KEYS = _real_zotero_keys()


def _keys(text: str) -> list[str]:
    return [e.value for e in prose_identifiers(text) if e.kind == "zotero_key"]


# ------------------------------------------------------------------ corpora of ordinary text


def _english_sentences() -> list[str]:
    """Real English prose: this project's docs, split into sentences."""
    lines = [ln for p in sorted((ROOT / "docs").glob("*.md"))
             for ln in p.read_text(encoding="utf-8").splitlines()
             if not ln.lstrip().startswith("|")]  # generated tables are data, not prose
    # Code spans, quoted keys and ids mixing letters and digits (hashes, transcript ids).
    text = re.sub(r"`[^`]*`|\S*[A-Z0-9]{8}\S*|\S*(?:[A-Za-z]\S*\d|\d\S*[A-Za-z])\S*", " ",
                  " ".join(lines))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 4]


def _japanese_lines() -> list[str]:
    """Real Japanese prose: the project's two source documents."""
    lines: list[str] = []
    for path in sorted((FIXTURES / "seeds").glob("*.txt")):
        lines += [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()
                  if ln.strip()]
    return lines


def _code_lines() -> list[str]:
    """Real code: this project's source and the code a real Pi session read and ran (files
    that hold real Zotero keys as data are left out: their keys are true positives)."""
    lines: list[str] = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        if path.name not in ("demo_session.py", "prose_identifiers.py"):
            lines += [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for msg in load_pi_messages():
        for result in msg.tool_results:
            lines += [ln for ln in result.output.splitlines() if ln.strip()]
    return lines


ENGLISH = _english_sentences()
JAPANESE = _japanese_lines()
CODE = _code_lines()
SHOUTED_WORDS = ["DATABASE", "SETTINGS", "ABSTRACT", "CHILDREN", "STRENGTH", "IMPORTANT",
                 "WARNINGS", "FINDINGS", "CALLBACK", "HTTP2", "UTF8", "SHA256", "X86"]


def test_corpora_are_real_and_large():  # the property tests below draw from these
    assert len(ENGLISH) > 200 and len(JAPANESE) > 50 and len(CODE) > 2000


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ENGLISH), min_size=1, max_size=6),
       st.lists(st.sampled_from(SHOUTED_WORDS), max_size=4), st.booleans())
def test_ordinary_english_yields_no_zotero_key(sentences, shouted, upper):
    text = " ".join(sentences + shouted)
    assert _keys(text.upper() if upper else text) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(JAPANESE), min_size=1, max_size=8))
def test_ordinary_japanese_yields_no_zotero_key(lines):
    assert _keys("\n".join(lines)) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(CODE), min_size=1, max_size=40))
def test_ordinary_code_yields_no_zotero_key(lines):
    assert _keys("\n".join(lines)) == []


def test_whole_corpora_yield_no_zotero_key():
    assert _keys(" ".join(ENGLISH)) == []
    assert _keys("\n".join(JAPANESE)) == []
    assert _keys("\n".join(CODE)) == []


# ------------------------------------------------------------------ real keys are captured


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(REAL_KEYS), st.sampled_from([
    "Please open Zotero item {k} and read its abstract.",
    "Zoteroのアイテム{k}を開いてください。",
    "The attachment key is {k}.",
    "Compare item {k} with the others.",
    "Cite item ({k}) in the second paragraph.",
]))
def test_real_zotero_keys_typed_in_prose_are_captured(key, template):
    assert _keys(template.format(k=key)) == [key]


def test_every_real_key_is_in_the_zotero_alphabet_and_found_after_item():
    assert len(REAL_KEYS) >= 30
    for key in REAL_KEYS:
        assert _keys(f"open item {key}") == [key]


def test_key_lists_and_digit_keys_without_context():
    assert _keys("items K7QX4M2P, KQXVMBPN and PQRSTVWX") == ["K7QX4M2P", "KQXVMBPN",
                                                             "PQRSTVWX"]
    assert _keys("compare NM66T6EF to PQKBRC33") == ["NM66T6EF", "PQKBRC33"]
    # An all-letter token needs a word saying it is a key; a glued or pathed one is no key.
    assert _keys("compare KQXVMBPN to the rest") == []
    assert _keys("see /data/K7QX4M2P/x.pdf and 0xK7QX4M2P and K7QX4M2P-draft") == []
    assert _keys("a number 23456789 is not a key") == []


# ------------------------------------------------------------------ other typed identifiers


def _found(text: str) -> list[tuple[str, str]]:
    return [(e.kind, e.value) for e in prose_identifiers(text)]


def test_arxiv_isbn_pmid():
    assert _found("see arXiv:2401.01234v2, arxiv 2312.00001 and arXiv:hep-th/9901001") == [
        ("arxiv", "2401.01234v2"), ("arxiv", "2312.00001"), ("arxiv", "hep-th/9901001")]
    assert _found("a bare 2401.01234 is a number") == []
    # ISBN checksums are verified: a mistyped one is not recorded as an identifier.
    assert _found("ISBN 978-0-306-40615-7, ISBN-10: 0-306-40615-2, ISBN 978-0-306-40615-8") == [
        ("isbn", "978-0-306-40615-7"), ("isbn", "0-306-40615-2")]
    assert _found("PMID: 12345678 and PMC1234567") == [("pmid", "12345678"),
                                                       ("pmid", "PMC1234567")]


def test_issue_references_and_error_codes():
    assert _found("fixed in openai/openai-python#1234, see PR #56 and issue 7") == [
        ("issue", "openai/openai-python#1234"), ("issue", "#56"), ("issue", "#7")]
    assert _found("error[E0308] then TS2345, ENOENT, a KeyError and HTTP 429") == [
        ("error_code", "E0308"), ("error_code", "TS2345"), ("error_code", "ENOENT"),
        ("error_code", "KeyError"), ("error_code", "HTTP 429")]
    assert _found("an Error in the error handler, the #1 priority, issue tracker") == []


# ------------------------------------------------------------------ through the ledger extraction


def test_user_and_assistant_prose_keys_reach_the_ledger_with_priority():
    nodes = chain([
        user("Please open Zotero item K7QX4M2P and check 10.1234/abc.5. "
             "Never overwrite refs/library.bib."),
        assistant("Item K7QX4M2P cites arXiv:2401.01234; I saw NM66T6EF too."),
    ])
    by_value = {e.value: e for e in extract_identifiers(nodes)}
    assert by_value["K7QX4M2P"].kind == "zotero_key"
    assert by_value["K7QX4M2P"].priority == USER_WRITTEN
    assert by_value["10.1234/abc.5"].priority == USER_WRITTEN
    assert by_value["refs/library.bib"].priority == USER_CONSTRAINT
    assert by_value["2401.01234"].priority == 0  # only the assistant wrote it
    assert by_value["NM66T6EF"].priority == 0


def test_a_constraint_keeps_its_priority_when_seen_again_in_tool_traffic():
    nodes = chain([
        user("Don't touch data/raw.csv."),
        tool_call("c1", "read", {"path": "data/raw.csv"}),
        tool_result("c1", "a,b"),
    ])
    [entry] = [e for e in extract_identifiers(nodes) if e.value == "data/raw.csv"]
    assert entry.priority == USER_CONSTRAINT


def test_typed_key_upgraded_by_a_later_tool_record_keeps_user_priority():
    item = json.loads((FIXTURES / "zotero" / "item_doc.json").read_text())
    key = item["key"]
    nodes = chain([user(f"Open item {key}."), tool_call("c1", "zotero_get_item", {}),
                   tool_result("c1", json.dumps(item))])
    [entry] = [e for e in extract_identifiers(nodes) if e.value == key]
    assert entry.kind == "zotero_item" and entry.note and entry.priority == USER_WRITTEN
