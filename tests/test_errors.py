"""One error vocabulary (`contextfold.errors`): every error the library raises on purpose has a
kind and keeps its old Python bases, and each face answers by kind, never by class: the
command line's exit codes, the service's statuses and types, the proxy's protocol errors
(tests/proxy/test_proxy_errors.py over real HTTP). A request too large is worded by each face
from its numbers (SPEC P3)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

import contextfold
from contextfold.cli.app import EXIT_CODES, BadInput, cli_message, exit_code
from contextfold.core.models.budget import ModelCapacity
from contextfold.core.models.catalog import CatalogConfigError, UnknownModelError
from contextfold.core.recall.recall_text import EmptyQueryError
from contextfold.core.sizing.resolver import WindowTooSmallError
from contextfold.core.values.messages import text_message
from contextfold.core.view.pins import PinRefusedError
from contextfold.errors import DEFAULT_CODES, HTTP_STATUSES, KINDS, ContextfoldError, kind_of
from contextfold.formats import ImportFormatError
from contextfold.providers.endpoints import EndpointRefusedError
from contextfold.providers.errors import ContextOverflowError, ProviderError, RateLimitError
from contextfold.providers.factory import MissingExtraError, UnknownProviderError
from contextfold.proxy.errors import error_type, refusal
from contextfold.runtime import BusyError, CompactionFailedError, DraftTooLargeError
from contextfold.runtime.errors import RequestTooLargeError, SendAbortedError, ToolWorkflowError
from contextfold.runtime.recall import RecallInputError
from contextfold.server.errors import as_api_error
from contextfold.server.run import ServeError
from contextfold.store import (
    ConfigurationError,
    DuplicateNodeError,
    InvalidOperationError,
    InvalidPayloadError,
    NodeNotFoundError,
    ReadOnlySessionError,
    SessionBusyError,
    SessionNotFoundError,
    StaleBranchError,
)
from contextfold.store.sql.tenancy import TokenNotFoundError
from contextfold.summarize.extractive_fit import SummaryBudgetTooSmall
from contextfold.summarize.validate import SummaryInvalid
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

PACKAGE = Path(contextfold.__file__).parent
FIXTURES = Path(__file__).parent / "fixtures"

# Exceptions of the library that are not errors a caller sees, each with why.
NOT_IN_THE_VOCABULARY = {
    "contextfold.store.snapshot.SnapshotUnusable":
        "control flow: the full store runs the reads",
    "contextfold.store.sql.engine.LeafConflict": "control flow: the write is retried",
    "contextfold.store.sql.memo.StaleMemo": "control flow: the write runs again, reading all",
    "contextfold.guard.body.BodyTooLarge": "control flow of the body limit (answered 413)",
    "contextfold.guard.body.BodyCutShort": "control flow: a body cut short is answered 400",
    "contextfold.formats.reader._Overflow": "control flow: a value over the limit is skipped "
    "and reported, not read",
    "contextfold.proxy.exchange.Refused": "an adapter's own answer (the protocol's not found)",
    "contextfold.guard.bearer.TokenRefused": "the auth guard's own answer (401 or 429, chosen)",
    "contextfold.summarize.llm._ChunkFailed": "control flow: the chunk falls back offline",
    "contextfold.summarize.retention._FloorBreached": "control flow: a re-add that would "
    "take another kind's floor (S9) is not made",
    "contextfold.server.errors.ApiError": "the service's own answer: status and type chosen",
    "contextfold._sync.WouldWait": "control flow: the caller runs the coroutine under asyncio",
    "contextfold.proxy.body_prefix.Unsplit": "control flow: the body is decoded in full",
    "contextfold.wire.usage.Unusable": "control flow: a usage report with a bad field is none",
    "contextfold.wire.reply.MalformedReply": "translated: the SDK adapters raise "
    "MalformedResponseError (provider), the proxy records no reply",
    "contextfold.user_config.OverridesFileError": "translated: core.catalog raises it as "
    "CatalogConfigError (bad_input), the same message",
}


def exception_classes() -> list[type[BaseException]]:
    """Every exception class defined in contextfold's source (read with ast, then imported)."""
    found: list[type[BaseException]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.bases]
        if not names:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__"
                                                  else parts))
        for name in names:
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException) and \
                    cls.__module__ == module.__name__:
                found.append(cls)
    return found


