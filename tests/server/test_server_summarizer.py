"""`contextfold serve --summarizer-model`: checkpoints written by a model with the server's own
key (never a client's), falling back to the offline summary when the model fails. The model
is the fake provider server (tests/fakeserver); SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contextfold.cli import app
from tests.fakeserver import fake_server
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

WINDOW = 16_000
LONG = "the quick brown fox jumps over the lazy dog " * 40


async def _compacted_by(service_factory, base_url: str) -> str:  # noqa: F811
    """Hold a short conversation, compact it, and say which summariser wrote the checkpoint."""
    async with service_factory(context_window=WINDOW, summarizer_model="local-model",
                               summarizer_base_url=base_url) as svc, svc.client() as c:
        sid = await create(c)
        for i in range(4):
            await say(c, sid, f"turn {i}: {LONG}")
        r = await c.post(f"/v1/sessions/{sid}/compact", json={})
        assert r.status_code == 200, r.text
        assert r.json()["outcome"]["status"] == "compacted", r.json()
        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        return projection["checkpoint"]["payload"]["summarizer"]


async def test_checkpoints_come_from_the_summariser_model(service_factory) -> None:  # noqa: F811
    with fake_server(context_window=WINDOW) as provider:
        # Named without /v1, as a user may: the summariser still reaches the OpenAI routes.
        assert await _compacted_by(service_factory, provider.base_url) == "llm:local-model"
        assert provider.summary_requests, "the summariser model was never asked"
        assert all(r.prompt_tokens <= WINDOW for r in provider.summary_requests)


async def test_a_failing_summariser_model_falls_back_to_the_offline_summary(
        service_factory) -> None:  # noqa: F811
    # Nothing listens there: the summary call fails, the compaction still commits.
    assert await _compacted_by(service_factory, "http://127.0.0.1:9/v1") == \
        "extractive-fallback"


@pytest.mark.parametrize("args, says", [
    (["--summarizer-model", "mystery-model"], "mystery-model"),
    (["--summarizer-model", "local-model", "--summarizer-base-url", "http://127.0.0.1:9",
      "--summarizer-provider", "nope", "--context-window", "8000"], "nope"),
    # A key's provider with no official endpoint and none bound (SPEC Y8). (A summariser
    # model the catalog lacks is no longer refused: it gets the chat model's window.)
    (["--summarizer-model", "azure/gpt-4o"], "--provider-url azure=URL"),
])
def test_a_summariser_model_that_cannot_be_used_is_bad_input(args, says, tmp_path):
    # Refused before the server binds (so this returns instead of serving).
    result = CliRunner().invoke(app, ["serve", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                                      *args])
    assert result.exit_code == 2, result.output
    assert says in result.output
