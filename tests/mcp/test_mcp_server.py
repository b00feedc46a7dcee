"""`contextfold mcp` (SPEC L2, L4, L6, N1): a real MCP client (the SDK's `ClientSession`) lists
the tools and calls them, over stdio and over streamable HTTP, against a store seeded
through the proxy: a compacted session whose folded part holds a fact only search finds."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from mcp import ClientSession
from tests.fakeserver import Reply, ToolCallSpec, fake_server

WINDOW = 10_000
KEY = "sk-ant-mcp-test"
FACT = "the staging database password is KESTREL-7731"
CLAUDE_UA = "claude-cli/2.1.197 (external, cli)"
TOOLS = [{"name": "read", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
SRC = str(Path(__file__).resolve().parents[2] / "src")
ROOT = str(Path(__file__).resolve().parents[2])
EXPECTED_TOOLS = {"history_search", "history_expand", "pins_list", "pin_add"}


def seed(proxy_url: str, upstream: Any, workdir: str, *, first: str, rounds: int = 14,
         user_agent: str = CLAUDE_UA, label: str | None = None,
         tools: list[dict[str, Any]] = TOOLS,
         messages: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """An agent's tool loop through the proxy (Anthropic Messages), long enough to compact;
    `messages`: a conversation to continue (extended in place)."""
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "user-agent": user_agent}
    if label:
        headers["x-contextfold-session"] = label
    system = f"You are a coding agent.\n<env>\nWorking directory: {workdir}\n</env>"
    if messages is None:
        messages = []
    if not messages:
        messages.append({"role": "user", "content": first})
    bodies = []
    start = sum(1 for m in messages if m["role"] == "assistant")
    with httpx.Client(base_url=proxy_url, headers=headers, timeout=60) as client:
        for r in range(start, start + rounds):
            upstream.enqueue(Reply(text=f"round {r}", tool_calls=(
                ToolCallSpec("read", {"path": f"f{r}.py"}, id=f"toolu_{r}"),)))
            reply = client.post("/v1/messages", json={
                "model": "local-model", "max_tokens": 500, "system": system,
                "tools": tools, "messages": messages})
            assert reply.status_code == 200, reply.text
            content = reply.json()["content"]
            messages.append({"role": "assistant", "content": content})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": f"# f{r}\n"
                 + "value = 1\n" * 160} for b in content if b["type"] == "tool_use"]})
            bodies.append(reply.json())
    return [r.body for r in upstream.requests if not r.is_summary]


@pytest.fixture
def upstream() -> Iterator[Any]:
    with fake_server(context_window=WINDOW, api_key=KEY) as fake:
        yield fake


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cf.db'}"


@pytest.fixture
def proxy(upstream: Any, db: str) -> Iterator[ProxyThread]:
    p = ProxyThread(ProxyConfig(upstream=upstream.base_url, windows={"*": WINDOW},
                                db=db)).start()
    yield p
    p.stop()


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def stdio(db: str, cwd: str, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "contextfold", "mcp", "--db", db, *extra],
                                 env=env(), cwd=cwd)


@asynccontextmanager
async def over_stdio(db: str, cwd: str, *extra: str, name: str = "claude-code"):
    from mcp.types import Implementation

    async with stdio_client(stdio(db, cwd, *extra)) as (read, write), \
            ClientSession(read, write, client_info=Implementation(name=name,
                                                                  version="1")) as session:
        await session.initialize()
        yield session


def result(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content
    return json.loads(call.content[0].text)


async def node_with(db: str, text: str) -> str:
    """The id of the stored message that holds `text` (in whichever session)."""
    store = await open_store(db)
    try:
        for info in await store.list_sessions():
            for node in await store.load_tree(info.id):
                if node.message is not None and text in node.message.text:
                    return node.id
        raise AssertionError(f"no message holds {text!r}")
    finally:
        await store.close()


async def folded_position(db: str, session_id: str) -> int:
    """Position of the latest checkpoint on the session's full branch."""
    store = await open_store(db)
    try:
        branch = await store.load_full_branch(session_id)
        return max(i for i, n in enumerate(branch.nodes) if n.checkpoint is not None)
    finally:
        await store.close()