def test_every_error_class_of_the_library_has_a_kind() -> None:
    classes = exception_classes()
    assert len(classes) > 40  # the scan sees the whole package
    outside = [f"{c.__module__}.{c.__qualname__}" for c in classes
               if not issubclass(c, ContextfoldError)]
    assert sorted(outside) == sorted(NOT_IN_THE_VOCABULARY)
    for cls in classes:
        if issubclass(cls, ContextfoldError):
            assert cls.kind in KINDS and cls.code, cls


def test_a_kind_outside_the_set_is_refused_and_a_kind_brings_its_code() -> None:
    with pytest.raises(TypeError, match="not one of"):
        type("Odd", (ContextfoldError,), {"kind": "weird"})
    plain = type("Plain", (ContextfoldError,), {"kind": "conflict"})
    assert plain.code == DEFAULT_CODES["conflict"] == "conflict"
    named = type("Named", (plain,), {"code": "moved"})
    assert named.kind == "conflict" and named.code == "moved"
    assert kind_of(RuntimeError("x")) == "internal" and kind_of(plain()) == "conflict"


@pytest.mark.parametrize(("cls", "base"), [
    (SessionNotFoundError, LookupError), (NodeNotFoundError, LookupError),
    (InvalidOperationError, ValueError), (InvalidPayloadError, ValueError),
    (UnknownModelError, LookupError), (CatalogConfigError, ValueError),
    (ImportFormatError, ValueError), (UnknownProviderError, ValueError),
    (MissingExtraError, ImportError), (SummaryBudgetTooSmall, ValueError),
    (PinRefusedError, ValueError), (EmptyQueryError, ValueError),
    (RecallInputError, ValueError), (ServeError, ValueError),
    (RequestTooLargeError, Exception),
])
def test_every_class_keeps_its_old_base(cls: type, base: type) -> None:
    # No caller's `except LookupError` / `except ValueError` changed meaning.
    assert issubclass(cls, base) and issubclass(cls, ContextfoldError)


def test_every_face_answers_every_kind() -> None:
    assert set(EXIT_CODES) == set(HTTP_STATUSES) == set(DEFAULT_CODES) == set(KINDS)
    assert set(EXIT_CODES.values()) == {1, 2, 3}
    for kind in KINDS:
        status = HTTP_STATUSES[kind]
        for protocol in ("openai", "anthropic"):
            assert error_type(protocol, status).endswith("_error")


DRAFT = text_message("user", "a very long paste")


def _too_small() -> WindowTooSmallError:
    capacity = ModelCapacity(model="m", context_window=1_000, max_output=250)
    return WindowTooSmallError(capacity, 6_000, 400, 120)


def _facts() -> dict[str, Any]:
    return dict(overflow_tokens=1_234, estimated_tokens=13_234, safe_input_limit=12_000,
                model="small-model")


def _validation_error() -> ValidationError:
    class Shape(BaseModel):
        n: int

    try:
        Shape(n="x")  # type: ignore[arg-type]
    except ValidationError as exc:
        return exc
    raise AssertionError("pydantic accepted a string for an int")


