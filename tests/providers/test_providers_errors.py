"""Error normalisation on the providers' real error bodies (no network).

The bodies below are what the services answered, as quoted in public bug reports of
OpenAI, Anthropic, vLLM, llama.cpp, Ollama, OpenRouter, LM Studio and others.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold.providers.errors import (
    ContextOverflowError,
    ProviderAuthError,
    ProviderRequestError,
    ProviderUnavailableError,
    RateLimitError,
    error_fields,
    from_status,
    is_context_overflow,
    parse_overflow,
    redact,
    retry_after_seconds,
)
from contextfold.providers.retry import RetryPolicy, call_with_retries

# (name, status, body, (requested, limit) or None when the body gives no numbers)
OVERFLOWS = [
    ("openai messages", 400, {"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
                   "resulted in 8227 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}, (8227, 8192)),
    ("openai with completion", 400, {"error": {
        "message": "This model's maximum context length is 4097 tokens. However, you requested "
                   "4268 tokens (4012 in the messages, 256 in the completion). Please reduce "
                   "the length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}, (4268, 4097)),
    ("openai responses wording", 400, {"error": {
        "message": "Your input exceeds the context window of this model. Please adjust your "
                   "input and try again.", "type": "invalid_request_error", "param": "input",
        "code": "context_length_exceeded"}}, None),
    ("anthropic prompt", 400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 209324 tokens > 200000 maximum"},
        "request_id": "req_011CVQe1dLrGNMJyE1ghG1av"}, (209324, 200000)),
    ("anthropic prompt + max_tokens", 400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 188240 + 21333 > "
                   "200000, decrease input length or `max_tokens` and try again"}},
     (209573, 200000)),
    ("vllm current", 400, {"object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, your request "
                   "has 40000 input tokens. Please reduce the length of the input messages.",
        "type": "BadRequestError", "param": None, "code": 400}, (40000, 32768)),
    ("vllm older", 400, {"object": "error",
        "message": "This model's maximum context length is 6048 tokens. However, you requested "
                   "6616 tokens (568 in the messages, 6048 in the completion). Please reduce "
                   "the length of the messages or completion.",
        "type": "BadRequestError", "param": None, "code": 400}, (6616, 6048)),
    ("vllm max_tokens", 400, {"error": {
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's "
                   "maximum context length is 8192 tokens and your request has 5000 input "
                   "tokens (4096 > 8192 - 5000).", "type": "BadRequestError", "code": 400}},
     (9096, 8192)),
    ("llama.cpp typed", 400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
                                "increasing it", "type": "exceed_context_size_error",
        "n_prompt_tokens": 14429, "n_ctx": 8192}}, (14429, 8192)),
    ("llama.cpp older (500)", 500, {"error": {
        "code": 500, "message": "the request exceeds the available context size. try "
                                "increasing the context size or enable context shift",
        "type": "invalid_request_error"}}, None),
    ("ollama", 400, {"error": "the input length exceeds the context length"}, None),
    ("openrouter", 400, {"error": {
        "message": "This endpoint's maximum context length is 131072 tokens. However, you "
                   "requested about 138956 tokens (7884 of text input, 131072 in the output). "
                   "Please reduce the length of either one, or use the \"middle-out\" "
                   "transform to compress your prompt automatically.", "code": 400}},
     (138956, 131072)),
    ("openrouter gemini", 400, {"error": {
        "message": "This model's maximum context length is 8192 tokens, however you requested "
                   "8977 tokens (8977 in your prompt; 0 for the completion). Please reduce "
                   "your prompt; or completion length.", "type": "invalid_request_error",
        "param": None, "code": None}}, (8977, 8192)),
    ("lm studio", 400, {"error": "Trying to keep the first 6269 tokens when context the "
                                 "overflows. However, the model is loaded with context length "
                                 "of only 4096 tokens, which is not enough."}, (6269, 4096)),
    ("litellm proxy", 400, {"error": {
        "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
                   "Hosted_vllmException - Input length 9000 exceeds model limit",
        "type": None, "param": None, "code": "400"}}, (9000, None)),
    ("gemini", 400, {"error": {
        "code": 400, "message": "The input token count (1043256) exceeds the maximum number "
                                "of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}},
     (1043256, 1048576)),
    ("mistral", 400, {"error": {"message": "Prompt contains 10000 tokens and 0 draft tokens, "
                                           "too large for model with 8192 maximum context "
                                           "length"}}, (10000, 8192)),
]

NOT_OVERFLOWS = [
    ("tool without call", 400, {"error": {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                   "preceeding message with 'tool_calls'.", "type": "invalid_request_error",
        "param": "messages.[3].role", "code": None}}, ProviderRequestError),
    ("output cap (openai)", 400, {"error": {
        "message": "max_tokens is too large: 128000. This model supports at most 16384 "
                   "completion tokens, whereas you provided 128000.",
        "type": "invalid_request_error", "param": "max_tokens", "code": None}},
     ProviderRequestError),
    ("output cap (anthropic)", 400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "max_tokens: 100000 > 64000, which is the maximum allowed number of output "
                   "tokens for claude-sonnet-4-20250514"}}, ProviderRequestError),
    ("tokens per minute", 429, {"error": {
        "message": "Rate limit reached for gpt-4o in organization org-x on tokens per min "
                   "(TPM): Limit 30000, Used 29000, Requested 5000. Please try again in 2s.",
        "type": "tokens", "code": "rate_limit_exceeded"}}, RateLimitError),
    # A 429 is a rate limit whatever its text says: retrying later helps, compacting not.
    ("429 worded like an overflow", 429, {"type": "error", "error": {
        "type": "rate_limit_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum"}}, RateLimitError),
    ("groq TPM as 413", 413, {"error": {
        "message": "Request too large for model `llama3-70b-8192` in organization `org_x` on "
                   "tokens per minute (TPM): Limit 6000, Requested 9000, please reduce your "
                   "message size and try again.", "type": "tokens",
        "code": "rate_limit_exceeded"}}, ProviderRequestError),
    ("server error naming the window", 500, {"error": {
        "message": "failed to load the model: the maximum context length is not available",
        "type": "server_error"}}, ProviderUnavailableError),
    ("anthropic overloaded", 529, {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}}, ProviderUnavailableError),
    ("bad key", 401, {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"}}, ProviderAuthError),
]


def classify(status: int, body: object) -> object:
    return from_status(provider="p", label="P", status=status, body=body, env_var="P_KEY")


@pytest.mark.parametrize("name,status,body,numbers", OVERFLOWS, ids=[o[0] for o in OVERFLOWS])
def test_real_overflow_bodies_become_context_overflow(name, status, body, numbers):  # P4
    error = classify(status, body)
    assert isinstance(error, ContextOverflowError), name
    if numbers is None:
        assert error.requested_tokens is None and error.limit_tokens is None
    else:
        assert (error.requested_tokens, error.limit_tokens) == numbers
    assert "Compact the session" in str(error)


@pytest.mark.parametrize("name,status,body,kind", NOT_OVERFLOWS,
                         ids=[o[0] for o in NOT_OVERFLOWS])
def test_other_refusals_are_not_overflow(name, status, body, kind):  # P4
    error = classify(status, body)
    assert type(error) is kind, name
    assert not is_context_overflow(status, str(error_fields(body).get("message")),
                                   error_fields(body))


def test_openai_sdk_unwrapped_body_is_understood():  # P4
    # The openai SDK hands over `body["error"]`, not the whole body.
    inner = OVERFLOWS[0][2]["error"]
    error = classify(400, inner)
    assert isinstance(error, ContextOverflowError) and error.requested_tokens == 8227


@given(limit=st.integers(1, 10_000_000), prompt=st.integers(1, 10_000_000),
       completion=st.integers(1, 1_000_000))
def test_parsed_numbers_round_trip_through_every_wording(limit, prompt, completion):  # P4
    wordings = {
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {prompt} tokens.": (prompt, limit),
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion).": (prompt + completion, limit),
        f"prompt is too long: {prompt} tokens > {limit} maximum": (prompt, limit),
        f"input length and `max_tokens` exceed context limit: {prompt} + {completion} > "
        f"{limit}, decrease input length": (prompt + completion, limit),
        f"This model's maximum context length is {limit} tokens. However, your request has "
        f"{prompt} input tokens.": (prompt, limit),
    }
    for text, (requested, lim) in wordings.items():
        nums = parse_overflow(text)
        assert (nums.requested, nums.limit) == (requested, lim), text
        assert is_context_overflow(400, text)


def test_redact_removes_given_secrets_and_key_shapes():  # P4
    text = "key sk-proj-abcdef123456 and sk-abc***wxyz and my-own-secret-value"
    out = redact(text, ["my-own-secret-value"])
    assert "abcdef123456" not in out and "***wxyz" not in out and "my-own-secret" not in out
    assert out.count("[redacted]") == 3


def test_auth_error_message_never_contains_the_key():  # P4
    body = {"error": {"message": "Incorrect API key provided: sk-abc*****************wxyz.",
                      "type": "invalid_request_error", "code": "invalid_api_key"}}
    error = from_status(provider="openai", label="OpenAI", status=401, body=body,
                        env_var="OPENAI_API_KEY", secrets=["sk-abcdefghijklmnopqrstwxyz"])
    assert isinstance(error, ProviderAuthError)
    assert "OPENAI_API_KEY" in str(error) and "wxyz" not in str(error)


@pytest.mark.parametrize("headers,expected", [
    ({"retry-after": "2"}, 2.0),
    ({"Retry-After": "0.5"}, 0.5),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after": "soon"}, None),
    ({}, None),
    (None, None),
])
def test_retry_after_header_parsing(headers, expected):  # P4
    assert retry_after_seconds(headers) == expected


def test_retry_after_http_date_is_in_the_future():  # P4
    wait = retry_after_seconds({"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})
    assert wait is not None and wait > 1_000_000


def test_retry_policy_backoff_grows_and_is_capped():  # P4
    policy = RetryPolicy(max_attempts=6, base_delay=1, max_delay=5, multiplier=2, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    assert policy.delay(1, retry_after=60) == 5, "a server hint is capped too"
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


async def test_call_with_retries_stops_at_the_first_non_retryable_error():  # P4
    calls = []
    errors = [RateLimitError("slow down", provider="p", status=429),
              ContextOverflowError("too big", provider="p", status=400)]

    async def attempt() -> str:
        calls.append(1)
        raise errors[len(calls) - 1]

    async def no_sleep(_: float) -> None:
        return None

    with pytest.raises(ContextOverflowError) as info:
        await call_with_retries(attempt, RetryPolicy(max_attempts=5, jitter=0), no_sleep)
    assert len(calls) == 2 and info.value.attempts == 2
