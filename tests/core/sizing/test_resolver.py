"""The one model resolver (SPEC B1-B4): which model a face sizes for, and its capacity.

Every face asks `ModelResolver`; these tests pin its one rule: the order of precedence, the
overrides file, caps and window maps, limits learned from the provider, the framework
model's profile, the built-in offline models, the smallest usable window, and which model a
branch recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.models.catalog import UnknownModelError, capacity_for
from contextfold.core.sizing.resolver import (
    BUILTIN_DEFAULT_MODEL,
    MESSAGE_ROOM,
    OFFLINE_WINDOW,
    InvalidWindowError,
    ModelProfile,
    ModelResolver,
    WindowTooSmallError,
    check_window,
    given_capacity,
    recorded_model,
    smallest_window,
    user_catalog,
)
from contextfold.core.values.messages import Checkpoint
from contextfold.core.values.tree import Branch, DamagedBranch
from contextfold.runtime.sizing import smallest_held_checkpoint
from contextfold.summarize.extractive import smallest_summary_tokens
from tests.builders import assistant, chain, user

NO_ENV: dict[str, str] = {}  # no $CONTEXTFOLD_MODEL, no $CONTEXTFOLD_MODELS
GUARANTEED = smallest_summary_tokens(guaranteed=True)
AT_ALL = smallest_summary_tokens(guaranteed=False)


def resolver(**options) -> ModelResolver:
    return ModelResolver(environ=options.pop("environ", NO_ENV), **options)


# --------------------------------------------------------------------------- precedence


def test_explicit_then_recorded_then_configured_then_environment_then_built_in():  # B4
    env = {"CONTEXTFOLD_MODEL": "gpt-4o"}
    full = resolver(default_model="claude-haiku-4-5", environ=env)
    assert (full.resolve("gpt-4o-mini", recorded="claude-sonnet-4-5").name,
            full.resolve("gpt-4o-mini").source) == ("gpt-4o-mini", "explicit")
    picked = full.resolve(recorded="claude-sonnet-4-5")
    assert (picked.name, picked.source, picked.provider) == (
        "claude-sonnet-4-5", "recorded", "anthropic")
    assert picked.capacity == capacity_for("claude-sonnet-4-5")
    assert (full.resolve().name, full.resolve().source) == ("claude-haiku-4-5", "configured")
    from_env = resolver(environ=env).resolve()
    assert (from_env.name, from_env.source) == ("gpt-4o", "environment")
    built_in = resolver().resolve()
    assert (built_in.name, built_in.source) == (BUILTIN_DEFAULT_MODEL, "default")


def test_a_recorded_model_the_catalog_lacks_gives_way_to_the_default():  # B4
    # Nobody asked for it: the session is sized for the default rather than failing.
    picked = resolver(default_model="gpt-4o").resolve(recorded="someones-private-model")
    assert (picked.name, picked.source) == ("gpt-4o", "configured")


def test_an_unknown_explicit_model_is_one_error_each_face_words():  # B4
    with pytest.raises(UnknownModelError) as info:
        resolver().resolve("my-local-model")
    error = info.value
    assert error.model == "my-local-model" and isinstance(error, LookupError)
    worded = error.explain("--context-window N")
    assert "unknown model 'my-local-model'" in worded and worded.endswith(
        "Give its window: --context-window N.")
    with pytest.raises(UnknownModelError) as typo:
        resolver().resolve("claude-sonet-4-5")
    assert "claude-sonnet-4-5" in typo.value.close_names


@pytest.mark.parametrize("bad", [0, -5])
def test_a_window_that_is_not_positive_is_refused_naming_the_option(bad):  # B1
    with pytest.raises(InvalidWindowError) as info:
        resolver().resolve("gpt-4o", context_window=bad)
    assert info.value.explain("--context-window") == \
        f"--context-window must be a positive number of tokens, not {bad}"


# --------------------------------------------------------------------------- windows


def test_overrides_file_applies_to_every_resolution(tmp_path: Path):  # B4
    file = tmp_path / "models.toml"
    file.write_text('[models."my-local-model"]\ncontext_window = 12000\n\n'
                    '[models."claude-sonnet-4-5"]\ncontext_window = 1000000\n')
    env = {"CONTEXTFOLD_MODELS": str(file)}
    local = resolver(environ=env).resolve("my-local-model")
    assert (local.capacity.context_window, local.capacity.max_output) == (12_000, 3_000)
    assert resolver(environ=env).resolve(recorded="claude-sonnet-4-5").context_window == \
        1_000_000
    # An edited file is read again (a running service or proxy picks it up).
    file.write_text('[models."my-local-model"]\ncontext_window = 20000\n')
    assert resolver(environ=env).resolve("my-local-model").context_window == 20_000
    assert user_catalog(env) is user_catalog(env)  # read once per version of the file


def test_explicit_window_then_per_model_map_then_every_model():  # B4 Y2
    faces = resolver(windows={"local-model": 32_768, "*": 16_000})
    assert faces.resolve("local-model").context_window == 32_768
    assert faces.resolve("gpt-4o").context_window == 16_000  # `*` wins over the catalog
    assert faces.resolve("gpt-4o", context_window=9000).context_window == 9000
    assert resolver().resolve("gpt-4o").context_window == capacity_for("gpt-4o").context_window


def test_a_cap_lowers_every_model_and_is_the_window_of_an_unknown_one():  # B4 P2
    capped = resolver(cap=20_000)
    known = capped.resolve("claude-sonnet-4-5")
    assert known.context_window == 20_000 and known.limits == ("cap",)
    assert known.capacity.max_output == 64_000  # the catalog's own, only the window is capped
    unknown = capped.resolve("my-local-model")
    assert (unknown.context_window, unknown.limits) == (20_000, ())
    # An explicit window (`/model NAME WINDOW`) is the user's: the cap does not apply.
    assert capped.resolve("claude-sonnet-4-5", context_window=50_000).context_window == 50_000


def test_a_learned_limit_lowers_even_an_explicit_window():  # P4
    got = resolver(cap=100_000).resolve("my-local-model", context_window=64_000,
                                         learned=30_000)
    assert (got.context_window, got.limits) == (30_000, ("learned",))
    # The derived max output follows the lowered window (one rule with the catalog's).
    assert got.capacity.max_output == 7_500
    assert resolver().resolve("gpt-4o", learned=200_000).limits == ()  # no lower: ignored


def test_a_framework_profile_sizes_the_model_it_describes():  # B4
    profile = ModelProfile.of(type("Chat", (), {"profile": {"max_input_tokens": 8192}})())
    got = resolver().resolve("some-hosted-model", profile=profile)
    assert (got.context_window, got.capacity.max_output) == (8192, 2048)
    known = resolver().resolve("gpt-4o", profile=ModelProfile(16_000, 1000))
    assert (known.context_window, known.capacity.max_output, known.capacity.family) == (
        16_000, 1000, "gpt")
    assert ModelProfile.of(object()) is None
    assert ModelProfile.of(type("Chat", (), {"profile": {"max_input_tokens": 0}})()) is None


def test_given_capacities_win_by_name_then_the_given_one():  # B4
    small = ModelCapacity(model="small", context_window=8000, max_output=1000)
    default = ModelCapacity(model="big", context_window=64_000, max_output=4000)
    assert given_capacity("small", {"small": small}, default) is small
    assert given_capacity("gpt-4o", {"small": small}, default) is default
    assert given_capacity(None, {"small": small}, default) is default


# --------------------------------------------------------------------------- offline models


def test_offline_models_have_one_capacity_on_every_face():  # B1 B4
    echo = resolver().resolve("offline/echo")
    assert (echo.context_window, echo.capacity.max_output) == (OFFLINE_WINDOW, 2048)
    assert echo.budget.safe_input_limit == 6144 == derive_budget(echo.capacity).safe_input_limit
    assert echo.provider == "offline"
    # Never matched loosely to some provider's row by its last part ("small", "echo").
    small = resolver().resolve("offline/small", context_window=3000)
    assert (small.provider, small.capacity.max_output, small.capacity.family) == (
        "offline", 750, "other")


def test_an_override_can_size_an_offline_model(tmp_path: Path):  # B4
    file = tmp_path / "models.json"
    file.write_text('{"models": {"offline/echo": {"context_window": 32768}}}')
    got = resolver(environ={"CONTEXTFOLD_MODELS": str(file)}).resolve()
    assert (got.name, got.context_window) == ("offline/echo", 32_768)


# --------------------------------------------------------------------------- smallest window


@pytest.mark.parametrize("name", ["claude-opus-4-6", "offline/echo", "my-local-model"])
@pytest.mark.parametrize("need", [GUARANTEED, AT_ALL])
def test_the_smallest_window_works_and_one_less_does_not(name, need):  # B1-B3
    got = resolver().resolve(name, context_window=1000)
    smallest = smallest_window(got, need)
    assert smallest is not None
    at = resolver().resolve(name, context_window=smallest)
    check_window(at, need)
    budget = at.budget
    assert budget.summary_budget - budget.ledger_budget >= need and budget.tail_budget > 0
    with pytest.raises(WindowTooSmallError) as info:
        check_window(resolver().resolve(name, context_window=smallest - 1), need)
    assert info.value.smallest == smallest
    assert f"the smallest window that works is {smallest:,} tokens" in \
        info.value.explain("--context-window")


@pytest.mark.parametrize("fixed", [0, 500, 3000])
def test_a_live_window_leaves_an_ordinary_message_room_after_the_deepest_compaction(fixed):
    """B1-B3: given what every request carries (`fixed`: the recall tools) and the smallest
    checkpoint the sizing holds a request to, the smallest window leaves `MESSAGE_ROOM`
    beside both; one token less does not, and the window grows with `fixed`."""
    got = resolver().resolve("offline/echo", context_window=1000)
    checkpoint = smallest_held_checkpoint()
    smallest = smallest_window(got, AT_ALL, fixed=fixed, checkpoint=checkpoint)
    assert smallest is not None and smallest >= smallest_window(got, AT_ALL)
    at = resolver().resolve("offline/echo", context_window=smallest)
    assert at.budget.safe_input_limit - fixed - checkpoint >= MESSAGE_ROOM
    check_window(at, AT_ALL, fixed=fixed, checkpoint=checkpoint)
    with pytest.raises(WindowTooSmallError):
        check_window(resolver().resolve("offline/echo", context_window=smallest - 1), AT_ALL,
                     fixed=fixed, checkpoint=checkpoint)
    if fixed:
        assert smallest > smallest_window(got, AT_ALL, fixed=0, checkpoint=checkpoint)


def test_a_derived_max_output_shrinks_with_the_window_it_is_derived_from():  # B1
    # At 1,024 tokens a model the catalog lacks gets 256 of max output; a larger window
    # gets more, so a window that works exists (the old check held 256 fixed: "no window").
    tiny = resolver().resolve("offline/echo", context_window=1024)
    assert tiny.derived_output and smallest_window(tiny, AT_ALL) is not None
    fixed = resolver().resolve("my-local-model", context_window=1024, max_output=256)
    assert not fixed.derived_output and smallest_window(fixed, GUARANTEED) is None
    with pytest.raises(WindowTooSmallError) as info:
        check_window(fixed, GUARANTEED)
    assert "give a larger --max-output" in info.value.explain("--context-window",
                                                               "--max-output")


# --------------------------------------------------------------------------- recorded model


def test_recorded_model_is_the_latest_replys_or_the_newer_checkpoints():  # B4
    replies = chain([user("a"), assistant("b", model="gpt-4o"), user("c"),
                     assistant("d", model="claude-sonnet-4-5")])
    assert recorded_model(Branch(nodes=tuple(replies))) == "claude-sonnet-4-5"
    # After a compaction the branch may hold no reply yet: the checkpoint says the model.
    checkpoint = Checkpoint(summary="s", first_kept_id="n2", tokens_before=10,
                            model="claude-opus-4-6")
    compacted = chain([user("a"), assistant("b", model="gpt-4o"), user("c"), checkpoint])
    assert recorded_model(Branch(nodes=tuple(compacted))) == "claude-opus-4-6"
    after = chain([user("a"), checkpoint, user("c"), assistant("d", model="gpt-4o-mini")])
    assert recorded_model(Branch(nodes=tuple(after))) == "gpt-4o-mini"
    # A damaged branch answers from what can be read; bare messages work too (replay).
    assert recorded_model(DamagedBranch(readable=tuple(replies[:2]))) == "gpt-4o"
    assert recorded_model([n.message for n in replies[:2]]) == "gpt-4o"
    assert recorded_model(chain([user("only a question")])) is None


def test_replay_and_the_cli_read_the_recorded_model_by_one_rule():  # B4
    from contextfold.replay import recorded_session

    checkpoint = Checkpoint(summary="s", first_kept_id="n2", tokens_before=10,
                            model="claude-opus-4-6")
    nodes = chain([user("a"), assistant("b", model="gpt-4o"), user("c"), checkpoint,
                   user("d")])
    session = recorded_session(nodes, nodes[-1].id)
    # The checkpoint is newer than the reply: the model it was fitted to (replay used to
    # read replies only and said gpt-4o).
    assert session.model == recorded_model(Branch(nodes=tuple(nodes))) == "claude-opus-4-6"
