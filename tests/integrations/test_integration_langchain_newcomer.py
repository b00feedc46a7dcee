"""The LangChain middleware as a newcomer meets it (issue 25, item 3): a chat model that
cannot bind tools, and a model the catalog does not know."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from contextfold import capacity_for
from contextfold.core.models.catalog import UnknownModelError
from contextfold.integrations.langchain import ContextfoldMiddleware


def test_a_model_that_cannot_bind_tools_runs_without_recall_and_says_so_once(tmp_path):  # L2
    """FakeListChatModel keeps LangChain's base `bind_tools` (NotImplementedError): the
    default recall tools made every call of such a model fail."""
    middleware = ContextfoldMiddleware(str(tmp_path / "lc.db"),
                                       capacity=capacity_for("x", context_window=8000))
    agent = create_agent(FakeListChatModel(responses=["first", "second"]),
                         middleware=[middleware])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            one = agent.invoke({"messages": [{"role": "user", "content": "hello"}]})
            two = agent.invoke({"messages": [{"role": "user", "content": "again"}]})
        assert one["messages"][-1].content == "first"
        assert two["messages"][-1].content == "second"
        said = [w for w in caught if "cannot bind tools" in str(w.message)]
        assert len(said) == 1 and "history_search" in str(said[0].message)
    finally:
        middleware.close()


def test_an_unknown_model_error_names_the_middlewares_capacity_option(tmp_path):
    middleware = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    agent = create_agent(FakeListChatModel(responses=["x"]), middleware=[middleware])
    try:
        with pytest.raises(UnknownModelError) as caught:
            agent.invoke({"messages": [{"role": "user", "content": "hello"}]})
        text = str(caught.value)
        assert "ContextfoldMiddleware(capacity=capacity_for('fake-list-chat-model', " \
               "context_window=N))" in text
        assert "from contextfold import capacity_for" in text
    finally:
        middleware.close()
