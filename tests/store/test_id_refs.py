"""Ids like git's (issue 41): any unique prefix of a session or node id, `latest` for the
session active last, an ambiguous prefix answered with its candidates. One resolver
(`store.refs`) behind the CLI, the service and the page; SQLite and PostgreSQL; a prefix never
reaches another tenant's session (SPEC W1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.values.messages import Node, text_message
from contextfold.store import NodeNotFoundError, SessionNotFoundError, open_store
from contextfold.store.refs import (
    AmbiguousIdError,
    resolve_node_id,
    resolve_session_id,
)
from contextfold.store.snapshot import read_only_store
from tests.server_fixtures import create, say, service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url, store  # noqa: F401  (fixtures)


def shortest_unique(ids: list[str], target: str) -> str:
    """The shortest prefix of `target` that no other id of `ids` starts with."""
    for n in range(1, len(target) + 1):
        prefix = target[:n]
        if sum(1 for i in ids if i.startswith(prefix)) == 1:
            return prefix
    return target


def common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


async def test_session_prefixes_latest_and_ambiguity(store) -> None:  # noqa: F811
    made = [await store.create_session(title=f"s{i}") for i in range(3)]
    ids = [m.id for m in made]
    for sid in ids:
        assert await resolve_session_id(store, sid) == sid  # the whole id
        assert await resolve_session_id(store, shortest_unique(ids, sid)) == sid
    # UUIDv7 ids made in one test share their time prefix: a prefix of two is ambiguous.
    shared = common_prefix(ids[0], ids[1])
    assert shared
    with pytest.raises(AmbiguousIdError) as caught:
        await resolve_session_id(store, shared)
    named = {c for c, _ in caught.value.candidates}
    assert {i for i in ids if i.startswith(shared)} == named
    assert caught.value.kind == "bad_input"
    assert all(i in str(caught.value) for i in named) and "s0" in str(caught.value)
    with pytest.raises(SessionNotFoundError):
        await resolve_session_id(store, "no-such-prefix")
    with pytest.raises(SessionNotFoundError):
        await resolve_session_id(store, "")
    # `latest`: the session active last (a message moves the leaf), not the newest created.
    assert await resolve_session_id(store, "latest") == ids[2]
    await store.append(ids[0], text_message("user", "the oldest one is active again"))
    assert await resolve_session_id(store, "latest") == ids[0]
    # A rename is not activity.
    await store.update_session_metadata(ids[1], {"page": {"title": "renamed"}})
    assert await resolve_session_id(store, "latest") == ids[0]


async def test_latest_of_an_empty_store_is_not_found(store) -> None:  # noqa: F811
    with pytest.raises(SessionNotFoundError):
        await resolve_session_id(store, "latest")


async def test_a_prefix_never_reaches_another_tenant(store) -> None:  # noqa: F811
    acme, globex = store.for_tenant("acme"), store.for_tenant("globex")
    theirs = await acme.create_session(title="acme's")
    ours = await globex.create_session(title="globex's")
    shared = common_prefix(theirs.id, ours.id)
    # The prefix both ids start with names one session for each tenant: never ambiguous.
    assert await resolve_session_id(globex, shared) == ours.id
    assert await resolve_session_id(acme, shared) == theirs.id
    # One character more is acme's session alone: globex is told there is no such session.
    with pytest.raises(SessionNotFoundError):
        await resolve_session_id(globex, theirs.id[:len(shared) + 1])
    with pytest.raises(SessionNotFoundError):
        await resolve_session_id(globex, theirs.id)
    assert await resolve_session_id(globex, "latest") == ours.id
    assert await resolve_session_id(acme, "latest") == theirs.id
    with pytest.raises(SessionNotFoundError):  # the nodes of another tenant's session
        await resolve_node_id(globex, theirs.id, "0")


async def test_node_prefixes(store) -> None:  # noqa: F811
    info = await store.create_session()
    nodes = await store.append_many(info.id, [text_message("user", "a"),
                                              text_message("assistant", "b"),
                                              text_message("user", "c")])
    ids = [n.id for n in nodes]
    for nid in ids:
        assert await resolve_node_id(store, info.id, nid) == nid
        assert await resolve_node_id(store, info.id, shortest_unique(ids, nid)) == nid
    with pytest.raises(AmbiguousIdError):
        await resolve_node_id(store, info.id, common_prefix(ids[0], ids[2]))
    with pytest.raises(NodeNotFoundError):
        await resolve_node_id(store, info.id, "zz")


ID_CHARS = st.sampled_from("0a1b_%-")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.text(ID_CHARS, min_size=1, max_size=4), min_size=1, max_size=6,
                    unique=True),
       probe=st.text(ID_CHARS, min_size=1, max_size=4))
def test_a_prefix_names_the_one_id_it_starts_or_none(tmp_path: Path, ids: list[str],
                                                     probe: str) -> None:
    """Property: for any stored ids (imported ids may hold `_` and `%`, LIKE's wildcards)
    and any typed text, the resolver answers the id equal to it, else the only id starting
    with it, else not found / ambiguous, exactly as counted here."""
    async def check() -> None:
        url = f"sqlite:///{tmp_path / 'prop.db'}"
        async with await open_store(url) as opened:
            chain, parent = [], None
            for i in ids:
                chain.append(Node(id=i, parent_id=parent, payload=text_message("user", i)))
                parent = i
            info = await opened.import_tree(chain, chain[-1].id)
            starting = [i for i in ids if i.startswith(probe)]
            if probe in ids:
                assert await resolve_node_id(opened, info.id, probe) == probe
            elif len(starting) == 1:
                assert await resolve_node_id(opened, info.id, probe) == starting[0]
            elif not starting:
                with pytest.raises(NodeNotFoundError):
                    await resolve_node_id(opened, info.id, probe)
            else:
                with pytest.raises(AmbiguousIdError) as caught:
                    await resolve_node_id(opened, info.id, probe)
                assert sorted(c for c, _ in caught.value.candidates) == sorted(starting)
        (tmp_path / "prop.db").unlink()

    asyncio.run(check())


async def test_the_cli_snapshot_resolves_as_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'snap.db'}"
    async with await open_store(url) as opened:
        made = [await opened.create_session(title=f"t{i}") for i in range(2)]
        await opened.append(made[0].id, text_message("user", "hello"))
    ids = [m.id for m in made]

    async def reads(reader) -> tuple[str, str, str]:
        return (await resolve_session_id(reader, shortest_unique(ids, ids[1])),
                await resolve_session_id(reader, "latest"),
                type(reader).__name__)

    full, latest, kind = await asyncio.to_thread(read_only_store, url, reads)
    assert (full, latest, kind) == (ids[1], ids[0], "SnapshotReader")


# ---------------------------------------------------------------------- the CLI


def test_cli_takes_prefixes_latest_and_lists_candidates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    async def setup() -> list[str]:
        async with await open_store(url) as opened:
            made = [await opened.create_session(title=f"title {i}") for i in range(2)]
            for m in made:
                await opened.append(m.id, text_message("user", f"hello from {m.title}"))
            return [m.id for m in made]

    ids = asyncio.run(setup())
    runner = CliRunner()
    short = shortest_unique(ids, ids[0])
    for command in (["show", short, "--json"], ["project", short, "--json"],
                    ["recall", short, "hello", "--json"], ["verify", short, "--json"]):
        result = runner.invoke(app, [*command, "--db", url])
        assert result.exit_code == 0, (command, result.output)
        assert ids[1] not in result.output
    shown = runner.invoke(app, ["show", "latest", "--json", "--db", url])
    assert shown.exit_code == 0 and f'"session_id": "{ids[1]}"' in shown.output.replace(
        '":"', '": "')
    ambiguous = runner.invoke(app, ["show", common_prefix(*ids), "--db", url])
    assert ambiguous.exit_code == 2
    assert "ambiguous" in ambiguous.output and ids[0] in ambiguous.output and \
        ids[1] in ambiguous.output and "title 1" in ambiguous.output
    missing = runner.invoke(app, ["show", "nothing-like-it", "--db", url])
    assert missing.exit_code == 2 and "no session" in missing.output
    assert "Python" not in missing.output and "await" not in missing.output


# ---------------------------------------------------------------------- the service


async def test_service_paths_and_bodies_take_prefixes(service_factory) -> None:  # noqa: F811
    async with service_factory(auth=True) as svc:
        async with svc.client("acme") as acme:
            first = await create(acme, title="first")
            second = await create(acme, title="second")
            reply = (await say(acme, first, "hello there"))["reply"]["node_id"]
            short = shortest_unique([first, second], first)
            got = await acme.get(f"/v1/sessions/{short}")
            assert got.status_code == 200 and got.json()["session_id"] == first
            assert (await acme.get("/v1/sessions/latest")).json()["session_id"] == first
            tree = await acme.get(f"/v1/sessions/{short}/tree")
            assert tree.status_code == 200 and tree.json()["session_id"] == first
            sent = await acme.post(f"/v1/sessions/{short}/messages", json={"text": "again"})
            assert sent.status_code == 200, sent.text
            both = await acme.get(f"/v1/sessions/{common_prefix(first, second)}")
            assert both.status_code == 400
            body = both.json()
            assert body["type"] == "ambiguous_id"
            assert {c["id"] for c in body["candidates"]} == {first, second}
            forked = await acme.post(f"/v1/sessions/{short}/fork",
                                     json={"node_id": reply[:-4]})
            assert forked.status_code == 201, forked.text
            listed = (await acme.get("/v1/sessions")).json()["sessions"]
            assert all(s["last_active_at"] for s in listed)
        async with svc.client("globex") as globex:
            mine = await create(globex)
            # acme's prefix is never globex's session, nor ambiguous with it.
            assert (await globex.get(f"/v1/sessions/{first}")).status_code == 404
            only_acme = first[:len(common_prefix(first, mine)) + 1]
            assert (await globex.get(f"/v1/sessions/{only_acme}")).status_code == 404
            assert (await globex.get("/v1/sessions/latest")).json()["session_id"] == mine


async def test_the_mcp_server_takes_a_prefix_or_latest_too(store) -> None:  # noqa: F811
    """`contextfold mcp --session` (and a tool's `session_id`): an id, a proxied label, else
    a unique prefix or `latest`, through the same resolver."""
    from contextfold.mcp.which import Asked, NoConversationError, which_session

    made = [await store.create_session(title=f"m{i}") for i in range(2)]
    ids = [m.id for m in made]
    short = shortest_unique(ids, ids[0])
    assert (await which_session(store, Asked(session=short))).session_id == ids[0]
    assert (await which_session(store, Asked(session="latest"))).session_id == ids[1]
    with pytest.raises(AmbiguousIdError):
        await which_session(store, Asked(session=common_prefix(*ids)))
    with pytest.raises(NoConversationError):
        await which_session(store, Asked(session="no-such-session"))
