"""SPEC Q4, cost shown: `contextfold sessions` and the service's session resource bill a
stored session through one helper (`contextfold.billing`), so they cannot disagree — the
same model for replies whose usage names none (the session's set model, else its recorded
one, else what its metadata says, through the one resolver), the same prices. Expected
dollars are hand-computed from the packaged per-million prices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contextfold.billing import SERVICE_KEY, billed_model, session_bill, usage_cost
from contextfold.cli.render import usd
from contextfold.cli.session_cmds import _session_row
from contextfold.core.sizing.resolver import SIZED_FOR_KEY, ModelResolver
from contextfold.core.values.messages import Node, Usage
from contextfold.core.values.tree import Branch
from tests.builders import assistant, user
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

FIXTURES = Path(__file__).parent / "fixtures"
CC_SHORT = FIXTURES / "claude-code/short.jsonl"
T0 = datetime(2026, 12, 1, tzinfo=UTC)
# A reply whose usage names no model: its price is the session's model's.
ANONYMOUS = Usage(input=1_000, cache_read=20_000, cache_write=5_000, output=500)
# claude-sonnet-4-5: 1,000 x 3 + 20,000 x 0.3 + 5,000 x 3.75 + 500 x 15 = 35,250 / 1e6
SONNET_USD = 0.03525
# gpt-4o-mini (OpenAI charges no cache write, SPEC Q1):
# 1,000 x 0.15 + 20,000 x 0.075 + 5,000 x 0 + 500 x 0.6 = 1,950 / 1e6
MINI_USD = 0.00195


def chain(*payloads, prefix: str = "n") -> list[Node]:
    out: list[Node] = []
    for i, payload in enumerate(payloads):
        out.append(Node(id=f"{prefix}{i}", parent_id=out[-1].id if out else None, payload=payload,
                        created_at=T0 + timedelta(seconds=10 * i)))
    return out


def test_q4_usage_is_priced_at_its_model_by_hand() -> None:
    named = Usage(input=2_000, cache_read=8_000, output=300, model="gpt-4o-mini")
    # 2,000 x 0.15 + 8,000 x 0.075 + 300 x 0.6 = 300 + 600 + 180 = 1,080 / 1e6
    assert usage_cost(named).usd == pytest.approx(0.00108)
    assert usage_cost(named, "claude-sonnet-4-5").usd == pytest.approx(0.00108)  # its own
    assert usage_cost(ANONYMOUS, "claude-sonnet-4-5").usd == pytest.approx(SONNET_USD)
    unpriced = usage_cost(ANONYMOUS, "my-local-model")
    assert unpriced.usd is None  # no price: tokens counted, dollars unknown, never zero
    assert (unpriced.input_tokens, unpriced.cached_tokens, unpriced.cache_write_tokens,
            unpriced.output_tokens) == (1_000, 20_000, 5_000, 500)


def test_q4_the_sessions_model_set_then_recorded_then_written_then_default() -> None:
    recorded = Branch(nodes=tuple(chain(user("q"), assistant("a", model="gpt-4o"))))
    bare = Branch(nodes=tuple(chain(user("q"), assistant("a", usage=ANONYMOUS))))
    service = {SERVICE_KEY: {"model": "claude-sonnet-4-5"}}
    proxied = {"proxy": {"model": "gpt-4o-mini"},
               SIZED_FOR_KEY: {"model": "gpt-4.1-mini", "context_window": 50_000}}
    assert billed_model(recorded, service) == "claude-sonnet-4-5"  # set wins (SPEC B4)
    assert billed_model(recorded, proxied) == "gpt-4o"  # then the branch's
    assert billed_model(bare, proxied) == "gpt-4.1-mini"  # then what it was sized for
    assert billed_model(bare, {"proxy": {"model": "gpt-4o-mini"}}) == "gpt-4o-mini"
    assert billed_model(bare, {}, ModelResolver(default_model="gpt-4o")) == "gpt-4o"
    # A set model no catalog sizes is still the session's (an override may price it).
    assert billed_model(bare, {SERVICE_KEY: {"model": "acme/unknown-9"}}) == "acme/unknown-9"
    # The whole bill follows: the anonymous reply at the set model's prices.
    assert session_bill(bare, service).usd == pytest.approx(SONNET_USD)
    # gpt-4.1-mini: 1,000 x 0.4 + 20,000 x 0.1 + 5,000 x 0 + 500 x 1.6 = 3,200 / 1e6
    assert session_bill(bare, proxied).usd == pytest.approx(0.0032)


def test_the_service_key_is_the_services_own() -> None:
    from contextfold.server.sessions import META_KEY

    assert META_KEY == SERVICE_KEY


async def test_q4_the_cli_row_and_the_service_resource_show_one_bill(
        service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        nodes = chain(user("q"), assistant("a", usage=ANONYMOUS))
        set_model = await svc.store.import_tree(
            nodes, nodes[-1].id, title="set",
            metadata={SERVICE_KEY: {"model": "claude-sonnet-4-5"}})
        nodes = chain(user("q"), assistant("a", usage=ANONYMOUS), prefix="m")
        sized = await svc.store.import_tree(
            nodes, nodes[-1].id, title="proxied",
            metadata={SIZED_FOR_KEY: {"model": "gpt-4o-mini", "context_window": 64_000}})
        r = await c.post("/v1/import?title=imported", content=CC_SHORT.read_bytes())
        assert r.status_code == 201, r.text
        imported = await svc.store.get_session(r.json()["session_id"])
        for info, expected in ((set_model, SONNET_USD), (sized, MINI_USD), (imported, None)):
            served = (await c.get(f"/v1/sessions/{info.id}")).json()["cost"]
            row = await _session_row(svc.store, await svc.store.get_session(info.id))
            assert row["cost"] == served  # one helper, one bill, every field
            if expected is not None:
                assert served["usd"] == pytest.approx(expected, abs=1e-9)
            else:
                assert served["usd"] > 0 and served["cached_tokens"] > 0  # recorded usage


# ------------------------------------------------------------------ the table


@pytest.fixture
def cf(tmp_path):
    env = {**os.environ, "CONTEXTFOLD_DB": str(tmp_path / "cf.db")}

    def run(*args: str, columns: int = 200) -> str:
        proc = subprocess.run([sys.executable, "-m", "contextfold", *args],
                              capture_output=True, text=True, timeout=300,
                              env={**env, "COLUMNS": str(columns)})
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        return proc.stdout

    return run


def test_q4_sessions_shows_cost_and_saved_at_100_columns_and_fits_80(cf, tmp_path):
    priced = json.loads(cf("import", str(CC_SHORT), "--json"))["session_id"]
    chat = tmp_path / "chat.json"  # no usage recorded: nothing known, nothing invented
    chat.write_text(json.dumps([{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}]))
    unbilled = json.loads(cf("import", str(chat), "--json"))["session_id"]
    rows = {r["session_id"]: r for r in json.loads(cf("sessions", "--json"))["sessions"]}
    cost = rows[priced]["cost"]
    assert cost["usd"] > 0 and cost["requests"]["requests"] == 1
    assert set(cost) >= {"currency", "usd", "full_history_usd", "saved_usd", "input_tokens",
                         "cached_tokens", "cache_write_tokens", "output_tokens",
                         "summarizer_usd", "compactions"}
    assert rows[unbilled]["cost"]["requests"]["requests"] == 0

    lines = cf("sessions", columns=100).splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    header = lines[0].split()
    assert "cost" in header and "saved" in header
    (row,) = [line for line in lines if line.startswith(priced)]
    assert usd(cost["usd"]) in row.split() and usd(cost["saved_usd"]) in row.split()
    (row,) = [line for line in lines if line.startswith(unbilled)]
    assert row.split().count("—") == 2  # cost and saved unknown, not "$0.00"

    narrow = cf("sessions", columns=80).splitlines()
    assert all(len(line) <= 80 for line in narrow), narrow
    assert any(line.startswith(priced) for line in narrow)


def test_the_table_writes_dollars_to_the_cent_and_under_a_cent() -> None:
    assert usd(None) == "—"
    assert (usd(0), usd(10.543), usd(1234.5), usd(0.0042)) == ("$0.00", "$10.54", "$1,234.50",
                                                                "$0.0042")
    assert (usd(-0.16), usd(-0.00001)) == ("-$0.16", "$0.0000")
