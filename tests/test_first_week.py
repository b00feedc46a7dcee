"""A newcomer's first week, scripted (issue 41): one title, one model, one set of numbers for
one session on the CLI, the service and the page; words meant for users."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.messages import text_message
from contextfold.titles import UNTITLED
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


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
