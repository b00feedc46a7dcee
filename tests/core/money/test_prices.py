"""The price model (SPEC Q1): prices from data, each provider's cache rules, hand-computed cases.

Every expected figure below is worked out by hand from the provider's published rule, in the
comment beside it, so a change to the model that changes a bill fails here.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.models.catalog import CatalogConfigError, load_overrides
from contextfold.core.money.prices import (
    Block,
    PriceBook,
    PriceConfigError,
    PromptCache,
    TokenPrices,
    cache_rules,
    request_cost,
    total,
)
from contextfold.core.sizing.resolver import user_prices
from contextfold.core.values.messages import Usage

BOOK = PriceBook.packaged()


# Q1: prices come from the packaged catalog, by the name the capacity resolves by
def test_q1_packaged_prices_resolve_like_capacities() -> None:
    sonnet = BOOK.lookup("claude-sonnet-4-5")
    assert sonnet is not None and sonnet.name == "anthropic/claude-sonnet-4-5"
    assert (sonnet.prices.input, sonnet.prices.output) == (3.0, 15.0)
    assert (sonnet.prices.cache_read, sonnet.prices.cache_write) == (0.3, 3.75)
    assert sonnet.rules.kind == "explicit" and sonnet.rules.max_breakpoints == 4
    # A dated id and a dotted id find the same maker's row.
    assert BOOK.lookup("claude-sonnet-4-5-20250929").prices == sonnet.prices  # type: ignore[union-attr]
    haiku = BOOK.lookup("claude-haiku-4.5")
    assert haiku is not None and haiku.name == "anthropic/claude-haiku-4-5"
    # A bare first-party name is priced at its maker's rate, not a reseller's.
    gemini = BOOK.lookup("gemini-2.5-pro")
    assert gemini is not None and gemini.name == "google/gemini-2.5-pro"
    assert gemini.rules.kind == "implicit" and gemini.rules.min_tokens == 4096
    gpt = BOOK.lookup("gpt-4o")
    assert gpt is not None and gpt.rules.kind == "automatic" and gpt.rules.step == 128
    assert BOOK.lookup("offline/echo") is None
    assert BOOK.lookup("no-such-model-anywhere") is None


# Q1: Anthropic's minimum cacheable length differs by model
@pytest.mark.parametrize(("model", "minimum"), [
    ("claude-sonnet-4-5", 1024), ("claude-opus-4-1", 1024), ("claude-sonnet-4-6", 2048),
    ("claude-3-5-haiku-latest", 2048), ("claude-opus-4-5", 4096), ("claude-haiku-4-5", 4096),
])
def test_q1_anthropic_minimum_cacheable_length(model: str, minimum: int) -> None:
    assert cache_rules("anthropic", model).min_tokens == minimum


# Q1: a request's reported usage, priced by kind
def test_q1_anthropic_usage_hand_computed() -> None:
    sonnet = BOOK.lookup("claude-sonnet-4-5")
    assert sonnet is not None
    usage = Usage(input=1_000, cache_read=100_000, cache_write=5_000, output=500)
    # 1,000 x $3 + 100,000 x $0.30 + 5,000 x $3.75 + 500 x $15 per million
    # = 0.003 + 0.03 + 0.01875 + 0.0075 = $0.05925
    assert sonnet.cost(usage).usd == pytest.approx(0.05925)


def test_q1_missing_cache_prices_use_the_providers_multiplier() -> None:
    prices = TokenPrices(input=2.0, output=8.0)
    anthropic = cache_rules("anthropic", "claude-sonnet-4-5")
    # read 0.1x = $0.20/M, write 1.25x = $2.50/M: 10,000 x 0.2 + 4,000 x 2.5 = 0.002 + 0.01
    cost = request_cost(prices, Usage(cache_read=10_000, cache_write=4_000), anthropic)
    assert cost.usd == pytest.approx(0.012)
    one_hour = cache_rules("anthropic", "claude-sonnet-4-5", ttl="1h")
    # the 1-hour TTL writes at 2x: 4,000 x $4 = $0.016
    assert request_cost(prices, Usage(cache_write=4_000), one_hour).usd == pytest.approx(0.016)
    openai = cache_rules("openai", "gpt-4o")
    # OpenAI charges no write; an unlisted read price is half the input price
    assert request_cost(prices, Usage(cache_read=10_000, cache_write=0), openai).usd == \
        pytest.approx(0.01)


def test_q1_long_prompt_tier() -> None:
    prices = TokenPrices(input=3.0, output=15.0, long=TokenPrices(input=6.0, output=22.5))
    rules = cache_rules("anthropic", "claude-sonnet-4-5")
    assert request_cost(prices, Usage(input=200_000), rules).usd == pytest.approx(0.6)
    # above 200k prompt tokens every token is at the long rate: 200,001 x $6/M
    assert request_cost(prices, Usage(input=200_001), rules).usd == pytest.approx(1.200006)


def test_q1_unpriced_model_still_counts_tokens() -> None:
    cost = request_cost(None, Usage(input=10, cache_read=5, output=2),
                        cache_rules(None, "offline/echo"))
    assert cost.usd is None and cost.prompt_tokens == 15 and cost.output_tokens == 2
    both = total([cost, cost])
    assert both.usd is None and both.requests == 2 and both.input_tokens == 20


# Q1: OpenAI caches every prompt of 1,024+ tokens by prefix, counted in 128-token steps
def test_q1_openai_automatic_cache_hand_computed() -> None:
    cache = PromptCache(cache_rules("openai", "gpt-4o"))
    first = [Block("sys", 900), Block("u1", 400)]           # 1,300 tokens
    usage, cache = cache.charge(first, 50, now=0)
    assert (usage.input, usage.cache_read, usage.cache_write) == (1300, 0, 0)
    second = [*first, Block("a1", 50), Block("u2", 300)]    # 1,650 tokens
    usage, cache = cache.charge(second, 50, now=10)
    # the cached prefix is 1,300 tokens, counted down to a multiple of 128: 1,280
    assert (usage.input, usage.cache_read) == (1650 - 1280, 1280)
    # an edit at the start breaks the prefix: nothing is read
    edited = [Block("sys-v2", 900), *second[1:]]
    usage, _ = cache.charge(edited, 50, now=20)
    assert usage.cache_read == 0
    # after the entry's time to live, nothing is read either
    usage, _ = cache.charge(second, 50, now=10 + 301)
    assert usage.cache_read == 0


# Q1: OpenAI's cache reads the longest start shared with any cached prompt (at message
# boundaries), not only a whole earlier prompt: a request that drops or rewrites its end
# (a trimmed tail, a masked tool result) still reads the start it kept
def test_q1_openai_reads_the_longest_shared_start() -> None:
    cache = PromptCache(cache_rules("openai", "gpt-4.1"))
    first = [Block("sys", 1000), Block("u1", 500), Block("t1", 2000)]   # 3,500 tokens
    _, cache = cache.charge(first, 50, now=0)
    # the tool result t1 is masked: sys + u1 (1,500 tokens) are shared; 1,500 // 128 = 11
    # steps, 1,408 tokens read; 1,500 + 100 - 1,408 = 192 uncached
    masked = [Block("sys", 1000), Block("u1", 500), Block("t1-masked", 100)]
    usage, cache = cache.charge(masked, 50, now=10)
    assert (usage.input, usage.cache_read, usage.cache_write) == (192, 1408, 0)
    # both prompts stay cached: a third request that continues the first reads all 3,500
    # tokens' steps (27 x 128 = 3,456) and the masked one's start is kept too
    usage, cache = cache.charge([*first, Block("u2", 300)], 50, now=20)
    assert (usage.input, usage.cache_read) == (3800 - 3456, 3456)
    # a start shorter than the 1,024-token minimum is never read: sys alone (1,000)
    usage, _ = cache.charge([Block("sys", 1000), Block("other", 2000)], 50, now=30)
    assert usage.cache_read == 0
    # gpt-4.1 at the packaged prices ($2 in, $0.50 cached, $8 out): the masked request
    # cost 192 x 2 + 1,408 x 0.5 + 50 x 8 = 1,488 micro-dollars
    price = BOOK.lookup("gpt-4.1")
    assert price is not None
    assert price.cost(Usage(input=192, cache_read=1408, output=50)).usd == \
        pytest.approx(1488e-6)


def test_q1_openai_short_prompt_is_never_cached() -> None:
    cache = PromptCache(cache_rules("openai", "gpt-4o"))
    blocks = [Block("sys", 600), Block("u1", 300)]          # 900 < 1,024
    _, cache = cache.charge(blocks, 10, now=0)
    usage, _ = cache.charge([*blocks, Block("u2", 500)], 10, now=1)
    assert usage.cache_read == 0


# Q1: Anthropic caches only at cache_control breakpoints, from the model's minimum
def test_q1_anthropic_explicit_cache_hand_computed() -> None:
    rules = cache_rules("anthropic", "claude-sonnet-4-5")  # minimum 1,024; 5 minutes
    cache = PromptCache(rules)
    first = [Block("tools", 500), Block("sys", 800, breakpoint=True), Block("u1", 2000,
                                                                            breakpoint=True)]
    usage, cache = cache.charge(first, 100, now=0)
    # nothing cached yet: the whole prefix up to the last breakpoint (3,300) is written
    assert (usage.input, usage.cache_read, usage.cache_write) == (0, 0, 3300)
    second = [Block("tools", 500), Block("sys", 800, breakpoint=True), Block("u1", 2000),
              Block("a1", 100), Block("u2", 400, breakpoint=True)]
    usage, cache = cache.charge(second, 100, now=60)
    # read the 3,300 cached at u1; write what follows up to the new breakpoint: 500
    assert (usage.input, usage.cache_read, usage.cache_write) == (0, 3300, 500)
    # a block after the last breakpoint is plain input
    third = [*second, Block("u3", 250)]
    usage, _ = cache.charge(third, 100, now=120)
    assert (usage.input, usage.cache_read, usage.cache_write) == (250, 3800, 0)
    # a compaction replaces the history after the system prompt: only tools+sys (1,300) is
    # read, the checkpoint and tail are written again
    compacted = [Block("tools", 500), Block("sys", 800, breakpoint=True),
                 Block("checkpoint", 1500, breakpoint=True), Block("u4", 300)]
    usage, _ = cache.charge(compacted, 100, now=130)
    assert (usage.input, usage.cache_read, usage.cache_write) == (300, 1300, 1500)


def test_q1_anthropic_no_breakpoint_no_cache_and_at_most_four() -> None:
    cache = PromptCache(cache_rules("anthropic", "claude-sonnet-4-5"))
    usage, cache = cache.charge([Block("sys", 5000)], 10, now=0)
    assert (usage.input, usage.cache_write) == (5000, 0)
    with pytest.raises(ValueError, match="at most 4"):
        cache.charge([Block(str(i), 2000, breakpoint=True) for i in range(5)], 10, now=1)
    # a prefix below the minimum is not written even at a breakpoint
    usage, _ = cache.charge([Block("small", 800, breakpoint=True)], 10, now=2)
    assert (usage.input, usage.cache_write) == (800, 0)


def test_q1_google_implicit_and_others_uncached() -> None:
    flash = PromptCache(cache_rules("google", "gemini-2.5-flash"))
    blocks = [Block("sys", 1500), Block("u1", 500)]
    _, flash = flash.charge(blocks, 10, now=0)
    usage, _ = flash.charge([*blocks, Block("u2", 100)], 10, now=5)
    assert (usage.cache_read, usage.cache_write) == (2000, 0)  # step 1: the exact prefix
    other = PromptCache(cache_rules("somehost", "llama-3"))
    _, other = other.charge(blocks, 10, now=0)
    usage, _ = other.charge(blocks, 10, now=1)
    assert usage.cache_read == 0 and usage.input == 2000


# Q1: the modelled split never loses or invents a token
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(1, 3000), st.booleans()),
                min_size=1, max_size=12),
       st.sampled_from(["anthropic", "openai", "google", "other"]))
def test_q1_cache_split_accounts_for_every_token(raw: list[tuple[str, int, bool]],
                                                 provider: str) -> None:
    rules = cache_rules(provider, "claude-sonnet-4-5" if provider == "anthropic" else "m")
    cache = PromptCache(rules)
    marks = 0
    blocks = []
    for i, (key, tokens, mark) in enumerate(raw):
        mark = mark and marks < 4
        marks += mark
        blocks.append(Block(f"{key}{i}", tokens, breakpoint=mark))
    for step in range(3):
        usage, cache = cache.charge(blocks[: len(blocks) - step] or blocks, 7, now=step)
        sent = sum(b.tokens for b in (blocks[: len(blocks) - step] or blocks))
        assert usage.input + usage.cache_read + usage.cache_write == sent
        assert min(usage.input, usage.cache_read, usage.cache_write) >= 0


# Q1: overridable per model, in the same file as capacities
def test_q1_price_overrides_in_the_models_file(tmp_path) -> None:
    f = tmp_path / "models.toml"
    f.write_text('[models."my-local"]\ncontext_window = 8192\n\n'
                 '[prices."my-local"]\ninput = 0.5\noutput = 1.5\n\n'
                 '[prices."claude-sonnet-4-5"]\ninput = 2.4\noutput = 12.0\n'
                 'cache_read = 0.24\ncache_write = 3.0\n')
    book = user_prices({"CONTEXTFOLD_MODELS": str(f)})
    local = book.lookup("my-local")
    assert local is not None and local.prices == TokenPrices(input=0.5, output=1.5)
    assert local.rules.kind == "none"
    sonnet = book.lookup("claude-sonnet-4-5")
    assert sonnet is not None and sonnet.prices.input == 2.4
    assert sonnet.rules.kind == "explicit"  # an override keeps the provider's cache rules
    assert load_overrides(f) == {"my-local": {"context_window": 8192}}
    prices_only = tmp_path / "prices.json"
    prices_only.write_text(json.dumps({"prices": {"x": {"input": 1, "output": 2}}}))
    assert load_overrides(prices_only) == {}
    assert user_prices({"CONTEXTFOLD_MODELS": str(prices_only)}).lookup("x") is not None


@pytest.mark.parametrize(("table", "message"), [
    ('[prices."m"]\ninput = -1\noutput = 1\n', "input must be a number >= 0"),
    ('[prices."m"]\ninput = 1\n', "needs both input and output"),
    ('[prices."m"]\ninput = 1\noutput = 1\nper_call = 3\n', "unknown key 'per_call'"),
    ('prices = 3\n', "'prices' must be a table"),
])
def test_q1_bad_price_override_names_the_key(tmp_path, table: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(table)
    with pytest.raises(PriceConfigError, match=message) as info:
        BOOK.with_overrides(f)
    assert str(f) in str(info.value)


def test_q1_unreadable_overrides_file_is_named(tmp_path) -> None:
    f = tmp_path / "broken.toml"
    f.write_text("[prices\n")
    with pytest.raises(CatalogConfigError, match="not valid TOML"):
        BOOK.with_overrides(f)
