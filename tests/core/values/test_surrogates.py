"""Lone UTF-16 surrogates (issue 10): never a crash, replaced by U+FFFD at the boundary and
reported, through import -> store -> projection -> export and the CLI.

JavaScript agents cut strings by UTF-16 length; JSON then holds half a pair (`"\\ud83d"`),
which Python decodes to a code point that cannot be encoded as UTF-8.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextfold.cli.app import app
from contextfold.core.values.messages import ToolCallPart, text_message
from contextfold.core.values.surrogates import has_surrogates
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import project
from contextfold.formats import export_session, import_file
from contextfold.store import open_store

# Every code point, lone surrogates included (hypothesis leaves category Cs out by default).
ANY_CHAR = st.characters(blacklist_categories=())
any_text = st.text(ANY_CHAR, min_size=1, max_size=40)


def pi_file(path: Path, texts: list[str]) -> Path:
    """A Pi v3 session whose messages hold `texts`; json.dumps escapes lone surrogates the
    way JavaScript's JSON.stringify writes them."""
    lines = [{"type": "session", "version": 3, "id": "s1", "cwd": "/w",
              "timestamp": "2025-01-01T00:00:00Z"}]
    parent = None
    for i, text in enumerate(texts):
        entry = {"type": "message", "id": f"{i:08x}", "parentId": parent,
                 "timestamp": f"2025-01-01T00:00:{i % 60:02d}Z"}
        if i % 2 == 0:
            entry["message"] = {"role": "user", "content": text}
        else:
            entry["message"] = {"role": "assistant", "content": [{"type": "text", "text": text}],
                                "stopReason": "stop"}
        lines.append(entry)
        parent = entry["id"]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="ascii")
    return path


def encodable(value) -> None:
    """What a provider request, a database or a terminal needs: valid UTF-8."""
    json.dumps(value, ensure_ascii=False).encode("utf-8")


async def _round_trip(tmp: Path, texts: list[str]) -> None:
    result = import_file(pi_file(tmp / "s.jsonl", texts))
    surrogates = sum(has_surrogates(t) for t in texts)
    replaced = [w for w in result.warnings if "surrogate" in w]
    assert len(replaced) == surrogates  # reported, one warning per line that held one
    assert all(":" in w and "U+FFFD" in w for w in replaced)
    store = await open_store(str(tmp / "db.sqlite"))
    try:
        info = await store.import_tree(result.nodes, result.leaf_id, title="s")
        branch = await store.load_branch(info.id)
        assert isinstance(branch, Branch)
        assert [n.message.text for n in branch.nodes] == [n.message.text for n in result.nodes]
        await store.append(info.id, text_message("user", "more \ud83d text"))
        branch = await store.load_branch(info.id)
        assert branch.nodes[-1].message.text == "more \ufffd text"
        projection = project(branch)
        for fmt in ("openai", "anthropic"):
            encodable(export_session(projection, format=fmt))
    finally:
        await store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_text, min_size=2, max_size=6))
def test_any_unicode_survives_import_store_projection_export(texts):  # issue 10
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_round_trip(Path(tmp), texts))


def test_lone_surrogate_is_replaced_and_reported():  # issue 10
    with tempfile.TemporaryDirectory() as tmp:
        path = pi_file(Path(tmp) / "half.jsonl", ["cut emoji \ud83d", "fine"])
        result = import_file(path)
        assert result.nodes[0].message.text == "cut emoji \ufffd"
        assert result.warnings == ("half.jsonl:2: 1 lone UTF-16 surrogate (half of an emoji or "
                                   "other character, cut by a JavaScript agent) replaced with "
                                   "U+FFFD",)


def test_core_values_never_hold_a_lone_surrogate():  # issue 10
    call = ToolCallPart(id="c\udc00", name="n", input={"k\ud800": ["\udfff", 1]})
    assert call.id == "c\ufffd" and call.input == {"k\ufffd": ["\ufffd", 1]}
    encodable(call.model_dump(mode="json"))


def test_cli_import_with_surrogates_exits_0_with_warnings_in_json(tmp_path):  # issue 10
    path = pi_file(tmp_path / "half.jsonl", ["cut \udbff", "reply \udc00 here"])
    out = CliRunner().invoke(app, ["import", str(path), "--json", "--db",
                                   str(tmp_path / "c.db")])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert len(payload["warnings"]) == 2 and "U+FFFD" in payload["warnings"][0]


def test_clean_text_is_never_regex_scanned(monkeypatch):  # issue 26: O(1) on ASCII
    import contextfold.core.values.surrogates as surrogates

    class NoScan:
        def search(self, _text):
            raise AssertionError("regex scan of text without surrogates")

        subn = search

    monkeypatch.setattr(surrogates, "_LONE", NoScan())
    for text in ("plain ascii " * 1000, "caf\u00e9 \u6f22\u5b57 \U0001f600"):
        assert surrogates.replace_surrogates(text) == (text, 0)
        assert surrogates.without_surrogates(text) is text
        assert not surrogates.has_surrogates(text)


@settings(max_examples=300, deadline=None)
@given(st.text(ANY_CHAR, max_size=30))
def test_the_fast_path_agrees_with_the_regex(text):  # issue 26
    import re

    from contextfold.core.values.surrogates import REPLACEMENT, replace_surrogates

    assert replace_surrogates(text) == re.subn("[\ud800-\udfff]", REPLACEMENT, text)
    assert has_surrogates(text) == bool(re.search("[\ud800-\udfff]", text))
