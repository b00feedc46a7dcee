"""The service's session resource shows what the session cost (SPEC Q4): the recorded usage of
an imported Claude Code session priced at its model's rates, the same bill the library works
out from the same file, and a new one after a turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.core.money.costs import session_cost
from contextfold.core.money.prices import PriceBook
from contextfold.formats import import_file
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl"


async def test_q4_the_session_resource_shows_its_cost(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/import?title=imported", content=FIXTURE.read_bytes())
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        cost = (await c.get(f"/v1/sessions/{sid}")).json()["cost"]
        expected = session_cost(import_file(FIXTURE).nodes, PriceBook.packaged())
        assert expected.usd and expected.usd > 0  # the file records priced usage
        assert cost["usd"] == pytest.approx(expected.usd, abs=1e-6)
        assert cost["input_tokens"] == expected.requests.input_tokens
        assert cost["cached_tokens"] == expected.requests.cached_tokens > 0
        assert cost["full_history_usd"] == pytest.approx(expected.full_history.usd, abs=1e-6)
        assert cost["currency"] == "USD" and cost["summarizer_usd"] == 0

        fresh = await create(c)
        got = (await c.get(f"/v1/sessions/{fresh}")).json()["cost"]
        assert got["requests"]["requests"] == 0 and got["usd"] == 0
        await say(c, fresh, "hello there")
        # the offline model reports no usage: nothing billed, nothing invented
        again = (await c.get(f"/v1/sessions/{fresh}")).json()["cost"]
        assert again["input_tokens"] == 0 and again["usd"] == 0
