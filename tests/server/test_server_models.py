"""The service's models (SPEC B4, Y8, W2): an imported session keeps its recorded model and
title, a model the server cannot serve is said so (never a 500), provider keys go only to
their providers' endpoints, the operator's model allowlist, and windows too small to compact
in. The upstream is the fake provider (tests/fakeserver), reached by the real SDKs over real
HTTP; it records the key headers it receives. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.core.models.catalog import capacity_for
from contextfold.core.sizing.resolver import ModelResolver
from contextfold.server import ServiceConfig
from contextfold.server.models import ServerModels
from contextfold.server.run import ServeError, check_models
from tests.fakeserver import server_fixture
from tests.server_fixtures import create, say, service_factory, wait_until  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

FIXTURES = Path(__file__).parents[1] / "fixtures"
PI = FIXTURES / "pi-mono" / "large-session.jsonl"
OPENAI_KEY = "sk-server-openai-key-SECRET"
ANTHROPIC_KEY = "sk-ant-server-key-SECRET"
KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")

fake = server_fixture()


@pytest.fixture
def server_keys(monkeypatch):
    """The server holds real-looking provider keys in its environment."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


@pytest.fixture
def no_keys(monkeypatch):
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)


def keys_seen(fake) -> set[str]:
    """Every key the fake upstream was sent (an Authorization bearer or an x-api-key)."""
    return {value.removeprefix("Bearer ") for r in fake.requests
            for value in r.key_headers.values()}


def tree_size(tree: dict) -> int:
    return len(tree["nodes"])


# --------------------------------------------------------------------------- import


async def test_an_import_keeps_its_recorded_model_and_title_and_says_it_cannot_send(
        service_factory, no_keys) -> None:  # noqa: F811  # B4
    """The real Pi session (recorded on claude-sonnet-4-5): sized for that model, titled by
    its file, and — with no Anthropic key on this server — shown, compacted and replayed,
    while a send answers 409 naming the missing key (it was "Untitled · offline/echo" at an
    8k window, "Compact now" answered 500 and every send failed)."""
    raw = PI.read_bytes()
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/import?filename=large-session.jsonl", content=raw)
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        session = (await c.get(f"/v1/sessions/{sid}")).json()
        assert (session["model"], session["title"]) == ("claude-sonnet-4-5",
                                                        "large-session.jsonl")
        sonnet = capacity_for("claude-sonnet-4-5")
        assert session["context_window"] == sonnet.context_window
        assert session["model_available"] is False
        assert "ANTHROPIC_API_KEY" in session["model_problem"]
        listed = (await c.get("/v1/sessions")).json()["sessions"]
        assert [(s["model"], s["title"]) for s in listed] == [
            ("claude-sonnet-4-5", "large-session.jsonl")]

        before = tree_size((await c.get(f"/v1/sessions/{sid}/tree")).json())
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "go on"})
        assert r.status_code == 409 and r.json()["type"] == "model_unavailable", r.text
        assert "ANTHROPIC_API_KEY" in r.json()["error"]
        assert tree_size((await c.get(f"/v1/sessions/{sid}/tree")).json()) == before

        r = await c.post(f"/v1/sessions/{sid}/compact", json={})
        assert r.status_code == 200, r.text
        assert r.json()["outcome"]["status"] == "compacted"
        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        assert projection["estimate"]["tokens"] <= projection["limit"]

        r = await c.post("/v1/replay", content=raw)
        assert r.status_code == 200 and r.json()["model"] == "claude-sonnet-4-5", r.text


async def test_an_imported_session_sends_with_its_providers_bound_key(
        service_factory, server_keys, fake) -> None:  # noqa: F811  # B4 Y8
    raw = PI.read_bytes()
    async with service_factory(provider_urls={"anthropic": fake.anthropic_url}) as svc, \
            svc.client() as c:
        sid = (await c.post("/v1/import?title=pi", content=raw)).json()["session_id"]
        session = (await c.get(f"/v1/sessions/{sid}")).json()
        assert (session["title"], session["model_available"]) == ("pi", True)
        turn = await say(c, sid, "what did we change last?")
        assert turn["reply"]["text"]
        assert turn["gauge"]["safe_input_limit"] == session["gauge"]["safe_input_limit"]
        chats = [r for r in fake.requests if not r.is_summary]
        assert chats and {r.protocol for r in chats} == {"anthropic"}
        assert keys_seen(fake) == {ANTHROPIC_KEY}  # its own provider's key, bound to the fake


# --------------------------------------------------------------------------- key binding


