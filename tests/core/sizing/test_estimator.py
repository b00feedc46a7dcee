"""Estimator: conservative text counts, message parts, usage baseline + delta (SPEC E1-E5)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity
from contextfold.core.sizing.estimator import (
    CROSS_FAMILY_FACTORS,
    MESSAGE_OVERHEAD,
    REASONING_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_RESULT_OVERHEAD,
    Calibration,
    Estimate,
    estimate_checkpoint,
    estimate_message,
    estimate_request,
    estimate_text,
    exact_counter,
    usage_accuracy,
)
from contextfold.core.text.text_estimate import FAMILY_FACTORS
from contextfold.core.values.messages import (
    Checkpoint,
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    ZoteroItemPart,
    text_message,
)
from contextfold.core.values.resources import render_resource
from contextfold.core.view.projection import checkpoint_text, project
from tests.builders import assistant, branch_of, chain, tool_call, tool_result, user

FIXTURES = Path(__file__).parents[2] / "fixtures"
O200K = exact_counter("o200k_base")
CL100K = exact_counter("cl100k_base")
CLAUDE = ModelCapacity(model="claude-sonnet-4-5", context_window=200_000, max_output=64_000,
                       replays_reasoning=True, family="claude")
GPT = ModelCapacity(model="gpt-4o", context_window=128_000, max_output=16_384, family="gpt")

CHINESE = ("长时间运行的智能体会话需要在模型的上下文窗口之内工作。当对话越来越长时，系统必须决定"
           "保留哪些最近的消息，并把更早的内容压缩成结构化的摘要。估算下一次请求的令牌数时，"
           "我们优先使用服务商报告的用量，只对之后新增的消息进行保守的估计。")


def exact(text: str) -> int:
    return max(O200K(text), CL100K(text))


def usage(prompt: int, output: int = 50, model: str | None = None) -> Usage:
    return Usage(input=3, cache_read=prompt - 3, output=output, model=model)


# --------------------------------------------------------------------------- text (E4)


def test_empty_text_is_free():
    assert estimate_text("") == 0
    assert estimate_text("", "claude") == 0


def test_cjk_is_counted_per_character_not_divided_by_four():  # E4
    text = "日本語の文章をトークンに分割する"  # 16 characters
    assert estimate_text(text, "gpt") >= len(text)
    assert estimate_text(text, "gpt") >= exact(text)


def test_family_factors():
    for family in ("gpt", "gemini", "other"):
        assert min(FAMILY_FACTORS[family]) >= 1.0  # the OpenAI bound holds for these
    text = "Japanese 日本語 and English"
    assert estimate_text(text, "gemini") >= estimate_text(text, "gpt")
    assert estimate_text(text) == estimate_text(text, "other")  # unknown: the default family
    assert estimate_text(text, "no-such-family") == estimate_text(text, "other")
    jp = "日本語の文章" * 20
    assert estimate_text(jp, "claude") > estimate_text(jp, "gpt")  # CJK headroom for Claude


def _seed_texts() -> list[str]:
    out = []
    for path in sorted((FIXTURES / "seeds").glob("*.txt")):
        text = path.read_text("utf-8")
        out.append(text)
        out += [p for p in text.split("\n\n") if p.strip()]
    return out


def _fixture_tool_io() -> list[str]:
    """Tool inputs and outputs from the real Pi and Claude Code sessions, and Zotero JSON."""
    out: list[str] = []
    for line in (FIXTURES / "pi-mono" / "large-session.jsonl").read_text("utf-8").splitlines():
        entry = json.loads(line)
        msg = entry.get("message") or {}
        for block in msg.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and msg.get("role") == "toolResult":
                out.append(block["text"])
            elif block.get("type") == "toolCall":
                out.append(json.dumps(block["arguments"]))
    for line in (FIXTURES / "claude-code" / "tool_heavy.jsonl").read_text("utf-8").splitlines():
        msg = json.loads(line).get("message")
        if isinstance(msg, dict) and isinstance(msg.get("content"), list):
            for block in msg["content"]:
                if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
                    out.append(block["content"])
                elif block.get("type") == "tool_use":
                    out.append(json.dumps(block["input"]))
    out += [p.read_text("utf-8") for p in sorted((FIXTURES / "zotero").glob("*.json"))]
    return [t for t in out if t]


@pytest.mark.parametrize("family", [None, "gpt", "claude", "gemini"])
def test_never_below_exact_tokenizers_on_japanese_seeds(family):  # E4
    for text in _seed_texts():
        assert estimate_text(text, family) >= exact(text), text[:60]


@pytest.mark.parametrize("family", [None, "gpt", "claude"])
def test_never_below_exact_tokenizers_on_chinese_and_english(family):  # E4
    for text in [CHINESE, *CHINESE.split("。"), (FIXTURES / "README.md").read_text("utf-8")]:
        if text:
            assert estimate_text(text, family) >= exact(text)


@pytest.mark.parametrize("family", [None, "gpt", "claude"])
def test_never_below_exact_tokenizers_on_real_tool_io_and_json(family):  # E4
    texts = _fixture_tool_io()
    assert len(texts) > 700
    for text in texts:
        assert estimate_text(text, family) >= exact(text), text[:80]


ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def test_never_below_on_identifiers_hashes_and_base64():
    rnd = random.Random(7)
    import base64
    import uuid

    for _ in range(300):
        n = rnd.choice([8, 24, 64, 300])
        for text in (base64.b64encode(rnd.randbytes(n)).decode(), rnd.randbytes(n).hex(),
                     str(uuid.UUID(int=rnd.getrandbits(128))),
                     "".join(rnd.choice(ID_CHARS) for _ in range(n))):
            assert estimate_text(text, "gpt") >= exact(text), text


def test_a_node_id_costs_the_same_whatever_its_random_digits():  # E4
    """A checkpoint names node ids (UUIDv7: a timestamp and random bits, new every run); their
    estimate must not depend on those digits, or the same conversation's checkpoint fits a
    different number of lines from run to run. The fixed cost stays above both tokenizers."""
    import uuid

    from contextfold.core.text.text_estimate import LineCounter
    from contextfold.ids import new_id

    rnd = random.Random(11)
    ids = [new_id() for _ in range(200)] + [str(uuid.UUID(int=rnd.getrandbits(128)))
                                            for _ in range(200)]
    ids += ["00000000-0000-0000-0000-000000000000", "0a0a0a0a-a0a0-a0a0-a0a0-a0a0a0a0a0a0"]
    contexts = ["{}", "(node {})", "- node {} (turn 17, user): Please open", "x\n{}\n- {}; {}"]
    for context in contexts:
        for family in (None, "gpt", "claude"):
            counts = {estimate_text(context.format(i, i, i), family) for i in ids}
            assert len(counts) == 1, (context, family, counts)
            lines = LineCounter(family)
            assert {lines(context.format(i, i, i)) for i in ids} == counts
        for i in ids:
            text = context.format(i, i, i)
            assert estimate_text(text, "gpt") >= exact(text), text
    # Only a whole id standing alone: one inside a longer run is ordinary text.
    assert estimate_text("x" + ids[-2]) < estimate_text("x" + ids[-1])


def test_not_absurdly_high_on_prose_and_code():
    prose = (FIXTURES / "README.md").read_text("utf-8")
    code = Path(__file__).read_text("utf-8")
    for text in (prose, code):
        assert estimate_text(text, "gpt") <= 1.8 * O200K(text)
    jp = (FIXTURES / "seeds" / "000_b6db82262b986913.txt").read_text("utf-8")
    assert estimate_text(jp, "gpt") <= 1.3 * CL100K(jp)


WORDS = [
    "the", "of", "and", "to", "in", "is", "for", "that", "with", "on", "as", "are", "this",
    "context", "window", "summary", "checkpoint", "compaction", "session", "model", "token",
    "function", "return", "import", "class", "def", "self", "None", "True", "const", "await",
    "Zotero", "PDF", "DOI", "http", "https", "www", "json", "yaml", "config", "error", "failed",
]
CODE_PUNCT = "{}[]()<>:;,.=+-*/\\|&!?#$%^~`'\"@_"


def _chars(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.characters(min_codepoint=lo, max_codepoint=hi)


_chunk = st.one_of(
    st.sampled_from(WORDS),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
            min_size=1, max_size=40),  # identifiers, hashes
    st.integers(-10**12, 10**12).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(alphabet=CODE_PUNCT, min_size=1, max_size=6),
    st.sampled_from([" ", "\n", "  ", "\t", "\n    ", "\n\n", "\r\n"]),
    st.text(alphabet=_chars(0x4E00, 0x9FFF), min_size=1, max_size=30),  # any CJK, rare too
    st.text(alphabet=_chars(0x3041, 0x30FA), min_size=1, max_size=30),  # kana
    st.text(alphabet=_chars(0x3000, 0x303F), min_size=1, max_size=3),  # CJK punctuation
    st.text(alphabet=st.one_of(_chars(0x1F300, 0x1F64F), _chars(0x1F900, 0x1F9FF),
                               _chars(0x2600, 0x27BF)), min_size=1, max_size=8),  # emoji
    st.text(alphabet="0123456789", min_size=1, max_size=20),
)
mixed_scripts = st.lists(st.tuples(_chunk, st.sampled_from(["", " ", "", "\n"])),
                         max_size=40).map(lambda parts: "".join(a + b for a, b in parts))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixed_scripts)
def test_property_never_below_o200k_and_cl100k_on_mixed_scripts(text):  # E4
    assert estimate_text(text, "gpt") >= exact(text)
    assert estimate_text(text) >= exact(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=120))
def test_property_never_below_on_arbitrary_unicode(text):  # E4
    assert estimate_text(text, "gpt") >= exact(text)


def test_char_cost_table_matches_the_tokenizers():
    """The packaged per-character table agrees with the bundled tokenizers (sampled)."""
    from importlib import resources

    data = json.loads(resources.files("contextfold.data").joinpath(
        "tokenizer_char_costs.json").read_text("utf-8"))
    rnd = random.Random(3)
    for key, cost in (("t1", 1), ("t2", 2)):
        ranges = data[key]
        for _ in range(150):
            lo, hi = rnd.choice(ranges)
            assert exact(chr(rnd.randint(lo, hi))) == cost


def test_text_estimate_is_fast():
    import time

    text = (FIXTURES / "claude-code" / "tool_heavy.jsonl").read_text("utf-8") * 10  # ~400 KB
    start = time.perf_counter()
    estimate_text(text)
    assert time.perf_counter() - start < 1.0


# --------------------------------------------------------------------------- messages (E4)


def test_message_parts_are_all_counted():
    call = ToolCallPart(id="c1", name="search", input={"q": "context windows"})
    msg = Message(role="assistant", parts=(TextPart(text="Looking."), call))
    expected = (MESSAGE_OVERHEAD + estimate_text("Looking.", "claude") + TOOL_CALL_OVERHEAD
                + estimate_text('search {"q": "context windows"}', "claude"))
    assert estimate_message(msg, CLAUDE) == expected
    result = Message(role="tool", parts=(ToolResultPart(call_id="c1", output="3 hits"),))
    assert estimate_message(result, CLAUDE) == (MESSAGE_OVERHEAD + TOOL_RESULT_OVERHEAD
                                                + estimate_text("3 hits", "claude"))


def test_resource_parts_use_the_shared_rendering():
    item = ZoteroItemPart(item_key="NM66T6EF", title="Deep Learning", citation="LeCun 2015")
    msg = Message(role="tool", parts=(item,))
    assert estimate_message(msg, GPT) == MESSAGE_OVERHEAD + estimate_text(
        render_resource(item), "gpt")


def test_images_and_files_cost_a_fixed_configurable_amount():  # E4
    cap = CLAUDE.model_copy(update={"image_tokens": 1234, "file_tokens": 77})
    base = Message(role="user", parts=(TextPart(text="see"),))
    with_files = Message(role="user", parts=(
        TextPart(text="see"),
        FilePart(name="a.png", media_type="image/png", size=5_000_000),
        FilePart(name="b.jpg", media_type="image/jpeg"),
        FilePart(name="c.pdf", media_type="application/pdf", size=10),
    ))
    assert estimate_message(with_files, cap) - estimate_message(base, cap) == 2 * 1234 + 77
    assert estimate_message(with_files) - estimate_message(base) == 3 * 1600  # no capacity


def test_reasoning_counts_only_when_the_provider_replays_it():  # E4
    thinking = "First, check the window. Then compare both budgets. " * 20
    msg = Message(role="assistant", parts=(ReasoningPart(text=thinking),
                                           TextPart(text="answer")))
    plain = Message(role="assistant", parts=(TextPart(text="answer"),))
    assert estimate_message(msg, CLAUDE) == (estimate_message(plain, CLAUDE) + REASONING_OVERHEAD
                                             + estimate_text(thinking, "claude"))
    assert estimate_text(thinking, "claude") > O200K(thinking)
    no_replay = CLAUDE.model_copy(update={"replays_reasoning": False})
    assert estimate_message(msg, no_replay) == estimate_message(plain, no_replay)
    assert estimate_message(msg, GPT) == estimate_message(plain, GPT)


def test_checkpoint_estimate_is_the_summary_as_sent():
    cp = Checkpoint(summary="## Goal\nFind papers on context windows.", first_kept_id=None,
                    tokens_before=1000)
    assert estimate_checkpoint(cp, "claude") == MESSAGE_OVERHEAD + estimate_text(
        checkpoint_text(cp), "claude")


# --------------------------------------------------------------------------- requests (E1-E3)


def _session() -> list:
    return chain([
        user("first question"),
        tool_call("t1", usage=usage(1_000, 40)),
        tool_result("t1", "result one"),
        assistant("first answer", usage=usage(1_200, 60)),
        user("second question " + "x" * 400),
    ])


def test_e1_baseline_is_latest_valid_usage_and_e2_adds_only_what_follows():
    nodes = _session()
    est = estimate_request(project(branch_of(nodes)), CLAUDE)
    assert isinstance(est, Estimate)
    assert est.method == "usage+delta"
    assert est.baseline_node_id == "n3"
    assert est.breakdown["baseline"] == 1_200 + 60  # occupied: prompt + output (E1)
    assert est.breakdown["delta"] == estimate_message(nodes[4].payload, CLAUDE)
    assert est.tokens == est.breakdown["baseline"] + est.breakdown["delta"]
    assert est.breakdown["system"] == est.breakdown["tools"] == est.breakdown["pending"] == 0


def test_e3_baseline_is_one_request_never_a_sum_of_usages():
    est = estimate_request(project(branch_of(_session())), CLAUDE)
    assert est.breakdown["baseline"] == 1_260  # not 1_040 + 1_260


@pytest.mark.parametrize("status", ["error", "aborted", "streaming"])
def test_e1_errored_aborted_or_streaming_reply_is_never_a_baseline(status):
    nodes = chain([
        user("q"),
        assistant("a", usage=usage(1_000)),
        user("q2"),
        assistant("partial", usage=usage(5_000), status=status),
    ])
    est = estimate_request(project(branch_of(nodes)), CLAUDE)
    assert est.baseline_node_id == "n1"
    assert est.breakdown["delta"] == sum(estimate_message(n.payload, CLAUDE) for n in nodes[2:])


def test_e1_zero_usage_falls_back_to_the_whole_projection():
    nodes = chain([user("q"), assistant("a", usage=Usage()), user("q2")])
    est = estimate_request(project(branch_of(nodes)), CLAUDE, system="Be brief.")
    assert est.method == "estimated" and est.baseline_node_id is None
    assert est.breakdown["delta"] == sum(estimate_message(n.payload, CLAUDE) for n in nodes)
    assert est.breakdown["system"] > 0  # no baseline: the system prompt is always counted


def test_no_usage_total_is_its_parts_and_never_below_the_exact_count():  # E1 E4 P1
    # Real tool input and output, with no usable usage: the whole request is estimated.
    io = _fixture_tool_io()[:80]
    items = [user("find the papers")]
    for n in range(0, len(io), 2):
        items += [tool_call(f"t{n}", args={"q": io[n][:200]}), tool_result(f"t{n}", io[n + 1])]
    items.append(assistant("done", usage=Usage()))
    nodes = chain(items)
    draft = text_message("user", "and now the next question " * 20)
    est = estimate_request(project(branch_of(nodes)), GPT, system="Be brief.", pending=[draft])
    assert est.method == "estimated"
    assert est.tokens == sum(est.breakdown.values())
    exact_total = exact("Be brief.") + sum(
        exact(p.text) if isinstance(p, TextPart) else
        exact(json.dumps(p.input)) if isinstance(p, ToolCallPart) else exact(p.output)
        for m in [*(n.payload for n in nodes), draft] for p in m.parts)
    assert est.tokens >= exact_total  # halving the total would fall below the real count
    assert est.tokens <= 3 * exact_total


def test_e1_usage_from_before_the_checkpoint_is_never_a_baseline():
    nodes = chain([
        user("q1"), assistant("a1", usage=usage(900)),
        user("q2"), assistant("a2", usage=usage(2_000)),  # kept raw, but before C
        Checkpoint(summary="summary of q1", first_kept_id="n2", tokens_before=2_000),
        user("q3"),
    ])
    projection = project(branch_of(nodes))
    assert projection.after_checkpoint == 2
    est = estimate_request(projection, CLAUDE)
    assert est.method == "estimated"
    assert est.breakdown["delta"] == (
        MESSAGE_OVERHEAD + estimate_text(checkpoint_text(nodes[4].payload), "claude")
        + sum(estimate_message(n.payload, CLAUDE) for n in (nodes[2], nodes[3], nodes[5])))
    # After the checkpoint, a new reply's usage is a baseline again.
    more = nodes + chain([assistant("a3", usage=usage(700))], prefix="m", parent="n5")
    assert estimate_request(project(branch_of(more)), CLAUDE).baseline_node_id == "m0"


def test_e1_a_model_switch_to_another_family_invalidates_the_baseline():
    nodes = chain([user("q"), assistant("a", usage=usage(1_000, model="gpt-5.1-codex")),
                   user("q2")])
    projection = project(branch_of(nodes))
    assert estimate_request(projection, CLAUDE).method == "estimated"
    assert estimate_request(projection, GPT).method == "usage+delta"
    same_family = chain([user("q"), assistant("a", usage=usage(1_000),
                                              model="claude-haiku-4-5")])
    assert estimate_request(project(branch_of(same_family)), CLAUDE).method == "usage+delta"


def test_e2_system_and_tools_only_when_changed_and_pending_drafts_always():
    projection = project(branch_of(_session()))
    tools = [{"name": "search", "description": "Search the library",
              "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    draft = text_message("user", "a new question")
    same = estimate_request(projection, CLAUDE, system="You are helpful.", tools=tools,
                            pending=[draft])
    assert same.breakdown["system"] == same.breakdown["tools"] == 0
    assert same.breakdown["pending"] == estimate_message(draft, CLAUDE)
    changed = estimate_request(projection, CLAUDE, system="You are helpful.", tools=tools,
                               pending=[draft], system_changed=True)
    assert changed.breakdown["system"] > 0 and changed.breakdown["tools"] > 300
    assert changed.tokens == same.tokens + changed.breakdown["system"] + changed.breakdown["tools"]


def test_e2_a_check_touches_only_the_messages_after_the_baseline():
    nodes = chain([user("old " + "y" * 5000)] + [assistant(f"a{i}", usage=usage(1_000 + i))
                                                for i in range(50)] + [user("new")])
    seen: list[str] = []

    def spy(text: str) -> int:
        seen.append(text)
        return len(text)

    estimate_request(project(branch_of(nodes)), GPT, counter=spy)
    assert seen == ["new"]


def test_e5_exact_counter_is_offline_and_scaled_across_families():
    assert O200K("hello world") == 2
    assert CL100K("hello world") == 2
    assert O200K.family == "gpt"
    with pytest.raises(ValueError, match="o200k_base"):
        exact_counter("p50k_base")
    msg = text_message("user", "The context window is full. " * 20)
    as_gpt = estimate_message(msg, GPT, counter=O200K)
    assert as_gpt == MESSAGE_OVERHEAD + O200K(msg.text)
    as_claude = estimate_message(msg, CLAUDE, counter=O200K)
    factor = CROSS_FAMILY_FACTORS[("gpt", "claude")]
    assert as_claude == MESSAGE_OVERHEAD + -(-O200K(msg.text) * factor // 1)
    # A plain callable is taken as the model's own exact tokenizer.
    assert estimate_message(msg, CLAUDE, counter=len) == MESSAGE_OVERHEAD + len(msg.text)


# --------------------------------------------------------------------------- calibration


def test_calibration_starts_neutral_and_learns_a_high_quantile():
    cal = Calibration(min_samples=4, quantile=0.75)
    assert cal.factor("m") == 1.0
    cal = cal.observe("m", 100, 130)
    assert cal.factor("m") == pytest.approx(1.3)  # too few: the largest ratio seen
    for real in (105, 110, 120, 190):
        cal = cal.observe("M", 100, real)  # model names are case-insensitive
    # ratios 1.05 1.1 1.2 1.3 1.9: the 75% nearest rank is 1.3, not the mean
    assert cal.factor("m") == pytest.approx(1.3)
    assert cal.apply("m", 1000) == 1300


def test_calibration_never_lowers_below_the_floor_and_is_capped():
    cal = Calibration(min_samples=1)
    for _ in range(10):
        cal = cal.observe("m", 1000, 500)
    assert cal.factor("m") == 1.0  # evidence of over-counting does not lower by default
    lowering = Calibration(min_samples=1, floor=0.6)
    for real in (500, 700, 800):
        lowering = lowering.observe("m", 1000, real)
    assert lowering.factor("m") == pytest.approx(0.8)  # down to what still covers the evidence
    capped = Calibration(ceiling=2.0).observe("m", 100, 1000)
    assert capped.factor("m") == 2.0


def test_calibration_ignores_tiny_samples_and_is_immutable():
    cal = Calibration()
    assert cal.observe("m", 10, 50) is cal  # below min_tokens: too noisy
    new = cal.observe("m", 100, 120)
    assert new is not cal and cal.factor("m") == 1.0 and new.factor("m") == pytest.approx(1.2)
    with pytest.raises(ValueError):
        Calibration(floor=2.0, ceiling=1.0)


def test_calibration_scales_the_estimated_part_never_the_baseline():
    projection = project(branch_of(_session()))
    plain = estimate_request(projection, CLAUDE)
    cal = Calibration(min_samples=1).observe(CLAUDE.model, 100, 150)
    scaled = estimate_request(projection, CLAUDE, calibration=cal)
    assert scaled.breakdown["baseline"] == plain.breakdown["baseline"]
    assert scaled.breakdown["delta"] == -(-plain.breakdown["delta"] * 3 // 2)


# --------------------------------------------------------------------------- accuracy


def test_usage_accuracy_on_recorded_usage():
    msgs = [m.payload for m in _session()]
    report = usage_accuracy(msgs, CLAUDE)
    assert report is not None and report["intervals"] == 1
    assert set(report) >= {"intervals", "under_count_rate", "median_ratio"}
    assert usage_accuracy([user("q").model_copy()], CLAUDE) is None
