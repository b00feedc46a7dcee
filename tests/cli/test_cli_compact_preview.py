"""`contextfold compact --preview` and `--summary-file` (SPEC M7), end to end in subprocesses:
the preview commits nothing and prints what would be committed with its base; the edited
file is committed as a new checkpoint marked as edited by the user; a stale base is refused
and nothing is written."""

from __future__ import annotations

import json

from tests.cli.test_cli import cli  # noqa: F401  (the fixture)
from tests.runtime.test_compaction_preview import EDITED


def _session_file(tmp_path, name: str = "chat.json"):
    messages = []
    for i in range(4):
        messages += [{"role": "user", "content": f"question {i} about the estimator " * 20},
                     {"role": "assistant", "content": f"answer {i} " * 20}]
    path = tmp_path / name
    path.write_text(json.dumps(messages))
    return path


def _checkpoints(run, sid: str) -> int:
    return sum(n["kind"] == "checkpoint" for n in run("show", sid)["nodes"])


def test_preview_then_commit_an_edit(cli, tmp_path):  # noqa: F811 (M7)
    sid = cli("import", str(_session_file(tmp_path)))["session_id"]
    preview = cli("compact", sid, "--preview", "--context-window", "16000")
    assert preview["status"] == "preview" and preview["summary"] and preview["base"]
    assert preview["summarized_messages"] > 0
    assert _checkpoints(cli, sid) == 0  # nothing was committed
    # Issue 40: a preview is explained as its commit would be (Q2).
    assert preview["explanation"]["trigger"] == "manual"
    assert preview["explanation"]["tokens_after"] == preview["tokens_after"]

    edited = tmp_path / "edited.md"
    edited.write_text(EDITED, encoding="utf-8")
    done = cli("compact", sid, "--summary-file", str(edited), "--base", preview["base"],
               "--context-window", "16000")
    assert done["status"] == "compacted" and done["edited"] is True
    assert done["summarizer"] == "user-edited"
    assert _checkpoints(cli, sid) == 1
    shown = cli("project", sid, "--context-window", "16000")
    assert "Compare the Kaplan-Meier and Cox" in json.dumps(shown["messages"])

    # The same base again: the session moved (the checkpoint), so nothing is written.
    stale = cli("compact", sid, "--summary-file", str(edited), "--base", preview["base"],
                "--context-window", "16000", expect=1)
    assert "moved since the preview" in stale["error"]
    assert _checkpoints(cli, sid) == 1


def test_bad_preview_and_edit_options(cli, tmp_path):  # noqa: F811 (M7)
    sid = cli("import", str(_session_file(tmp_path)))["session_id"]
    both = cli("compact", sid, "--preview", "--summary-file", str(tmp_path / "x"), expect=2)
    assert "one of them" in both["error"]
    alone = cli("compact", sid, "--base", "a@1", expect=2)
    assert "--summary-file" in alone["error"]
    missing = cli("compact", sid, "--summary-file", str(tmp_path / "nope.md"), expect=2)
    assert "nope.md" in missing["error"]