async def test_a_keyless_base_url_never_gets_a_server_key(
        service_factory, server_keys, fake) -> None:  # noqa: F811  # Y8 W2
    async with service_factory(allow_base_urls=(fake.openai_url,)) as svc, svc.client() as c:
        for model in ("openai/gpt-4o", "anthropic/claude-sonnet-4-5"):
            r = await c.post("/v1/sessions", json={"model": model, "base_url": fake.openai_url})
            assert r.status_code == 400 and r.json()["type"] == "base_url_not_allowed", r.text
            assert "keyless" in r.json()["error"]
        assert fake.requests == []
        local = await create(c, model="local-model", base_url=fake.openai_url,
                             context_window=8192)
        await say(c, local, "hello")
        # A bare claude-* name on a base URL is that server's, never Anthropic's.
        bare = await create(c, model="claude-3-5-haiku-latest", base_url=fake.openai_url)
        await say(c, bare, "hello again")
        assert keys_seen(fake) == {"not-needed"}
        # A switch to a provider's model keeps the stored base_url: refused, key kept home.
        r = await c.post(f"/v1/sessions/{local}/model", json={"model": "openai/gpt-4o"})
        assert r.status_code == 400 and r.json()["type"] == "base_url_not_allowed", r.text
        assert (await c.get(f"/v1/sessions/{local}")).json()["model"] == "local-model"
        assert keys_seen(fake) == {"not-needed"}


async def test_a_bound_url_gets_only_its_own_providers_key(
        service_factory, server_keys, fake) -> None:  # noqa: F811  # Y8 W2
    async with service_factory(provider_urls={"openai": fake.openai_url}) as svc, \
            svc.client() as c:
        sid = await create(c, model="openai/gpt-4o", context_window=16_000)
        await say(c, sid, "hello")
        assert keys_seen(fake) == {OPENAI_KEY}
        r = await c.post("/v1/sessions", json={"model": "anthropic/claude-sonnet-4-5",
                                               "base_url": fake.openai_url})
        assert r.status_code == 400 and "not allowed" in r.json()["error"], r.text
        r = await c.post("/v1/sessions", json={"model": "openai/gpt-4o",
                                               "base_url": "http://127.0.0.1:9/v1"})
        assert r.status_code == 400, r.text
        assert keys_seen(fake) == {OPENAI_KEY}


async def test_a_configuration_change_reaches_stored_sessions(
        service_factory, server_keys, fake) -> None:  # noqa: F811  # Y8 W2
    """Sessions created under an allowlist entry or a binding; the server restarts without
    them: get, send and fork say the model is unavailable, and no key goes anywhere."""
    async with service_factory(allow_base_urls=(fake.openai_url,)) as svc, svc.client() as c:
        keyless = await create(c, model="local-model", base_url=fake.openai_url,
                               context_window=8192)
        reply = (await say(c, keyless, "hello"))["reply"]["node_id"]
    async with service_factory(provider_urls={"openai": fake.openai_url}) as svc, \
            svc.client() as c:
        bound = await create(c, model="openai/gpt-4o", base_url=fake.openai_url,
                             context_window=16_000)
        await say(c, bound, "hello")
    sent = len(fake.requests)
    assert keys_seen(fake) == {"not-needed", OPENAI_KEY}
    async with service_factory() as svc, svc.client() as c:  # restarted, nothing allowed
        for sid in (keyless, bound):
            session = (await c.get(f"/v1/sessions/{sid}")).json()
            assert session["model_available"] is False, session
            assert "not allowed" in session["model_problem"]
            r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
            assert r.status_code == 409 and r.json()["type"] == "model_unavailable"
        r = await c.post(f"/v1/sessions/{keyless}/fork", json={"node_id": reply})
        assert r.status_code == 201 and r.json()["model_available"] is False, r.text
        r = await c.post(f"/v1/sessions/{r.json()['session_id']}/messages",
                         json={"text": "from the fork"})
        assert r.status_code == 409
    assert len(fake.requests) == sent


# --------------------------------------------------------------------------- allowlist


async def test_the_model_allowlist_refuses_other_models_naming_it(
        service_factory, fake) -> None:  # noqa: F811  # W2
    async with service_factory(allow_models=("offline/*",),
                               allow_base_urls=(fake.openai_url,)) as svc, svc.client() as c:
        sid = await create(c, model="offline/echo")
        r = await c.post("/v1/sessions", json={"model": "local-model",
                                               "base_url": fake.openai_url,
                                               "context_window": 8192})
        assert r.status_code == 400 and r.json()["type"] == "model_not_allowed", r.text
        assert "--allow-model offline/*" in r.json()["error"]
        r = await c.post(f"/v1/sessions/{sid}/model", json={"model": "gpt-4o"})
        assert r.status_code == 400 and r.json()["type"] == "model_not_allowed"
        assert (await c.get("/v1/config")).json()["allowed_models"] == ["offline/*"]
    assert fake.requests == []


