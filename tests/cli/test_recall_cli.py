"""`contextfold recall` end to end on a real Claude Code session (SPEC L1, L4)."""

from __future__ import annotations

from tests.cli.test_cli import CC_LONG, cli  # noqa: F401  (the fixture)

PATH = "priv/repo/migrations/20260211104759_replace_pane_id_with_session_id.exs"


def test_recall_finds_compacted_messages_by_identifier(cli):  # noqa: F811  # L1 L2
    sid = cli("import", str(CC_LONG))["session_id"]
    done = cli("compact", sid)
    assert done["status"] == "compacted"
    found = cli("recall", sid, PATH)
    assert found["session_id"] == sid and found["query"] == PATH
    assert found["matches"], "the path is in the imported history"
    first = found["matches"][0]
    assert set(first) >= {"node_id", "position", "turn", "role", "created_at", "snippet"}
    assert PATH in first["snippet"] or "replace_pane_id" in first["snippet"]
    assert len(cli("recall", sid, PATH, "--limit", "1")["matches"]) == 1
    # Positions are branch positions; the match was compacted out of the projection.
    branch = [n["id"] for n in cli("show", sid)["nodes"] if n["on_branch"]]
    assert all(branch[m["position"]] == m["node_id"] for m in found["matches"])  # L4
    kept = branch.index(done["first_kept_id"]) if done["first_kept_id"] else len(branch)
    assert first["position"] < kept


def test_recall_bad_input_exits_2(cli):  # noqa: F811  # L1
    sid = cli("import", str(CC_LONG))["session_id"]
    assert "nothing to search" in cli("recall", sid, "?!", expect=2)["error"]
    assert cli("recall", "no-such-session", "x", expect=2)["type"] == "SessionNotFoundError"
