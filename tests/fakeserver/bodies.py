"""Genuine error bodies of the providers, and the request checks that trigger them.

The wording, status codes and JSON shapes are copied from answers the real services gave
(quoted in public bug reports), so the adapters under test meet exactly what they will meet
in production: OpenAI, vLLM, llama.cpp server, OpenRouter and Ollama on the chat-completions
side; Anthropic on the Messages side.
"""

from __future__ import annotations

from typing import Any

from .script import OpenAIFlavor

Body = dict[str, Any]


# ----------------------------------------------------------------- context overflow


def openai_overflow(
    flavor: OpenAIFlavor, window: int, prompt: int, completion: int | None
) -> tuple[int, Body]:
    """The context-length error of an OpenAI-compatible server, as (status, body)."""
    requested = prompt + (completion or 0)
    if flavor == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, your request "
            f"has {prompt} input tokens. Please reduce the length of the input messages."
        )
        if completion and prompt <= window:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {completion}. This "
                f"model's maximum context length is {window} tokens and your request has "
                f"{prompt} input tokens ({completion} > {window} - {prompt})."
            )
        return 400, {
            "error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}
        }
    if flavor == "llamacpp":
        return 400, {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
    if flavor == "openrouter":
        message = (
            f"This endpoint's maximum context length is {window} tokens. However, you "
            f"requested about {requested} tokens ({prompt} of text input, {completion or 0} "
            "in the output). Please reduce the length of either one, or use the "
            '"middle-out" transform to compress your prompt automatically.'
        )
        return 400, {"error": {"message": message, "code": 400}}
    if flavor == "ollama":
        # Ollama's OpenAI-compatible endpoint relays the runner's refusal as an api_error.
        return 400, {
            "error": {
                "message": "the input length exceeds the context length",
                "type": "api_error",
                "param": None,
                "code": None,
            }
        }
    if completion and prompt <= window:
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{requested} tokens ({prompt} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        )
    return 400, {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def anthropic_overflow(window: int, prompt: int, max_tokens: int | None) -> tuple[int, Body]:
    """Anthropic's context-length errors: prompt alone, or prompt plus `max_tokens`."""
    if prompt > window or not max_tokens:
        message = f"prompt is too long: {prompt} tokens > {window} maximum"
    else:
        message = (
            f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} > "
            f"{window}, decrease input length or `max_tokens` and try again"
        )
    return 400, anthropic_error("invalid_request_error", message)


# ----------------------------------------------------------------- other errors


def openai_error(message: str, type_: str, code: str | None = None,
                 param: str | None = None) -> Body:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error(type_: str, message: str) -> Body:
    return {
        "type": "error",
        "error": {"type": type_, "message": message},
        "request_id": "req_011CfakeServer0000000000",
    }


def _masked(key: str) -> str:
    """How OpenAI quotes a wrong key back: first three and last four characters."""
    return key[:3] + "*" * max(0, len(key) - 7) + key[-4:] if len(key) > 7 else "***"


def openai_status_body(status: int, key: str | None = None) -> Body:
    """The body OpenAI sends with a given error status (401 quotes the masked key)."""
    if status == 401:
        quoted = f": {_masked(key)}" if key else ""
        return openai_error(
            f"Incorrect API key provided{quoted}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            "invalid_api_key",
        )
    if status == 429:
        return openai_error(
            "Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): "
            "Limit 30000, Used 29000, Requested 5000. Please try again in 2s.",
            "tokens",
            "rate_limit_exceeded",
        )
    if status == 503:
        return openai_error(
            "The engine is currently overloaded, please try again later.", "server_error"
        )
    if status >= 500:
        return openai_error(
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
        )
    return openai_error("Bad request.", "invalid_request_error")


def anthropic_status_body(status: int) -> Body:
    """The body Anthropic sends with a given error status."""
    kinds = {
        400: ("invalid_request_error", "Bad request."),
        401: ("authentication_error", "invalid x-api-key"),
        403: ("permission_error", "Your API key does not have permission to use this."),
        404: ("not_found_error", "Not found."),
        429: (
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 40,000 input "
            "tokens per minute.",
        ),
        500: ("api_error", "Internal server error"),
        529: ("overloaded_error", "Overloaded"),
    }
    kind, message = kinds.get(status, ("api_error", "Internal server error"))
    return anthropic_error(kind, message)


# ----------------------------------------------------------------- request validation


def openai_request_problem(body: Body) -> Body | None:
    """The 400 body OpenAI would answer this chat-completions request with, if any."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return openai_error(
            "[] is too short - 'messages'", "invalid_request_error", None, "messages"
        )
    pending: list[str] = []
    pending_at = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return openai_error(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    "invalid_request_error",
                    None,
                    f"messages.[{i}].role",
                )
            pending.remove(call_id)
            continue
        if pending:
            return _openai_unanswered(pending, pending_at)
        if role == "assistant":
            pending = [c.get("id") for c in message.get("tool_calls") or []]
            pending_at = i
    if pending:
        return _openai_unanswered(pending, pending_at)
    return None


def _openai_unanswered(pending: list[str], at: int) -> Body:
    return openai_error(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending),
        "invalid_request_error",
        None,
        f"messages.[{at}].role",
    )


def _starts_with_compaction(messages: list[Any]) -> bool:
    content = messages[0].get("content")
    return isinstance(content, list) and bool(content) and isinstance(content[0], dict) \
        and content[0].get("type") == "compaction"


def _compactions(messages: list[Any]) -> list[tuple[int, int]]:
    return [(i, j) for i, m in enumerate(messages) if isinstance(m.get("content"), list)
            for j, b in enumerate(m["content"])
            if isinstance(b, dict) and b.get("type") == "compaction"]


def anthropic_effective(body: Body) -> Body:
    """What the Messages API reads of a request with a compaction block: it drops every
    block before the (latest) compaction block, so only the rest is counted."""
    messages = body.get("messages")
    found = _compactions(messages) if isinstance(messages, list) else []
    if not found:
        return body
    i, j = found[-1]
    head = {**messages[i], "content": messages[i]["content"][j:]}
    return {**body, "messages": [head, *messages[i + 1:]]}


def _compaction_problem(messages: list[Any]) -> Body | None:
    """The compaction errors the installed SDK names (`CompactionBlockMisplacedError`,
    `CompactionBlockAmbiguousError`): a block only in an assistant turn, and only one
    block with content per request."""
    found = _compactions(messages)
    if len([1 for i, j in found if messages[i]["content"][j].get("content")]) > 1:
        return anthropic_error("invalid_request_error", "compaction_block_ambiguous: send "
                               "only the compaction block the conversation returned last")
    for i, j in found:
        if messages[i].get("role") != "assistant":
            return anthropic_error("invalid_request_error", f"messages.{i}.content.{j}: "
                                   "compaction_block_misplaced: a compaction block belongs "
                                   "in an assistant turn")
    return None


def anthropic_request_problem(body: Body) -> Body | None:
    """The 400 body the Messages API would answer this request with, if any."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return anthropic_error("invalid_request_error",
                               "messages: at least one message is required")
    if body.get("max_tokens") is None:
        return anthropic_error("invalid_request_error", "max_tokens: Field required")
    problem = _compaction_problem(messages)
    if problem is not None:
        return problem
    if messages[0].get("role") != "user" and not _starts_with_compaction(messages):
        return anthropic_error(
            "invalid_request_error", 'messages: first message must use the "user" role'
        )
    pending: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if i and messages[i - 1].get("role") == role:
            return anthropic_error(
                "invalid_request_error",
                f'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row',
            )
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [(j, b) for j, b in enumerate(blocks) if b.get("type") == "tool_result"]
        for j, block in results:
            if block.get("tool_use_id") not in pending:
                return anthropic_error(
                    "invalid_request_error",
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                    "block must have a corresponding `tool_use` block in the previous message.",
                )
        answered = {b.get("tool_use_id") for _, b in results}
        missing = [p for p in pending if p not in answered]
        if missing:
            return anthropic_error(
                "invalid_request_error",
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message.",
            )
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text") or "").strip():
                return anthropic_error(
                    "invalid_request_error",
                    f"messages.{i}.content.{j}.text: text content blocks must be non-empty",
                )
        pending = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
    if pending:
        return anthropic_error(
            "invalid_request_error",
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` "
            f"blocks immediately after: {', '.join(pending)}. Each `tool_use` block must have "
            "a corresponding `tool_result` block in the next message.",
        )
    return None
