"""The HTTP contract of docs/service.md on SQLite and PostgreSQL (httpx ASGI transport):
every endpoint's status and JSON shape, turns as JSON and as server-sent events."""

from __future__ import annotations

from pathlib import Path

from tests.server_fixtures import create, parse_sse, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl"
SESSION_KEYS = {"session_id", "title", "created_at", "model", "context_window", "system",
                "base_url", "leaf_id", "revision", "read_only", "problems", "model_available",
                "model_problem", "state", "gauge"}


async def test_session_lifecycle_shapes(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/sessions", json={"title": "t", "system": "be brief",
                                               "context_window": 4096})
        assert r.status_code == 201
        created = r.json()
        assert set(created) == SESSION_KEYS
        assert created["model"] == "offline/echo" and created["context_window"] == 4096
        assert created["state"]["phase"] == "idle" and created["revision"] == 0
        sid = created["session_id"]

        turn = await say(c, sid, "hello there")
        assert set(turn) == {"reply", "node_ids", "compactions", "gauge", "session", "replayed"}
        assert "hello there" in turn["reply"]["text"]
        assert turn["node_ids"][-1] == turn["reply"]["node_id"] and len(turn["node_ids"]) == 2
        assert turn["session"]["leaf_id"] == turn["reply"]["node_id"]
        assert turn["gauge"]["tokens"] > 0

        got = (await c.get(f"/v1/sessions/{sid}")).json()
        assert got["revision"] == 2 and got["system"] == "be brief"
        listed = (await c.get("/v1/sessions")).json()["sessions"]
        assert [s["session_id"] for s in listed] == [sid]

        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()
        assert [n["role"] for n in tree["nodes"]] == ["user", "assistant"]
        assert all(n["on_branch"] and n["kind"] == "message" for n in tree["nodes"])
        assert tree["nodes"][0]["text"] == "hello there"
        assert tree["nodes"][1]["parent_id"] == tree["nodes"][0]["id"]

        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        assert projection["checkpoint"] is None
        assert [m["id"] for m in projection["messages"]] == turn["node_ids"]
        assert projection["limit"] == got["gauge"]["safe_input_limit"]
        assert projection["estimate"]["tokens"] == got["gauge"]["tokens"]


async def test_retry_edit_fork_keep_the_tree(service_factory) -> None:  # noqa: F811
    """O1-O3 over HTTP: the old reply and the old message stay in the tree, off the branch."""
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        first = await say(c, sid, "first question")
        old_reply = first["reply"]["node_id"]
        retried = (await c.post(f"/v1/sessions/{sid}/retry")).json()
        assert retried["reply"]["node_id"] != old_reply
        edited = (await c.post(f"/v1/sessions/{sid}/edit", json={"text": "better question"}))
        assert edited.status_code == 200 and "better question" in edited.json()["reply"]["text"]
        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
        on = {n["text"] for n in tree if n["on_branch"] and n["role"] == "user"}
        off = {n["id"] for n in tree if not n["on_branch"]}
        assert on == {"better question"} and old_reply in off and len(tree) == 5

        r = await c.post(f"/v1/sessions/{sid}/fork", json={"node_id": old_reply})
        assert r.status_code == 201
        forked = r.json()
        assert forked["session_id"] != sid and forked["leaf_id"] == old_reply
        assert forked["model"] == "offline/echo"
        r = await c.post(f"/v1/sessions/{sid}/fork", json={"node_id": tree[0]["id"]})
        assert r.status_code == 400 and r.json()["type"] == "bad_request"  # a user message
        r = await c.post(f"/v1/sessions/{sid}/fork", json={"node_id": "no-such-node"})
        assert r.status_code in (400, 404)