def test_allowlist_patterns_match_the_name_or_provider_and_model():  # W2
    models = ServerModels(ServiceConfig(allow_models=("anthropic/claude-haiku-*", "gpt-4o")))
    assert models.allowed("claude-haiku-4-5") and models.allowed("anthropic/claude-haiku-4-5")
    assert models.allowed("gpt-4o") and models.allowed("openai/gpt-4o")
    assert not models.allowed("claude-sonnet-4-5") and not models.allowed("gpt-4o-mini")
    assert ServerModels(ServiceConfig()).allowed("anything/at-all")
    with pytest.raises(ServeError, match="not allowed by --allow-model"):
        check_models(ServiceConfig(allow_models=("gpt-*",)))  # the default offline/echo


# --------------------------------------------------------------------------- windows


async def test_a_window_too_small_to_compact_in_is_refused_naming_the_smallest(
        service_factory) -> None:  # noqa: F811  # B1-B3
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/sessions", json={"context_window": 1024})
        assert r.status_code == 400 and r.json()["type"] == "bad_request", r.text
        smallest = r.json()["smallest_window"]
        assert f"the smallest window that works is {smallest:,}" in r.json()["error"]
        r = await c.post("/v1/sessions", json={"context_window": smallest - 1})
        assert r.status_code == 400
        sid = await create(c, context_window=smallest)
        for i in range(4):
            await say(c, sid, f"turn {i}: " + "the quick brown fox " * 30)

        async def idle() -> bool:  # the automatic compactions after each turn are done
            return (await c.get(f"/v1/sessions/{sid}")).json()["state"]["phase"] == "idle"

        await wait_until(idle, "the session went idle")
        r = await c.post(f"/v1/sessions/{sid}/compact", json={})
        assert r.status_code == 200, r.text
        assert (await c.get(f"/v1/sessions/{sid}/tree")).json()["read_only"] is False
        r = await c.post(f"/v1/sessions/{sid}/model", json={"model": "offline/echo",
                                                           "context_window": 1024})
        assert r.status_code == 400 and r.json()["smallest_window"] == smallest


async def test_a_stored_window_too_small_compacts_to_a_400_not_a_500(
        service_factory) -> None:  # noqa: F811  # B1-B3
    """A session stored before windows were checked: its compaction fails (no room for a
    summary), answered with what is wrong; nothing is written."""
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, context_window=100_000)
        for i in range(4):
            await say(c, sid, f"turn {i}: " + "the quick brown fox " * 30)
        await svc.store.update_session_metadata(
            sid, {"service": {"model": "offline/echo", "context_window": 1024}})
        before = (await c.get(f"/v1/sessions/{sid}/tree")).json()
        r = await c.post(f"/v1/sessions/{sid}/compact", json={})
        # The compaction failed for the session's own window: bad input (the error's kind is
        # its cause's), with the numbers, never a 500.
        assert r.status_code == 400 and r.json()["type"] == "bad_request", r.text
        assert "summary budget" in r.json()["error"]
        assert (await c.get(f"/v1/sessions/{sid}/tree")).json() == before


# --------------------------------------------------------------------------- one rule


async def test_service_and_resolver_size_a_model_alike(
        service_factory, tmp_path, monkeypatch) -> None:  # noqa: F811  # B4
    """$CONTEXTFOLD_MODELS reaches the service, and `serve --model` is the default."""
    overrides = tmp_path / "models.toml"
    overrides.write_text('[models."offline/big"]\ncontext_window = 24000\n')
    monkeypatch.setenv("CONTEXTFOLD_MODELS", str(overrides))
    async with service_factory(model="offline/house") as svc, svc.client() as c:
        default = (await c.get(f"/v1/sessions/{await create(c)}")).json()
        assert (default["model"], default["context_window"]) == ("offline/house", 8192)
        assert (await c.get("/v1/config")).json()["default_model"] == "offline/house"
        r = await c.post("/v1/sessions", json={"model": "offline/big"})
        assert r.status_code == 201 and r.json()["context_window"] == 24_000, r.text
        assert r.json()["gauge"]["safe_input_limit"] == \
            ModelResolver().resolve("offline/big").budget.safe_input_limit


def test_serve_refuses_a_default_it_cannot_use_before_binding(tmp_path, monkeypatch):  # B4
    with pytest.raises(ServeError, match="smallest window that works"):
        check_models(ServiceConfig(context_window=1024))
    with pytest.raises(ServeError, match="unknown model 'house-model'"):
        check_models(ServiceConfig(model="house-model"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.broken\n")
    monkeypatch.setenv("CONTEXTFOLD_MODELS", str(bad))
    with pytest.raises(ServeError, match=r"\$CONTEXTFOLD_MODELS: .*bad.toml"):
        check_models(ServiceConfig())
