"""contextfold inside agent frameworks (see docs/integrations.md).

One module per framework, each imported on its own so that `import contextfold` (and this
package) never imports a framework:

* `contextfold.integrations.openai_agents` — `ContextfoldSession`, an OpenAI Agents SDK
  `Session` (extra `contextfold[openai-agents]`);
* `contextfold.integrations.pydantic_ai` — `history_processor(...)` and
  `load_message_history(...)` for pydantic-ai agents (extra `contextfold[pydantic-ai]`);
* `contextfold.integrations.langchain` — `ContextfoldMiddleware` for LangChain v1
  `create_agent` (extra `contextfold[langchain]`);
* `contextfold.integrations.inspect_ai` — `ContextfoldCompaction`, an Inspect AI
  `CompactionStrategy` for agent evals (extra `contextfold[inspect]`, docs/inspect.md).

`responses_items` (Responses API input items <-> contextfold messages) needs no framework.
"""