# (error, service status, service type, CLI exit code). Rows marked "was" changed with the
# vocabulary: a known condition no longer answers 500 (or exit 1 for the user's input).
TABLE: list[tuple[str, BaseException, int, str, int]] = [
    ("session not found", SessionNotFoundError("s1", "/data/secret.db"), 404, "not_found", 2),
    ("node not found", NodeNotFoundError("node 'n1' is not in this session's tree"), 404,
     "not_found", 2),
    ("token not found (was 500)", TokenNotFoundError("no token with id 't'"), 404,
     "not_found", 2),
    ("invalid operation", InvalidOperationError("nothing to retry"), 400, "bad_request", 2),
    ("invalid payload", InvalidPayloadError("role: bad"), 400, "bad_request", 2),
    ("duplicate node", DuplicateNodeError("already stored"), 400, "bad_request", 2),
    ("read-only", ReadOnlySessionError("s1"), 409, "read_only", 2),
    ("stale", StaleBranchError("s1", "a", "b"), 409, "stale", 1),
    ("busy elsewhere", SessionBusyError("s1", "host-7:4242", 12), 409, "compacting", 3),
    ("busy compacting", BusyError("retry"), 409, "compacting", 3),
    ("busy turn", BusyError("send", "another turn"), 409, "busy", 3),
    ("configuration (was 500)", ConfigurationError("cannot open the database"), 400,
     "bad_request", 2),
    ("draft too large", DraftTooLargeError(DRAFT, **_facts()), 413, "draft_too_large", 1),
    ("request too large", RequestTooLargeError(**_facts()), 413, "request_too_large", 1),
    ("send aborted", SendAbortedError(DRAFT, "cancelled"), 409, "send_aborted", 1),
    ("tool workflow (was exit 1)", ToolWorkflowError("no open calls"), 400, "bad_request", 2),
    ("compaction failed on a small budget (was 500, exit 1)",
     CompactionFailedError("budget", SummaryBudgetTooSmall("too small")), 400, "bad_request",
     2),
    ("compaction failed on a provider (was 500)",
     CompactionFailedError("down", RateLimitError("slow down", provider="openai")), 502,
     "provider_error", 1),
    ("compaction failed on a bug", CompactionFailedError("boom", RuntimeError("boom")), 500,
     "internal", 1),
    ("context overflow", ContextOverflowError("too long", provider="openai"), 502,
     "context_overflow", 1),
    ("provider", RateLimitError("slow down", provider="openai"), 502, "provider_error", 1),
    ("unknown model (was 500)", UnknownModelError("x"), 400, "unknown_model", 2),
    ("window too small (was 500)", _too_small(), 400, "bad_request", 2),
    ("endpoint refused", EndpointRefusedError("no key there", "keyed_provider"), 400,
     "keyed_provider", 2),
    ("unknown provider (was exit 1)", UnknownProviderError("which provider?"), 400,
     "unknown_model", 2),
    ("missing extra (was 500)", MissingExtraError("pip install 'contextfold[providers]'"),
     503, "unavailable", 1),
    ("catalog config (was exit 1)", CatalogConfigError("models.toml: bad"), 400,
     "bad_request", 2),
    ("import format", ImportFormatError("f.jsonl", "not a session"), 400, "bad_request", 2),
    ("summary budget", SummaryBudgetTooSmall("too small"), 400, "bad_request", 2),
    ("pin refused", PinRefusedError(100, 50, 120), 400, "bad_request", 2),
    ("empty query", EmptyQueryError("nothing to search"), 400, "bad_request", 2),
    ("recall input", RecallInputError("limit must be an integer"), 400, "bad_request", 2),
    ("serve option", ServeError("--workers must be at least 1"), 400, "bad_request", 2),
    ("CLI bad input", BadInput("--format must be openai"), 400, "bad_request", 2),
    ("invalid summary", SummaryInvalid(["empty"]), 500, "internal", 1),
    ("a foreign ValueError", ValueError("bad"), 400, "bad_request", 1),
    ("a foreign validation error", _validation_error(), 400, "bad_request", 2),
    ("a missing file", FileNotFoundError("no such file"), 500, "internal", 2),
    ("a pool timeout", PoolTimeoutError("pool"), 503, "overloaded", 1),
    ("a bug", RuntimeError("boom"), 500, "internal", 1),
]


@pytest.mark.parametrize(("error", "status", "type_"),
                         [pytest.param(e, s, t, id=i) for i, e, s, t, _ in TABLE])
def test_the_service_answers_by_kind(error: BaseException, status: int, type_: str) -> None:
    answer = as_api_error(error)
    assert (answer.status, answer.type) == (status, type_)
    if status == 500:
        assert answer.message == "internal error (see the server log)"


