"""One session, one model, one window: every face sizes and projects it alike (issue 23).

An agent talks through `contextfold proxy` (the official `openai` SDK, real HTTP, to the
scripted upstream) long enough for the proxy to compact. The same stored session is then
read by the library (`Conversation`), `contextfold project`, and the service's
`/projection`; the proxy's next forwarded request is compared with them. All four must
report the same safe limit, the same estimate of the next request and the same projected
messages (SPEC B1 B4 E1 E2 T3 Y2): before the one resolver and the one sizing policy, the
CLI and the page disagreed on the very same model and window.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.render.export import to_openai
from contextfold.core.sizing.resolver import ModelResolver
from contextfold.core.values.messages import text_message
from contextfold.providers.offline import OfflineModel
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.runtime import Conversation
from contextfold.store import open_store
from tests.fakeserver import Reply, fake_server
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)

WINDOW = 12_000
MODEL = "local-model"
WORDS = ("method", "archive", "letter", "chapter", "review", "edition", "reader", "scholar",
         "detective", "serial", "stage", "narrator", "colony", "reception", "footnote")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(words))


def _plain(messages: list[dict]) -> list[tuple[str, str]]:
    """Role and text of OpenAI messages, the way both a client and the exporter write them."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        out.append((m["role"], content or ""))
    return out


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'faces.db'}"


async def _settled(db_url: str) -> tuple[str, int]:
    """The proxied session once nothing runs on it (no lease, the revision holding)."""
    async with await open_store(db_url) as store:
        (info,) = await store.list_sessions()
        deadline = time.monotonic() + 60
        while True:
            await asyncio.sleep(0.5)
            again = await store.get_session(info.id)
            if again.branch_revision == info.branch_revision and \
                    await store.lease_holder(info.id) is None:
                return info.id, info.branch_revision
            assert time.monotonic() < deadline, "the proxy's session never settled"
            info = again


async def test_every_face_reports_one_limit_one_estimate_one_projection(
        service_factory, db_url, caplog):  # noqa: F811  # B1 B4 E1 E2 T3 Y2
    rng = random.Random(5)
    with fake_server(context_window=WINDOW) as upstream:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.openai_url,
                                        windows={MODEL: WINDOW}, db=db_url)).start()
        try:
            oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
            messages: list[dict] = []
            for turn in range(12):  # long turns: the proxy must compact along the way
                messages.append({"role": "user", "content": _text(rng, 700)})
                upstream.enqueue(Reply(text=f"Reply {turn}: " + _text(rng, 60)), kind="chat")
                reply = await asyncio.to_thread(oa.chat.completions.create, model=MODEL,
                                                messages=messages)
                messages.append({"role": "assistant",
                                 "content": reply.choices[0].message.content})
            # A short last turn: after it the auto check has nothing to do.
            messages.append({"role": "user", "content": "Thanks, noted."})
            upstream.enqueue(Reply(text="You are welcome."), kind="chat")
            reply = await asyncio.to_thread(oa.chat.completions.create, model=MODEL,
                                            messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            session_id, revision = await _settled(db_url)

            # --- the library
            capacity = ModelResolver().resolve(MODEL, context_window=WINDOW).capacity
            async with await open_store(db_url) as store:
                branch = await store.load_full_branch(session_id)
                assert any(n.checkpoint is not None for n in branch.nodes), "no compaction ran"
                conv = await Conversation.open(store, session_id, model=OfflineModel(MODEL),
                                               capacity=capacity, recall=False)
                library = {"limit": conv.gauge().safe_input_limit,
                           "tokens": conv.estimate().tokens,
                           "messages": _plain(to_openai(conv.projection()).messages)}
                probe = text_message("user", "Which chapter did we start with?")
                with_probe = conv.estimate((probe,)).tokens
                await conv.close()

            # --- the command line
            cli = await asyncio.to_thread(CliRunner().invoke, app, [
                "project", session_id, "--model", MODEL, "--context-window", str(WINDOW),
                "--db", db_url, "--json"])
            assert cli.exit_code == 0, cli.output
            projected = json.loads(cli.stdout)

            # --- the service
            async with service_factory(context_window=WINDOW) as svc, svc.client() as c:
                served = (await c.get(f"/v1/sessions/{session_id}/projection")).json()
                session = (await c.get(f"/v1/sessions/{session_id}")).json()
            assert session["model"] == MODEL and session["context_window"] == WINDOW
            # The service's sessions offer the recall tools (SPEC L2): the request it would
            # send carries their definitions on top of what the other faces send.
            served_tokens = served["estimate"]["tokens"]
            if served["estimate"]["method"] == "estimated":
                served_tokens -= served["estimate"]["breakdown"]["tools"]
            by_id = {n["id"]: n for n in served["messages"]}
            assert len(by_id) == len(served["messages"])

            # --- the proxy's next forwarded request
            caplog.set_level(logging.INFO, logger="contextfold.proxy")
            upstream.enqueue(Reply(text="Chapter one."), kind="chat")
            await asyncio.to_thread(oa.chat.completions.create, model=MODEL,
                                    messages=[*messages, {"role": "user",
                                                          "content": probe.text}])
            forwarded = upstream.requests[-1].messages
            line = next(r.getMessage() for r in reversed(caplog.records)
                        if "forwarded~" in r.getMessage())
        finally:
            proxy.stop()

    assert "compaction=-" in line  # the probe fitted: the proxy sent the same projection
    proxy_tokens = int(line.split("forwarded~", 1)[1].split()[0])
    limits = {library["limit"], projected["safe_input_limit"], served["limit"],
              session["gauge"]["safe_input_limit"],
              ModelResolver(windows={MODEL: WINDOW}).resolve(MODEL).budget.safe_input_limit}
    assert len(limits) == 1, limits
    assert library["tokens"] == projected["estimated_tokens"] == served_tokens
    assert proxy_tokens == with_probe
    assert library["messages"] == _plain(projected["messages"])
    assert _plain(forwarded) == [*library["messages"], ("user", probe.text)]
    assert len(served["messages"]) + (served["checkpoint"] is not None) == \
        len(library["messages"])
    assert revision > 0