def test_stdio_lists_the_tools_and_search_finds_a_folded_fact_of_this_conversation_l2_l4(
        proxy, upstream, db, tmp_path):
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    seed(proxy.url, upstream, str(project), first=f"Remember: {FACT}. Now read every file.")
    # Another conversation of the same client in another directory holds another password.
    seed(proxy.url, upstream, str(other), first="Remember: the password is OSPREY-1100.",
         rounds=2)

    async def go() -> None:
        async with over_stdio(db, str(project)) as session:
            tools = await session.list_tools()
            assert {t.name for t in tools.tools} == EXPECTED_TOOLS
            found = result(await session.call_tool("history_search",
                                                   {"query": "KESTREL-7731"}))
            # L7: this directory's conversation, found by the directory the agent stated.
            assert found["found_by"].startswith("working directory")
            assert [m["role"] for m in found["matches"]] == ["user"]
            hit = found["matches"][0]
            assert hit["position"] < await folded_position(db, found["session_id"])
            # The other conversation's password is not in this one (L4).
            none = result(await session.call_tool("history_search", {"query": "OSPREY-1100"}))
            assert none["matches"] == [] and none["session_id"] == found["session_id"]
            # Out-of-range arguments are the tool's error naming them (issue 38).
            for bad in (-5, 1e20, 0):
                refused = await session.call_tool("history_search",
                                                  {"query": "KESTREL-7731", "limit": bad})
                assert refused.is_error and "limit" in refused.content[0].text
                assert "Traceback" not in refused.content[0].text
            refused = await session.call_tool("history_expand",
                                              {"node_id": hit["node_id"], "before": -1})
            assert refused.is_error and "before" in refused.content[0].text
            expanded = result(await session.call_tool(
                "history_expand", {"node_id": hit["node_id"], "after": 2, "max_tokens": 300}))
            assert FACT in expanded["messages"][0]["text"]
            assert expanded["budget_tokens"] == 300 and expanded["truncated"]
            # A node of the other conversation answers like a missing one (L4).
            other_node = await node_with(db, "OSPREY-1100")
            bad = await session.call_tool("history_expand", {"node_id": other_node})
            missing = await session.call_tool("history_expand", {"node_id": "no-such-node"})
            assert bad.is_error and missing.is_error
            assert "OSPREY" not in bad.content[0].text

    asyncio.run(go())


def test_pins_added_over_mcp_reach_the_next_proxied_request_n1(proxy, upstream, db, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    conversation: list[dict[str, Any]] = []
    seed(proxy.url, upstream, str(project), first=f"Remember: {FACT}.", rounds=2,
         messages=conversation)

    async def go() -> str:
        async with over_stdio(db, str(project), "--model-window", f"*={WINDOW}") as session:
            assert result(await session.call_tool("pins_list", {}))["pins"] == []
            added = result(await session.call_tool("pin_add", {"text": "deploy only on Fridays"}))
            assert added["pinned"]["text"] == "deploy only on Fridays"
            assert added["pin_budget_tokens"] < WINDOW // 5  # the proxy's window, sized
            listed = result(await session.call_tool("pins_list", {}))
            assert [p["text"] for p in listed["pins"]] == ["deploy only on Fridays"]
            refused = await session.call_tool("pin_add", {"text": "word " * 5_000})
            assert refused.is_error and "pin" in refused.content[0].text.lower()
            neither = await session.call_tool("pin_add", {})
            assert neither.is_error
            return listed["session_id"]

    session_id = asyncio.run(go())
    # The agent's tool loop goes on. A pin made during it waits for the next message the
    # person types: right before a tool result it would split the calls from their results
    # (K1), and the requests already sent are never edited (Q5).
    before = len(upstream.requests)
    seed(proxy.url, upstream, str(project), first="", rounds=1, messages=conversation)
    looped = [r.body for r in upstream.requests[before:] if not r.is_summary]
    assert looped and "deploy only on Fridays" not in json.dumps(looped[-1])
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "user-agent": CLAUDE_UA}
    system = f"You are a coding agent.\n<env>\nWorking directory: {project}\n</env>"
    with httpx.Client(base_url=proxy.url, headers=headers, timeout=60) as client:
        for reply, then in ((Reply(text="the loop is done"), "Now ship it."),
                            (Reply(text="shipped"), None)):
            upstream.enqueue(reply)
            answer = client.post("/v1/messages", json={
                "model": "local-model", "max_tokens": 500, "system": system, "tools": TOOLS,
                "messages": conversation})
            assert answer.status_code == 200, answer.text
            conversation.append({"role": "assistant", "content": answer.json()["content"]})
            if then is not None:
                conversation.append({"role": "user", "content": then})
    later = [r.body for r in upstream.requests[before:] if not r.is_summary]
    assert "deploy only on Fridays" in json.dumps(later[-1])
    assert "deploy only on Fridays" not in json.dumps(later[-2])  # it went at the end (Q5)
    sessions = asyncio.run(_sessions(db))
    assert session_id in sessions