@pytest.mark.parametrize(("error", "code"),
                         [pytest.param(e, c, id=i) for i, e, _, _, c in TABLE])
def test_the_command_line_exits_by_kind(error: BaseException, code: int) -> None:
    # 0 success, 2 the user's input, 3 busy, 1 anything else (README).
    assert exit_code(error) == code


def test_the_service_never_says_what_only_this_machine_may_see() -> None:  # W1
    gone = as_api_error(SessionNotFoundError("s1", "/data/secret.db")).body()
    assert gone == {"error": "no such session", "type": "not_found"}
    busy = as_api_error(SessionBusyError("s1", "host-7:4242", 12)).body()
    assert "host-7" not in json.dumps(busy) and busy["reason"] == "compacting on another worker"
    assert as_api_error(BusyError("retry")).body()["reason"].startswith("cannot retry")
    aborted = as_api_error(SendAbortedError(DRAFT, "failed", "the summariser is down")).body()
    assert aborted["reason"] == "failed" and aborted["draft"] == "a very long paste"
    failed = as_api_error(RateLimitError("slow down", provider="openai")).body()
    assert failed["error"] == "the model provider failed: slow down"


def test_each_face_words_a_request_too_large_from_its_numbers() -> None:  # P3
    # The runtime's sentence does not matter: each face says it in its own terms.
    draft = DraftTooLargeError(DRAFT, **_facts())
    worded = RequestTooLargeError("whatever the runtime said", **_facts())
    body = as_api_error(draft).body()
    assert {k: body[k] for k in ("overflow_tokens", "estimated_tokens", "safe_input_limit")} == {
        "overflow_tokens": 1_234, "estimated_tokens": 13_234, "safe_input_limit": 12_000}
    assert "13234" in body["error"] and "1234 tokens" in body["error"]
    assert "nothing was sent or saved" in body["error"] and "small-model" in body["error"]
    assert "whatever" not in as_api_error(worded).body()["error"]
    cli = cli_message(draft)
    assert "13,234" in cli and "12,000" in cli and "1,234 tokens" in cli and "--model" in cli
    assert "whatever" not in cli_message(worded) and "the input" in cli_message(worded)
    for protocol, needle in (("openai", "context_length_exceeded"),
                             ("anthropic", "prompt is too long: 13234 tokens > 12000")):
        status, answer = refusal(protocol, worded)
        assert status == 400 and needle in json.dumps(answer)  # Y3
    # The library's own sentence, when the runtime gives none, is made of the numbers too.
    assert "13234" in str(RequestTooLargeError(**_facts()))


@pytest.mark.parametrize(("error", "status", "openai_type", "anthropic_type"), [
    (SessionNotFoundError("s1", "/data/secret.db"), 404, "invalid_request_error",
     "not_found_error"),
    (ReadOnlySessionError("s1"), 409, "invalid_request_error", "invalid_request_error"),
    (RateLimitError("slow", provider="x"), 502, "server_error", "api_error"),
    (MissingExtraError("pip install"), 503, "server_error", "overloaded_error"),
    (CompactionFailedError("boom", RuntimeError("boom")), 500, "server_error", "api_error"),
    (ValueError("not JSON"), 400, "invalid_request_error", "invalid_request_error"),
])
def test_the_proxy_answers_by_kind_in_each_protocols_shape(error: Any, status: int,
                                                           openai_type: str,
                                                           anthropic_type: str) -> None:
    got, body = refusal("openai", error)
    assert got == status and body["error"]["type"] == openai_type
    got, body = refusal("anthropic", error)
    assert got == status and body["type"] == "error"
    assert body["error"]["type"] == anthropic_type
    assert "/data/secret.db" not in body["error"]["message"]
    if status == 500:
        assert "boom" not in body["error"]["message"]  # a bug's detail is for the log


def test_provider_errors_are_one_kind() -> None:
    assert all(issubclass(c, ProviderError) for c in (ContextOverflowError, RateLimitError))
    assert ProviderError("x", provider="p").kind == "provider"