async def test_model_switch_and_compact(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, context_window=100_000)
        for i in range(4):
            await say(c, sid, f"message {i} " + "lorem ipsum dolor " * 60)
        r = await c.post(f"/v1/sessions/{sid}/model", json={"model": "offline/small",
                                                           "context_window": 3000})
        assert r.status_code == 200
        assert r.json()["model"] == "offline/small" and r.json()["context_window"] == 3000
        # Stored with the session: a reopened worker (new app, same database) uses it too.
        assert (await svc.store.get_session(sid)).metadata["service"]["model"] == "offline/small"
        r = await c.post(f"/v1/sessions/{sid}/compact", json={"instructions": "keep numbers"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["cancelled"] is False
        assert body["outcome"]["status"] == "compacted" and body["outcome"]["checkpoint_id"]
        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        assert projection["checkpoint"]["id"] == body["outcome"]["checkpoint_id"]
        assert projection["estimate"]["tokens"] <= projection["limit"]
        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
        assert sum(n["kind"] == "checkpoint" for n in tree) >= 1


async def test_messages_stream_as_server_sent_events(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "stream me please"},
                         headers={"Accept": "text/event-stream"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.text)
        names = [n for n, _ in events]
        assert names[0] == "state" and names[-1] == "done"
        deltas = "".join(d["text"] for n, d in events if n == "delta")
        done = events[-1][1]
        assert deltas == done["reply"]["text"] and "stream me please" in deltas
        # Errors found before the turn starts stay plain JSON with their status.
        r = await c.post("/v1/sessions/nope/messages", json={"text": "x"},
                         headers={"Accept": "text/event-stream"})
        assert r.status_code == 404 and r.json() == {"error": "no such session",
                                                     "type": "not_found"}


async def test_errors_are_json_with_a_type(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        r = await c.post(f"/v1/sessions/{sid}/messages", json={})
        assert r.status_code == 422 and r.json()["type"] == "validation_error"
        assert "text" in r.json()["error"]
        r = await c.post(f"/v1/sessions/{sid}/messages", content=b"{not json",
                         headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["type"] == "validation_error"
        r = await c.post("/v1/sessions", json={"model": "offline/echo", "api_key": "x"})
        assert r.status_code == 422  # unknown fields are refused, keys above all (W2)
        r = await c.post(f"/v1/sessions/{sid}/retry")
        assert r.status_code == 400 and r.json()["type"] == "bad_request"  # nothing to retry
        r = await c.post("/v1/sessions", json={"model": "acme/unknown-model"})
        assert r.status_code == 400 and r.json()["type"] == "unknown_model"
        r = await c.get("/v1/nothing-here")
        assert r.status_code == 404 and set(r.json()) == {"error", "type"}
        r = await c.delete(f"/v1/sessions/{sid}")
        assert r.status_code == 405 and r.json()["type"] == "method_not_allowed"


async def test_import_and_replay(service_factory) -> None:  # noqa: F811
    raw = FIXTURE.read_bytes()
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/import?title=imported", content=raw)
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["format"] == "claude-code" and body["nodes"] > 0
        sid = body["session_id"]
        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()
        assert len(tree["nodes"]) == body["nodes"] and tree["leaf_id"] == body["leaf_id"]
        r = await c.post("/v1/import", content=raw)
        assert r.status_code == 400  # the same history again: a duplicate
        r = await c.post("/v1/import", content=b"")
        assert r.status_code == 400 and r.json()["type"] == "bad_request"

        r = await c.post("/v1/replay?context_window=64000", content=raw)
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["requests"] == len(report["series"]["requests"]) > 0
        assert report["dropped_messages"] == 0
        assert report["series"]["safe_input_limit"] == report["safe_input_limit"]
        r = await c.post("/v1/replay?context_window=64000&chart=png", content=raw)
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert r.content.startswith(b"\x89PNG")
        # A window too small to compact in is the caller's mistake, said as such.
        r = await c.post("/v1/replay?context_window=2000", content=raw)
        assert r.status_code == 400 and r.json()["type"] == "bad_request", r.text
        assert "too small" in r.json()["error"]


async def test_replay_endpoint_reports_what_the_cli_reports(service_factory) -> None:  # noqa: F811
    # One replay, two front ends: the service's report is the CLI's `replay --json`, plus the
    # chart's series. Once with a compaction, once with the overhead derived from usage.
    import asyncio
    import json

    from typer.testing import CliRunner

    from contextfold.cli import app

    heavy = FIXTURE.parent / "tool_heavy.jsonl"
    cases = [("6000", "0", lambda r: r["compactions"] > 0),
             ("48000", None, lambda r: r["overhead_source"] == "first recorded usage"
              and r["estimate"])]
    async with service_factory() as svc, svc.client() as c:
        for window, overhead, shows in cases:
            given = ["--overhead", overhead] if overhead else []
            cli = await asyncio.to_thread(CliRunner().invoke, app, [
                "replay", str(heavy), "--model", "small-64k", "--context-window", window,
                *given, "--json"])
            assert cli.exit_code == 0, cli.output
            expected = json.loads(cli.stdout)
            assert shows(expected), expected
            query = f"model=small-64k&context_window={window}" + (
                f"&overhead={overhead}" if overhead else "")
            r = await c.post(f"/v1/replay?{query}", content=heavy.read_bytes())
            assert r.status_code == 200, r.text
            served = r.json()
            assert served.pop("series")["requests"]
            if overhead:  # each names the option it was given by
                assert (served["overhead_source"], expected["overhead_source"]) == (
                    "overhead", "--overhead")
                served["overhead_source"] = expected["overhead_source"]
            assert served == expected


async def test_openapi_lists_every_route(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        spec = (await c.get("/openapi.json")).json()
        paths = spec["paths"]
        expected = {
            "/v1/sessions": {"get", "post"}, "/v1/sessions/{session_id}": {"get"},
            "/v1/sessions/{session_id}/tree": {"get"},
            "/v1/sessions/{session_id}/projection": {"get"},
            "/v1/sessions/{session_id}/messages": {"post"},
            "/v1/sessions/{session_id}/compact": {"post"},
            "/v1/sessions/{session_id}/cancel": {"post"},
            "/v1/sessions/{session_id}/retry": {"post"},
            "/v1/sessions/{session_id}/edit": {"post"},
            "/v1/sessions/{session_id}/fork": {"post"},
            "/v1/sessions/{session_id}/model": {"post"},
            "/v1/sessions/{session_id}/events": {"get"},
            "/v1/import": {"post"}, "/v1/replay": {"post"}, "/v1/config": {"get"},
            "/healthz": {"get"},
        }
        for path, methods in expected.items():
            assert path in paths, path
            assert methods <= set(paths[path]), (path, set(paths[path]))
        # And the app serves nothing undocumented under /v1.
        from contextfold.server import files, routes, turns

        routes = {r.path for module in (routes, turns, files) for r in module.router.routes}
        routes |= {p for r in svc.app.routes if (p := getattr(r, "path", "")).startswith("/v1")}
        assert routes == {p for p in expected if p.startswith("/v1")}
        assert (await c.get("/")).status_code == 200


def test_pool_exhaustion_is_503_overloaded_not_a_500() -> None:
    """Found by the load bench: a worker out of database connections answers 503 with
    Retry-After (retry later), not 500."""
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    from contextfold.server.errors import as_api_error

    err = as_api_error(PoolTimeoutError("QueuePool limit of size 5 overflow 10 reached"))
    assert (err.status, err.type, err.headers) == (503, "overloaded", {"Retry-After": "1"})
