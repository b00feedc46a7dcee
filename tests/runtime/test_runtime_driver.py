"""The session lifecycle written once (`runtime/driver.py`, issue 39): the sizer a session
keeps, and its background automatic compaction. The faces' own tests show the shapes use
it (the mirror, the Agents SDK session, replay, `Conversation`); here, its rules alone,
with event-gated fakes (no sleeps)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.runtime.compaction import CompactionOutcome
from contextfold.runtime.driver import BackgroundAuto, session_sizer, summarizer_budget
from contextfold.runtime.summarizers import guarded
from contextfold.store import SessionBusyError


class _Summarizer:
    """A summariser object (what `guarded` accepts): its attributes are what is read."""

    def __init__(self, **attributes: object) -> None:
        self.__dict__.update(attributes)

    async def summarize(self, plan: object) -> tuple[str, str]:
        return "summary", "fake"


CAPACITY = ModelCapacity(model="m", context_window=32_000, max_output=4_000, family="gpt")
TOOLS = ({"name": "look", "description": "look it up", "input_schema": {"type": "object"}},)


def test_a_session_keeps_its_sizer_while_model_prompt_and_tools_stay() -> None:
    first = session_sizer(CAPACITY, system="be brief", tools=TOOLS)
    assert first.budget == derive_budget(CAPACITY)
    assert session_sizer(CAPACITY, system="be brief", tools=list(TOOLS), held=first) is first
    for changed in (dict(system="be long"), dict(tools=()),
                    dict(capacity=CAPACITY.model_copy(update={"context_window": 16_000}))):
        args = {"capacity": CAPACITY, "system": "be brief", "tools": TOOLS, **changed}
        other = session_sizer(args.pop("capacity"), held=first, **args)
        assert other is not first and other.capacity.context_window in (32_000, 16_000)


def test_a_given_budget_is_used_and_a_different_one_makes_a_new_sizer() -> None:
    settings = CompactionSettings(auto_threshold_fraction=0.5)
    derived = session_sizer(CAPACITY, settings=settings)
    assert derived.budget == derive_budget(CAPACITY, settings)
    assert derived.budget != derive_budget(CAPACITY)
    smaller = derived.budget.model_copy(update={"safe_input_limit": 1_000})
    given = session_sizer(CAPACITY, budget=smaller, held=derived)
    assert given is not derived and given.budget == smaller
    assert session_sizer(CAPACITY, budget=smaller, held=given) is given


def test_the_summariser_prices_the_cost_triggers_compactions() -> None:
    """SPEC Q2: the offline summary is free; Q3: one that starts with the session's prefix
    reads it from the cache; without a summariser given, neither is assumed."""
    offline = session_sizer(CAPACITY, summarize=guarded(None))
    assert (offline.summary_free, offline.summary_reads_cache) == (True, False)
    prefix = session_sizer(CAPACITY, summarize=guarded(_Summarizer(session_prefix=True)))
    assert (prefix.summary_free, prefix.summary_reads_cache) == (False, True)
    plain = session_sizer(CAPACITY)
    assert (plain.summary_free, plain.summary_reads_cache) == (False, False)


def test_a_summarisers_own_model_has_its_own_budget() -> None:
    small = CAPACITY.model_copy(update={"model": "s", "context_window": 8_000})
    assert summarizer_budget(guarded(_Summarizer(capacity=small)), None) == \
        derive_budget(small)
    assert summarizer_budget(guarded(None), None) is None


class _Fit:
    """A session whose automatic check waits for `go`, then does `then`."""

    def __init__(self, go: asyncio.Event, then: object) -> None:
        self.go, self.then, self.calls = go, then, 0

    async def auto(self) -> CompactionOutcome | None:
        self.calls += 1
        await self.go.wait()
        if isinstance(self.then, BaseException):
            raise self.then
        return self.then  # type: ignore[return-value]


@pytest.mark.asyncio
async def test_one_check_at_a_time_and_the_next_request_settles_it() -> None:
    go = asyncio.Event()
    done = CompactionOutcome(status="compacted", checkpoint_id="c1")
    fit, seen = _Fit(go, done), []

    async def make() -> _Fit:
        return fit

    auto = BackgroundAuto()
    task = auto.start("s1", make, on_outcome=seen.append)  # type: ignore[arg-type]
    assert auto.start("s1", make) is task  # not settled: no second check
    await asyncio.sleep(0)
    assert auto.running and fit.calls == 1 and seen == []
    go.set()
    assert await auto.settle() is done and seen == [done]
    assert not auto.running and await auto.settle() is None


@pytest.mark.asyncio
async def test_replace_starts_the_latest_replys_check() -> None:
    first_go, second_go = asyncio.Event(), asyncio.Event()
    first = _Fit(first_go, None)
    second = _Fit(second_go, CompactionOutcome(status="noop", reason="under"))
    auto = BackgroundAuto()

    async def make_first() -> _Fit:
        return first

    async def make_second() -> _Fit:
        return second

    old = auto.start("s1", make_first)  # type: ignore[arg-type]
    new = auto.start("s1", make_second, replace=True)  # type: ignore[arg-type]
    assert new is not old
    first_go.set()
    second_go.set()
    assert (await auto.settle()).status == "noop"  # type: ignore[union-attr]
    assert await old is None  # the earlier one ran on, unawaited, and ended quietly


@pytest.mark.asyncio
@pytest.mark.parametrize("error,level", [
    (SessionBusyError("s1", "another process", 10.0), logging.INFO),
    (RuntimeError("the summariser broke"), logging.ERROR)])
async def test_a_failed_check_never_breaks_the_next_request(error: Exception, level: int,
                                                            caplog) -> None:
    caplog.set_level(logging.INFO, logger="contextfold.driver")
    go = asyncio.Event()
    go.set()
    fit = _Fit(go, error)

    async def make() -> _Fit:
        return fit

    auto = BackgroundAuto()
    auto.start("s1", make)  # type: ignore[arg-type]
    assert await auto.settle() is None
    lines = [r for r in caplog.records if "auto compaction of session s1" in r.getMessage()]
    assert [r.levelno for r in lines] == [level]


@pytest.mark.asyncio
async def test_a_session_that_cannot_be_read_is_a_failed_check_too(caplog) -> None:
    async def make() -> _Fit:
        raise OSError("the database went away")

    auto = BackgroundAuto()
    auto.start("s2", make)
    assert await auto.settle() is None
    assert any(r.levelno == logging.ERROR and "s2" in r.getMessage() for r in caplog.records)


def test_the_mirror_and_the_driver_are_one_idea_per_module() -> None:
    """The mirror was 786 lines holding five ideas (issue 39): each of its modules and the
    driver stay within ~450 lines, each saying its one idea in its docstring (the package's
    size check, `tests/test_module_sizes.py`, here without its `Size:` escape)."""
    from pathlib import Path

    import contextfold.runtime as runtime
    from tests.test_module_sizes import size_problems

    here = Path(runtime.__file__).parent
    modules = [*sorted(here.glob("mirror*.py")), here / "driver.py"]
    assert len(modules) >= 6
    assert size_problems(modules, reasons=False) == []


@pytest.mark.parametrize("summarizer, free, reads", [
    (None, True, False), (_Summarizer(session_prefix=True), False, True),
    (_Summarizer(), False, False)])
async def test_every_shape_prices_compactions_by_its_own_summariser(
        tmp_path, summarizer: object, free: bool, reads: bool) -> None:
    """One sizing policy: the mirror (the proxy's shape) and the Agents SDK session price a
    compaction by their summariser as `Conversation` does (SPEC Q2, Q3); before, the first
    two priced every compaction as uncached input, so the cost trigger of a proxied session
    decided otherwise than the same session's in the chat."""
    from contextfold.integrations.openai_agents import ContextfoldSession
    from contextfold.runtime.mirror import Mirror
    from contextfold.store import open_store

    async with await open_store(f"sqlite:///{tmp_path / 'shapes.db'}") as store:
        mirror = Mirror(store, summarizer=summarizer, background=False)
        mirrored = mirror._sessions.sizer("s", CAPACITY, None, None)
        session_id = (await store.create_session()).id
        agents = ContextfoldSession(store, session_id, capacity=CAPACITY, summarizer=summarizer)
        handed = agents._current_sizer(CAPACITY)
        for sizer in (mirrored, handed):
            assert (sizer.summary_free, sizer.summary_reads_cache) == (free, reads)