def _cli(*args: str, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "contextfold", *args, "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_broken_models_file_is_the_users_input_exit_2(tmp_path: Path) -> None:  # B4
    # Was exit 1 ("anything else"): the file the user named is theirs to fix.
    env = {**os.environ, "CONTEXTFOLD_DB": str(tmp_path / "cf.db"),
           "CONTEXTFOLD_MODELS": str(tmp_path / "missing-models.toml")}
    code, error = _cli("replay", str(FIXTURES / "claude-code" / "short.jsonl"), env=env)
    assert code == 2, error
    assert error["kind"] == "bad_input"  # the CLI words it as its own bad input
    assert "missing-models.toml" in error["error"]
    code, error = _cli("show", "no-such-session", env=env)
    assert code == 2 and error["kind"] == "not_found"


async def test_compacting_a_session_too_big_for_its_window_is_never_a_500(
        service_factory) -> None:  # noqa: F811
    # Issue 23: the page imported a real Pi session and "Compact now" answered HTTP 500
    # (SummaryBudgetTooSmall inside CompactionFailedError). A known condition has a kind:
    # whatever the window, the answer is a success or the caller's 4xx naming the budget.
    raw = (FIXTURES / "pi-mono" / "large-session.jsonl").read_bytes()
    async with service_factory() as svc, svc.client() as c:
        imported = await c.post("/v1/import", content=raw)
        assert imported.status_code == 201, imported.text
        r = await c.post(f"/v1/sessions/{imported.json()['session_id']}/compact", json={})
        assert r.status_code != 500, r.text
        if r.status_code >= 400:
            assert r.status_code == 400 and r.json()["type"] == "bad_request"
            assert "budget" in r.json()["error"]


# --------------------------------------------------------------------------- the tree


def every_module_imported() -> None:
    """Import every module of contextfold, so every error class is defined."""
    import pkgutil

    for info in pkgutil.walk_packages(contextfold.__path__, "contextfold."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def draw_tree(root: type[BaseException] = ContextfoldError) -> list[str]:
    """The drawing of `root` and its subclasses defined in contextfold: one line a class
    (its name, kind, module, the Python bases it keeps beside contextfold's), children
    indented under their parent."""
    lines = [f"{root.__name__:<38}{root.kind:<12}{root.__module__.removeprefix('contextfold.')}"]

    def walk(cls: type, prefix: str) -> None:
        subs = sorted((c for c in cls.__subclasses__() if c.__module__.startswith("contextfold.")),
                      key=lambda c: (c.__module__, c.__name__))
        for i, sub in enumerate(subs):
            last = i == len(subs) - 1
            name = f"{prefix}{'└── ' if last else '├── '}{sub.__name__}"
            kept = [b.__name__ for b in sub.__bases__ if not issubclass(b, ContextfoldError)]
            also = f" + {', '.join(kept)}" if kept else ""
            lines.append(f"{name:<38}{sub.kind:<12}"
                         f"{sub.__module__.removeprefix('contextfold.')}{also}".rstrip())
            walk(sub, prefix + ("    " if last else "│   "))

    walk(root, "")
    return lines


def test_the_tree_drawing_can_fail() -> None:
    class Stray(ContextfoldError):  # defined here, not in contextfold: never drawn
        kind = "busy"

    assert not any("Stray" in line for line in draw_tree())
    assert draw_tree(ProviderError)[1].startswith("├── ContextOverflowError")


def test_the_docstring_draws_every_error_class() -> None:
    """`errors.py`'s docstring draws the whole tree; a class added, moved or given another
    kind anywhere in contextfold fails here until the drawing says so."""
    every_module_imported()
    doc = [line.removeprefix("    ") for line in (contextfold.errors.__doc__ or "").splitlines()]
    start = doc.index(draw_tree()[0])
    assert doc[start:start + len(draw_tree())] == draw_tree()
    assert not doc[start + len(draw_tree())].startswith(("├", "└", "│", " "))
