"""Choosing the adapter, reading keys from the environment, and keeping keys secret."""

from __future__ import annotations

import logging
import traceback

import pytest

from contextfold.core.values.messages import text_message
from contextfold.core.view.projection import Projection
from contextfold.providers import (
    AnthropicModel,
    ChatRequest,
    ContextOverflowError,
    OpenAICompatModel,
    ProviderAuthError,
    ToolSpec,
    UnknownProviderError,
    make_chat_model,
    request_projection,
    resolve_provider,
    simple_request,
)
from contextfold.providers.keys import UNUSED_KEY
from tests.builders import assistant, chain, user
from tests.fakeserver import Reply, server_fixture

fake = server_fixture()

ALL_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "OLLAMA_API_KEY",
                "VLLM_API_KEY", "AZURE_OPENAI_API_KEY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ALL_KEY_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("model,provider,base_url,expect_provider,expect_model", [
    ("anthropic/claude-opus-4", None, None, "anthropic", "claude-opus-4"),
    ("claude-3-5-haiku", None, None, "anthropic", "claude-3-5-haiku"),
    ("gpt-4o-mini", None, None, "openai", "gpt-4o-mini"),
    ("openai/o3", None, None, "openai", "o3"),
    ("ollama/qwen3:8b", None, None, "ollama", "qwen3:8b"),
    ("llama.cpp/gemma", None, None, "llamacpp", "gemma"),
    ("openrouter/anthropic/claude-3.5-sonnet", None, None, "openrouter",
     "anthropic/claude-3.5-sonnet"),
    ("Qwen/Qwen3-8B", "vllm", None, "vllm", "Qwen/Qwen3-8B"),
    ("vllm/Qwen/Qwen3-8B", "vllm", None, "vllm", "Qwen/Qwen3-8B"),
    ("my-finetune", None, "http://10.0.0.5:9000/v1", "openai-compatible", "my-finetune"),
])
def test_provider_is_chosen_from_prefix_family_or_argument(
        model, provider, base_url, expect_provider, expect_model):  # B4
    info, name = resolve_provider(model, provider, base_url)
    assert (info.name, name) == (expect_provider, expect_model)


def test_unknown_model_says_how_to_name_the_provider():  # B4
    with pytest.raises(UnknownProviderError, match="provider/model"):
        resolve_provider("mystery-model")
    with pytest.raises(UnknownProviderError, match="Unknown provider 'nope'"):
        resolve_provider("x", provider="nope")


def test_local_servers_get_their_default_url_and_need_no_key():  # B4
    model = make_chat_model("ollama/llama3.2")
    assert isinstance(model, OpenAICompatModel)
    assert model.base_url == "http://localhost:11434/v1"
    assert model.max_tokens_field == "max_tokens"
    assert make_chat_model("gpt-4o", api_key="k").max_tokens_field == "max_completion_tokens"


def test_missing_key_names_the_environment_variable():  # P4
    with pytest.raises(ProviderAuthError, match="ANTHROPIC_API_KEY") as info:
        make_chat_model("anthropic/claude-x")
    assert info.value.env_var == "ANTHROPIC_API_KEY"
    with pytest.raises(ProviderAuthError, match="OPENROUTER_API_KEY"):
        make_chat_model("openrouter/meta/llama")
    with pytest.raises(ProviderAuthError, match="empty"):
        make_chat_model("openai/gpt-4o", api_key="  ")


def test_azure_needs_its_endpoint():  # B4
    with pytest.raises(ValueError, match="base_url"):
        make_chat_model("azure/gpt-4o", api_key="k")


async def test_key_is_read_from_the_environment(fake, monkeypatch):  # P4
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key-for-anthropic")
    fake.configure(api_key="env-key-for-anthropic")
    model = make_chat_model("anthropic/claude-test", base_url=fake.anthropic_url)
    assert isinstance(model, AnthropicModel)
    reply = await model.complete(simple_request([user("hi")], max_tokens=16))
    assert reply.text == "ok"


async def test_bare_base_url_never_receives_the_openai_key(fake, monkeypatch):  # P4
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key-must-stay-home")
    fake.configure(api_key=UNUSED_KEY)  # only the placeholder is accepted
    model = make_chat_model("local-model", base_url=fake.openai_url)
    reply = await model.complete(simple_request([user("hi")], max_tokens=16))
    assert reply.text == "ok"


async def test_keys_never_appear_in_reprs_errors_or_logs(fake, caplog):  # P4
    secret = "sk-test-SECRET-0123456789abcdef"
    caplog.set_level(logging.DEBUG)
    models = [make_chat_model("openai/gpt-4o", base_url=fake.openai_url, api_key=secret),
              make_chat_model("anthropic/claude-test", base_url=fake.anthropic_url,
                              api_key=secret)]
    texts: list[str] = []
    for model in models:
        texts += [repr(model), str(model), repr(vars(model))]
        fake.configure(api_key=None)
        await model.complete(simple_request([user("hi")], max_tokens=16))
        async for event in model.stream(simple_request([user("hi")], max_tokens=16)):
            texts.append(repr(event))
        for config in ({"context_window": 5}, {"api_key": "another-key"}):
            fake.configure(**config)
            with pytest.raises((ContextOverflowError, ProviderAuthError)) as info:
                await model.complete(simple_request([user("hi " * 20)], max_tokens=16))
            texts += [str(info.value), repr(info.value),
                      "".join(traceback.format_exception(info.value))]
            fake.configure(context_window=None, api_key=None)
    texts.append(caplog.text)
    assert caplog.records, "the SDKs did log at DEBUG level"
    for text in texts:
        assert secret not in text
        assert secret[-6:] not in text


def test_request_projection_appends_pending_without_touching_the_projection():  # T2, P1
    nodes = chain([user("a"), assistant("b")])
    projection = Projection(checkpoint=None, messages=tuple(nodes))
    request = ChatRequest(projection=projection, pending=(text_message("user", "c"),))
    joined = request_projection(request)
    assert [n.payload.text for n in joined.messages] == ["a", "b", "c"]
    assert projection.messages == tuple(nodes)
    assert request_projection(ChatRequest(projection=projection)) is projection


@pytest.mark.parametrize("kwargs,match", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"model": " "}, "model"),
])
def test_bad_requests_name_the_field(kwargs, match):  # P1
    with pytest.raises(ValueError, match=match):
        ChatRequest(**kwargs)


def test_tool_spec_validates_name_and_schema():  # P1
    with pytest.raises(ValueError, match="name"):
        ToolSpec("")
    with pytest.raises(ValueError, match="input_schema"):
        ToolSpec("t", input_schema="not a schema")  # type: ignore[arg-type]


async def test_request_model_overrides_the_adapter_default(fake):  # B4
    model = make_chat_model("openai/gpt-4o", base_url=fake.openai_url, api_key="k")
    fake.enqueue(Reply(text="from the other model"))
    reply = await model.complete(simple_request([user("hi")], model="gpt-4.1", max_tokens=8))
    assert fake.requests[-1].body["model"] == "gpt-4.1"
    assert reply.message.model == "gpt-4.1"
