"""A newcomer's first week, scripted (issue 41): one title, one model, one set of numbers for
one session on the CLI, the service and the page; words meant for users."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.messages import text_message
from contextfold.titles import UNTITLED
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def cli(*args: str) -> dict:
    """`cli_json` off the event loop (a command may run its own, on PostgreSQL)."""
    return await asyncio.to_thread(cli_json, *args)


async def test_a_blank_title_is_one_word_everywhere(service_factory, db_url) -> None:  # noqa: F811
    """A session without a title reads "Untitled" on the CLI and the service (the page shows
    the service's); a rename on the page is the title on the CLI too."""
    async with service_factory() as svc:
        blank = await svc.store.create_session()
        await svc.store.append(blank.id, text_message("user", "hello"))
        named = await svc.store.create_session(title="  ")  # blank is blank
        async with svc.client() as c:
            listed = {s["session_id"]: s["title"] for s in
                      (await c.get("/v1/sessions")).json()["sessions"]}
            assert listed == {blank.id: UNTITLED, named.id: UNTITLED}
            assert (await c.get(f"/v1/sessions/{blank.id}")).json()["title"] == UNTITLED
            cli_rows = (await cli("sessions", "--db", db_url))["sessions"]
            titles = {s["session_id"]: s["title"] for s in cli_rows}
            assert titles == listed
            renamed = await c.patch(f"/v1/sessions/{blank.id}", json={"title": "Trip notes"})
            assert renamed.json()["title"] == "Trip notes"
            cli_rows = (await cli("sessions", "--db", db_url))["sessions"]
            titles = {s["session_id"]: s["title"] for s in cli_rows}
            assert titles[blank.id] == "Trip notes"
            back = await c.patch(f"/v1/sessions/{blank.id}", json={"title": ""})
            assert back.json()["title"] == UNTITLED


FIXTURES = Path(__file__).parent / "fixtures"
REAL_SESSIONS = [FIXTURES / "pi-mono/large-session.jsonl",
                 *sorted((FIXTURES / "claude-code").glob("*.jsonl"))]
COST_KEYS = ("model", "usd", "full_history_usd", "as_sent_usd", "saved_usd", "input_tokens",
             "cached_tokens", "output_tokens", "compactions")


async def test_one_number_everywhere_over_the_real_sessions(
        service_factory, db_url) -> None:  # noqa: F811
    """The real Pi and Claude Code sessions, imported, one of them compacted: for each, the
    CLI (`sessions`, `project`, `context`) and the service (the list, the session, its
    projection and breakdown — what the page shows) give the same model, title, estimate,
    breakdown, cost and saving (issue 41)."""
    ids = [(await cli("import", str(path), "--db", db_url))["session_id"]
           for path in REAL_SESSIONS]
    # After a compaction no usage baseline holds the tools: both faces must count them.
    compacted = await cli("compact", ids[0], "--db", db_url)
    assert compacted["status"] == "compacted"
    rows = {r["session_id"]: r for r in (await cli("sessions", "--db", db_url))["sessions"]}
    async with service_factory() as svc, svc.client() as c:
        listed = {s["session_id"]: s for s in (await c.get("/v1/sessions")).json()["sessions"]}
        for sid in ids:
            one = (await c.get(f"/v1/sessions/{sid}")).json()
            projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
            context = (await c.get(f"/v1/sessions/{sid}/context")).json()
            project = await cli("project", sid, "--db", db_url)
            shown = await cli("context", sid, "--db", db_url)
            row = rows[sid]
            where = f"session {sid}"
            # model and title
            assert row["model"] == listed[sid]["model"] == one["model"] == project["model"] \
                == shown["model"], where
            assert row["model"] and row["model"] != "offline/echo", where
            assert row["title"] == listed[sid]["title"] == one["title"], where
            # the next request's estimate, and its breakdown
            assert project["estimated_tokens"] == projection["estimate"]["tokens"] \
                == context["used"] == shown["used"], where
            assert shown["parts"] == context["parts"], where
            assert sum(context["parts"].values()) == context["used"], where
            assert project["tools"] == ["history_search", "history_expand"], where
            # cost and saving: one definition, one set of figures
            assert {k: row["cost"][k] for k in COST_KEYS} == \
                {k: one["cost"][k] for k in COST_KEYS}, where
            assert context["saved_tokens"] == shown["saved_tokens"] == \
                context["full_history_tokens"] - context["used"], where
    # The compacted session's tools are counted once, not inflated by a measured total.
    assert context["parts"]["tools"] == shown["parts"]["tools"]
