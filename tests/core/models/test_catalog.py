"""Model catalog (SPEC B4) and the per-model budgets derived from it (SPEC B1-B3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfold.core.models.budget import derive_budget
from contextfold.core.models.catalog import (
    DEFAULT_MAX_OUTPUT_CAP,
    CatalogConfigError,
    ModelCatalog,
    UnknownModelError,
    capacity_for,
    default_catalog,
    derived_max_output,
    load_overrides,
    tokenizer_family,
)

# The models.dev source the packaged table was condensed from (copied with its licence).
SOURCE = Path(__file__).parents[2] / "fixtures" / "models-dev" / "models.json"


@pytest.fixture
def catalog() -> ModelCatalog:
    return default_catalog().with_overrides({})  # a private copy: overrides stay local


# --------------------------------------------------------------------------- data


def test_packaged_data_and_licence_ship_with_the_package():
    from importlib import resources

    data = resources.files("contextfold.data")
    assert "MIT License" in data.joinpath("LICENSE-models-dev").read_text("utf-8")
    assert len(default_catalog()) == 4061
    assert default_catalog() is default_catalog()  # cached


def test_packaged_data_is_the_models_dev_source_condensed():
    from importlib import resources

    source = json.loads(SOURCE.read_text("utf-8"))
    packaged = json.loads(resources.files("contextfold.data").joinpath(
        "models.json").read_text("utf-8"))
    assert packaged["commit"] == source["commit"]
    rows = [dict(zip(packaged["fields"], r, strict=True)) for r in packaged["models"]]
    assert rows == [{k: m[k] for k in packaged["fields"]} for m in source["models"]]


# --------------------------------------------------------------------------- lookup forms


def test_bare_id_prefers_the_first_party_provider(catalog):  # B4
    cap = catalog.lookup("claude-sonnet-4-5")
    assert (cap.context_window, cap.max_output, cap.family) == (200_000, 64_000, "claude")
    assert catalog.resolve("claude-sonnet-4-5").provider == "anthropic"
    assert catalog.resolve("gpt-4o").provider == "openai"
    assert catalog.resolve("o3").provider == "openai"
    assert catalog.resolve("glm-4.6").provider == "zai"
    assert catalog.resolve("mistral-large-latest").provider == "mistral"


def test_provider_slash_model_and_vendor_prefixed_ids(catalog):
    assert catalog.resolve("anthropic/claude-sonnet-4-5").provider == "anthropic"
    row = catalog.resolve("openrouter/anthropic/claude-sonnet-4.5")
    assert (row.provider, row.id) == ("openrouter", "anthropic/claude-sonnet-4.5")
    assert catalog.lookup("openrouter/anthropic/claude-sonnet-4.5").context_window == 1_000_000
    # A vendor-prefixed id answers the bare id when no first-party row has it.
    assert catalog.resolve("gemini-2.5-pro") is not None


def test_loose_names_case_dots_and_dates(catalog):
    assert catalog.resolve("Claude-Sonnet-4-5").id == "claude-sonnet-4-5"
    assert catalog.resolve("claude-sonnet-4.5").provider == "anthropic"
    assert catalog.resolve("anthropic/claude-sonnet-4.5").id == "claude-sonnet-4-5"
    assert catalog.resolve("claude-haiku-4-5-20251001").id == "claude-haiku-4-5-20251001"


def test_without_a_first_party_row_the_choice_is_the_consensus_and_deterministic(catalog):
    first = catalog.resolve("gemini-2.5-pro")
    assert first == catalog.resolve("gemini-2.5-pro")
    assert catalog.lookup("gemini-2.5-pro").context_window == 1_048_576  # most providers


def test_input_cap_and_tokenizer_family(catalog):
    codex = catalog.lookup("gpt-5.1-codex")
    assert (codex.max_input, codex.family, codex.replays_reasoning) == (272_000, "gpt", False)
    assert catalog.lookup("claude-opus-4-6").replays_reasoning is True
    assert catalog.lookup("gemini-3-pro-preview").family == "gemini"
    assert catalog.lookup("deepseek-chat").family == "other"
    assert tokenizer_family("openai.gpt-oss-120b") == "gpt"
    assert tokenizer_family("us.anthropic.claude-sonnet-4-5") == "claude"
    assert tokenizer_family("qwen3-coder-plus") == "other"


def test_per_family_image_cost_and_reasoning_replay(catalog):  # B4
    assert catalog.lookup("claude-sonnet-4-5").image_tokens == 1600
    assert catalog.lookup("gpt-4o").image_tokens > 1600  # mini patch models need headroom
    assert catalog.lookup("claude-3-5-sonnet-20241022").replays_reasoning is False  # no thinking


def test_missing_max_output_gets_a_derived_default(catalog):
    cap = catalog.lookup("google/gemini-3-pro-image-preview")  # output is null in the data
    assert cap.max_output == derived_max_output(131_072) == DEFAULT_MAX_OUTPUT_CAP
    assert derived_max_output(8192) == 2048
    assert derived_max_output(3) == 1


# --------------------------------------------------------------------------- unknown models


def test_unknown_model_error_says_how_to_give_a_window(catalog):
    with pytest.raises(UnknownModelError) as info:
        catalog.lookup("my-local-model")
    message = str(info.value)
    assert "context_window" in message and "my-local-model" in message
    assert isinstance(info.value, LookupError)
    with pytest.raises(UnknownModelError, match="claude-sonnet-4-5"):
        catalog.lookup("claude-sonet-4-5")  # a typo gets close names


def test_unknown_model_with_a_window_works(catalog):
    cap = catalog.lookup("my-local-model", context_window=32_768)
    assert (cap.model, cap.context_window, cap.max_output, cap.family) == (
        "my-local-model", 32_768, 8192, "other")
    assert capacity_for("x-model", context_window=8192, max_output=1000).max_output == 1000


def test_an_explicit_window_overrides_a_known_model(catalog):
    cap = catalog.lookup("claude-sonnet-4-5", context_window=1_000_000)
    assert (cap.context_window, cap.max_output) == (1_000_000, 64_000)


# --------------------------------------------------------------------------- overrides


def test_api_overrides_new_and_existing_models(catalog):  # B4
    catalog.override("my-local-model", context_window=8192, max_output=2048)
    cap = catalog.lookup("my-local-model")
    assert (cap.context_window, cap.max_output) == (8192, 2048)
    catalog.override("claude-sonnet-4-5", context_window=1_000_000, image_tokens=2000)
    sonnet = catalog.lookup("anthropic/claude-sonnet-4-5")  # any name of the same row
    assert (sonnet.context_window, sonnet.image_tokens, sonnet.max_output) == (
        1_000_000, 2000, 64_000)
    assert default_catalog().lookup("claude-sonnet-4-5").context_window == 200_000


def test_with_overrides_returns_a_copy(catalog):
    copy = catalog.with_overrides({"tiny": {"context_window": 4096, "family": "gpt"}})
    assert copy.lookup("tiny").family == "gpt"
    assert copy.lookup("tiny").replays_reasoning is False
    assert "tiny" in copy and "tiny" not in catalog


def test_bad_api_override_names_the_model_and_key(catalog):
    with pytest.raises(CatalogConfigError, match=r"'my-model'.*context_window is required"):
        catalog.override("my-model", max_output=100)
    with pytest.raises(CatalogConfigError, match=r"context_window must be an integer >= 1"):
        catalog.override("my-model", context_window=-5)
    with pytest.raises(CatalogConfigError, match=r"unknown key 'windw'"):
        catalog.override("my-model", windw=5)
    with pytest.raises(CatalogConfigError, match="family must be one of"):
        catalog.override("claude-sonnet-4-5", family="llama")


def test_overrides_from_toml_and_json_files(tmp_path, catalog):
    toml = tmp_path / "models.toml"
    toml.write_text('[models."my-local-model"]\ncontext_window = 8192\nmax_output = 2048\n\n'
                    '[models."claude-sonnet-4-5"]\ncontext_window = 1000000\n', "utf-8")
    from_toml = catalog.with_overrides(toml)
    assert from_toml.lookup("my-local-model").context_window == 8192
    assert from_toml.lookup("claude-sonnet-4-5").context_window == 1_000_000
    js = tmp_path / "models.json"
    js.write_text(json.dumps({"models": {"m": {"context_window": 16384,
                                               "replays_reasoning": True}}}), "utf-8")
    assert load_overrides(js) == {"m": {"context_window": 16384, "replays_reasoning": True}}
    assert catalog.with_overrides(js).lookup("m").replays_reasoning is True


@pytest.mark.parametrize(("content", "pattern"), [
    ('[models."m"]\ncontext_window = "big"\n', r'models\."m": context_window must be an integer'),
    ('[models."m"]\nwindow = 5\n', r"models\.\"m\": unknown key 'window'"),
    ('[models."m"]\nreplays_reasoning = 1\n', r"replays_reasoning must be true or false"),
    ("context_window = 5\n", "expected a 'models' table"),
    ("[models\n", "not valid TOML"),
    ('[models]\nm = 5\n', r"models\.\"m\": expected a table"),
])
def test_bad_overrides_file_names_file_and_key(tmp_path, content, pattern):
    path = tmp_path / "overrides.toml"
    path.write_text(content, "utf-8")
    with pytest.raises(CatalogConfigError, match=pattern) as info:
        load_overrides(path)
    assert str(path) in str(info.value)


def test_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "o.json"
    bad.write_text("{not json", "utf-8")
    with pytest.raises(CatalogConfigError, match="not valid JSON"):
        load_overrides(bad)
    with pytest.raises(CatalogConfigError, match="cannot read"):
        load_overrides(tmp_path / "missing.toml")


# --------------------------------------------------------------------------- budgets B1-B3


def _check_budget(cap):
    b = derive_budget(cap)
    assert 0 < b.reserve <= cap.max_output  # B1: the reserve comes from the model
    assert b.safe_input_limit == cap.context_window - b.reserve
    assert 0 < b.summary_budget <= min(b.reserve, cap.max_output)  # B3
    assert 0 < b.tail_budget <= cap.context_window // 4  # B2: scales with the window
    assert b.tail_budget + 2 * b.summary_budget <= b.safe_input_limit  # the tail always fits
    assert 0 < b.auto_threshold < b.safe_input_limit
    return b


def test_budgets_for_an_8k_model(catalog):  # B1-B3
    catalog.override("local-8k", context_window=8192, max_output=2048)
    b = _check_budget(catalog.lookup("local-8k"))
    assert b.reserve == 2048 and b.safe_input_limit == 6144
    assert b.tail_budget == 2048 and b.summary_budget == 1638
    gpt4 = _check_budget(catalog.lookup("gpt-4"))  # 8k window from the data
    assert gpt4.reserve == 2048


def test_budgets_for_a_200k_model(catalog):  # B1-B3
    b = _check_budget(catalog.lookup("claude-sonnet-4-5"))
    assert b.reserve == 16_384 and b.safe_input_limit == 183_616
    assert b.tail_budget == 12_000 and b.summary_budget == 13_107


def test_an_exact_id_is_found_without_parsing_the_packaged_rows_and_alike():
    """Start-up (issue 9): the packaged catalog answers an exact id from the rows that name
    it, without parsing all 4,061; for every id in the data (and its vendor-less tail and
    upper-cased form) that shortcut resolves exactly what the full index resolves."""
    from contextfold.core.models.catalog import _scan_packaged

    lazy = ModelCatalog.packaged()
    assert lazy.lookup("claude-opus-4-6").context_window > 0
    assert "_entries" not in lazy.__dict__ and "_by_id" not in lazy.__dict__
    full = ModelCatalog(ModelCatalog.packaged()._entries)
    text = lazy._text
    assert text is not None
    names = {e.id for e in full._entries} | {e.id.rsplit("/", 1)[-1] for e in full._entries}
    scanned = 0
    for name in sorted(names):
        low = name.lower()
        rows = _scan_packaged(text, low)
        if rows is not None:
            scanned += 1
            assert rows == full._by_id.get(low, []), name
    for name in sorted(names)[::25]:  # the whole resolution, on a fresh lazy catalog each
        for form in (name, name.upper()):
            assert ModelCatalog.packaged().resolve(form) == full.resolve(form), form
    # The shortcut answers nearly every bare id (a name with a '/' goes the provider path).
    assert scanned > 0.95 * len({n for n in names if "/" not in n})
    # Not a row alone (the header line), an id JSON would escape, a name nobody has:
    first_id = json.loads(text)["models"][0][1].lower()
    assert _scan_packaged(text, first_id) is None
    assert _scan_packaged(text, 'we"ird') is None
    assert _scan_packaged(text, "no-such-model-anywhere") == []
    assert _scan_packaged(text, "openrouter") is None  # on hundreds of rows: the index answers
    assert _scan_packaged(text.replace('"fields"', '"columns"', 1), "gpt-4o") is None


def test_a_long_running_process_builds_the_catalog_index_once(monkeypatch):
    """Each name is scanned for once; past SCANNED_NAMES names the index is built and answers
    every later lookup (a proxy or service looks models up per request)."""
    import contextfold.core.models.catalog as catalog_module

    scans: list[str] = []
    real = catalog_module._scan_packaged
    monkeypatch.setattr(catalog_module, "_scan_packaged",
                        lambda text, low, lowered=None: scans.append(low) or
                        real(text, low, lowered))
    catalog = ModelCatalog.packaged()
    for _ in range(3):
        assert catalog.lookup("gpt-4o").context_window == 128_000
    assert scans == ["gpt-4o"]
    names = ["claude-sonnet-4-5", "claude-opus-4-6", "gpt-4.1", "o3", "gemini-2.5-pro",
             "glm-4.6", "mistral-large-latest", "gpt-4o-mini", "o4-mini", "claude-haiku-4-5"]
    for name in names:
        catalog.lookup(name)
    assert len(scans) == catalog_module.SCANNED_NAMES
    assert "_by_id" in catalog.__dict__  # built once, for the names past the limit
    for name in names:
        catalog.lookup(name)
    assert len(scans) == catalog_module.SCANNED_NAMES