async def _sessions(db: str) -> list[str]:
    store = await open_store(db)
    try:
        return [s.id for s in await store.list_sessions()]
    finally:
        await store.close()


def test_which_conversation_id_label_then_client_l7(proxy, upstream, db, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    seed(proxy.url, upstream, str(a), first="alpha fact ALBATROSS-1", rounds=1, label="task-a")
    seed(proxy.url, upstream, str(b), first="beta fact BITTERN-2", rounds=1,
         user_agent="opencode/1.18.33")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    async def go() -> None:
        # The label the agent sent in x-contextfold-session names its conversation.
        async with over_stdio(db, str(elsewhere), "--session", "task-a") as session:
            found = result(await session.call_tool("history_search", {"query": "ALBATROSS-1"}))
            assert found["found_by"] == "session label task-a" and found["matches"]
            # An explicit session id argument wins over everything.
            other = result(await session.call_tool("history_search", {"query": "BITTERN-2"}))
            assert other["matches"] == []
        # No directory known: the latest proxied session of this client (OpenCode here).
        async with over_stdio(db, str(elsewhere), name="opencode") as session:
            found = result(await session.call_tool("history_search", {"query": "BITTERN-2"}))
            assert found["found_by"] == "latest proxied session of opencode"
            sid = found["session_id"]
            by_id = result(await session.call_tool(
                "history_search", {"query": "ALBATROSS-1", "session_id": sid}))
            assert by_id["matches"] == [] and by_id["found_by"] == "session id"
        # A client with no proxied session and no directory gets an error, not another's.
        async with over_stdio(db, str(elsewhere), name="some-editor") as session:
            miss = await session.call_tool("history_search", {"query": "ALBATROSS-1"})
            assert miss.is_error and "session_id" in miss.content[0].text

    asyncio.run(go())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(db: str, proxy: ProxyThread, tmp_path: Path) -> Iterator[str]:
    with start_http(db) as url:
        yield url


@contextmanager
def start_http(db: str, *extra: str) -> Iterator[str]:
    """`contextfold mcp --http` as a process on a free port; its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "contextfold", "mcp", "--http", "--port",
                             str(port), "--db", db, *extra], env=env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                why = proc.stderr.read().decode() if proc.stderr else "no start"
                raise RuntimeError(why) from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_streamable_http_lists_and_calls_by_header_l2_l4_y8(proxy, upstream, db, tmp_path,
                                                            http_server):
    import httpx2

    project = tmp_path / "project"
    project.mkdir()
    seed(proxy.url, upstream, str(project), first=f"Remember: {FACT}. Now read every file.",
         label="my-task")

    async def go() -> None:
        async with httpx2.AsyncClient(headers={"x-contextfold-session": "my-task"},
                                      timeout=30) as client, \
                streamable_http_client(http_server, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            assert {t.name for t in tools.tools} == EXPECTED_TOOLS
            found = result(await session.call_tool("history_search",
                                                   {"query": "KESTREL-7731"}))
            assert found["found_by"] == "session label my-task"
            assert found["matches"][0]["position"] < await folded_position(
                db, found["session_id"])

    asyncio.run(go())
    # Y8: a foreign host name is refused before the SDK sees the request.
    refused = httpx.post(http_server, json={}, headers={"host": "evil.example"})
    assert refused.status_code == 421


def test_the_recall_note_names_the_clients_mcp_tools_l6(proxy, upstream, db, tmp_path):
    mcp_tools = [*TOOLS, *({"name": f"mcp__contextfold__{n}", "description": "recall",
                            "input_schema": {"type": "object"}}
                           for n in ("history_search", "history_expand"))]
    bodies = seed(proxy.url, upstream, str(tmp_path), first=f"Remember: {FACT}.",
                  tools=mcp_tools)
    compacted = [b for b in bodies if "[contextfold checkpoint]" in json.dumps(b)]
    assert compacted
    text = json.dumps(compacted[-1]["messages"][0])
    assert "mcp__contextfold__history_search" in text
    assert "mcp__contextfold__history_expand" in text


def test_without_the_mcp_tools_the_recall_note_is_the_default_l3(proxy, upstream, db,
                                                                  tmp_path):
    bodies = seed(proxy.url, upstream, str(tmp_path), first=f"Remember: {FACT}.")
    compacted = [b for b in bodies if "[contextfold checkpoint]" in json.dumps(b)]
    assert compacted
    assert "mcp__" not in json.dumps(compacted[-1]["messages"][0])


def test_a_missing_sdk_names_the_extra(tmp_path):
    # The base install has no `mcp`: the command says which extra to install.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "mcp").mkdir()
    (blocker / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError("
                                                "'no mcp', name='mcp')\n")
    run = subprocess.run([sys.executable, "-m", "contextfold", "mcp", "--db",
                          f"sqlite:///{tmp_path / 'x.db'}"], capture_output=True, text=True,
                         env={**env(), "PYTHONPATH": f"{blocker}{os.pathsep}{SRC}"},
                         stdin=subprocess.DEVNULL, timeout=60)
    assert run.returncode != 0
    assert "contextfold[mcp]" in run.stderr


async def _tenant_sessions(db: str, workdir: str) -> tuple[str, str]:
    """The same directory's conversation stored for tenant `default` and tenant `acme`."""
    from tests.builders import user

    store = await open_store(db)
    try:
        ids = []
        for tenant, fact in (("default", "HARRIER-5"), ("acme", "MERLIN-9")):
            scoped = store.for_tenant(tenant)
            info = await scoped.create_session(metadata={"proxy": {
                "client": CLAUDE_UA, "model": "local-model", "cwd": workdir}})
            await scoped.append(info.id, user(f"the secret is {fact}"))
            ids.append(info.id)
        return ids[0], ids[1]
    finally:
        await store.close()


def test_tenant_scoping_l4(db, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    default_id, _acme_id = asyncio.run(_tenant_sessions(db, str(project)))

    async def go() -> None:
        async with over_stdio(db, str(project), "--tenant", "acme") as session:
            found = result(await session.call_tool("history_search", {"query": "MERLIN-9"}))
            assert found["matches"] and found["found_by"].startswith("working directory")
            assert result(await session.call_tool(
                "history_search", {"query": "HARRIER-5"}))["matches"] == []
            # Another tenant's session id is no session at all for this server (L4, W1).
            other = await session.call_tool("history_search",
                                            {"query": "HARRIER-5", "session_id": default_id})
            assert other.is_error and "HARRIER" not in other.content[0].text

    asyncio.run(go())


async def _labelled_for_tenants(db: str) -> str:
    """A session labelled `task-x` for tenants `default` and `acme`; acme's token."""
    from tests.builders import user

    store = await open_store(db)
    try:
        for tenant, fact in (("default", "HARRIER-5"), ("acme", "MERLIN-9")):
            scoped = store.for_tenant(tenant)
            info = await scoped.create_session(metadata={"proxy": {
                "client": CLAUDE_UA, "model": "local-model", "label": "task-x"}})
            await scoped.append(info.id, user(f"the secret is {fact}"))
        _info, token = await store.create_token("acme")
        return token
    finally:
        await store.close()


def test_http_auth_each_call_sees_its_tokens_tenant_only_l4_w1(db):
    import httpx2

    token = asyncio.run(_labelled_for_tenants(db))
    with start_http(db, "--auth") as url:
        # No token, or a wrong one: refused before the SDK sees the request.
        assert httpx.post(url, json={}).status_code == 401
        assert httpx.post(url, json={}, headers={"x-contextfold-token": "cf_nope"}
                          ).status_code == 401

        async def go() -> None:
            headers = {"x-contextfold-token": token, "x-contextfold-session": "task-x"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as client, \
                    streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                found = result(await session.call_tool("history_search",
                                                       {"query": "MERLIN-9"}))
                assert found["matches"] and found["found_by"] == "session label task-x"
                # The default tenant's session with the same label is not acme's (L4, W1).
                none = result(await session.call_tool("history_search",
                                                      {"query": "HARRIER-5"}))
                assert none["matches"] == []

        asyncio.run(go())
