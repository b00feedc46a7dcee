"""One model, one window, one safe limit on every face (SPEC B1-B4): the CLI's `project`,
the service's session and projection, the proxy and an integration size `offline/echo` at
8,192 tokens alike (the CLI said 6,144 and the page 7,168: two rules for one model)."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.sizing.resolver import ModelProfile, ModelResolver
from contextfold.proxy import ProxyConfig
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def test_project_and_the_service_report_the_same_safe_limit(
        service_factory, db_url) -> None:  # noqa: F811  # B1 B4
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, model="offline/echo", context_window=8192)
        await say(c, sid, "a first question for every face")
        served = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        gauge = (await c.get(f"/v1/sessions/{sid}")).json()["gauge"]
        cli = await asyncio.to_thread(CliRunner().invoke, app, [
            "project", sid, "--model", "offline/echo", "--context-window", "8192",
            "--db", db_url, "--json"])
        assert cli.exit_code == 0, cli.output
        projected = json.loads(cli.stdout)
        # Without --model the CLI reads the session's recorded model: the same again.
        recorded = await asyncio.to_thread(CliRunner().invoke, app, [
            "project", sid, "--db", db_url, "--json"])
    proxy = ProxyConfig(upstream="http://127.0.0.1:9", windows={"offline/echo": 8192})
    langchain_like = ModelResolver().resolve("offline/echo", profile=ModelProfile(8192))
    limits = {served["limit"], gauge["safe_input_limit"], projected["safe_input_limit"],
              json.loads(recorded.stdout)["safe_input_limit"],
              proxy.resolver.resolve("offline/echo").budget.safe_input_limit,
              langchain_like.budget.safe_input_limit}
    assert limits == {6144}, limits
    assert projected["model"] == json.loads(recorded.stdout)["model"] == "offline/echo"
