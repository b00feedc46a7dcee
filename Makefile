# The two commands a new user needs (see README): `make demo` and `make test`.
# Both create the virtual environment in .venv and install what they need first: `make demo`
# the base install alone, `make test` every extra and the test tools.
VENV ?= .venv
PY := $(VENV)/bin/python
# Two stamps: the base install (what `make demo` needs: the library and its offline
# commands, no extra) and the whole development install (every extra and the test tools,
# what `make test` needs). A fresh clone's `make demo` installs only the first.
BASE := $(VENV)/.base-installed
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench bench-peers chromium agents

$(BASE): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e .
	touch $(BASE)

$(STAMP): $(BASE) pyproject.toml
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The browser tests (tests/browser) drive Debian's Chromium: Playwright's own browser download
# cannot work offline. Installed once, only when missing (a file target), as root or via sudo.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

chromium: $(CHROMIUM)

# The real agent CLIs tests/agent_clis drives through `contextfold proxy`, pinned by
# .agents/package.json (exact versions) and package-lock.json (Pi, Claude Code, Codex,
# OpenCode: ~1.2 GB, ~2 min from the registry). `npm install`, not `npm ci`: OpenCode lists
# optional binaries for platforms the registry does not serve at its version, which `npm ci`
# refuses as a lock out of sync; `npm install` takes the locked versions and skips those.
# Installed once; skipped (with a message) where npm is missing, and the tests then skip
# unless CI requires them.
AGENTS := .agents/node_modules/.installed
$(AGENTS): .agents/package.json .agents/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd .agents && npm install --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: not installing the agent CLIs (tests/agent_clis will skip)"; fi

agents: $(AGENTS)

# The offline demo needs the base install only (no extra, no test tool).
demo: $(BASE)
	$(VENV)/bin/contextfold demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples

# The store's SQLite tests run a second time with the one-hop fast path off
# (store/sqlite/sqlite_hops.py), so the ordinary path it falls back to stays proved (~75 s).
STORE_FALLBACK_TESTS := tests/store/test_store_basic.py tests/store/test_store_branching.py \
	tests/store/test_store_commit.py tests/store/test_store_damage.py tests/store/test_store_derived.py \
	tests/store/test_store_memo_properties.py tests/store/test_store_tamper.py tests/store/test_store_tenancy.py \
	tests/store/test_store_append_cost.py tests/store/test_store_concurrency.py \
	tests/store/test_store_sqlite_writers.py tests/store/test_store_sqlite_fallback.py

test: $(STAMP) $(CHROMIUM) $(AGENTS)
	$(VENV)/bin/ruff check src tests bench examples
	$(PY) -m pytest -q -n 2 --dist loadfile
	CONTEXTFOLD_SQLITE_ONE_HOP=0 $(PY) -m pytest -q -n 2 --dist loadfile -k "not postgresql" \
		$(STORE_FALLBACK_TESTS)

# Benchmarks write bench/results/*.json; docs/benchmarks.md reports them (not timed tests).
bench: $(STAMP)
	$(PY) -m bench.core_bench
	$(PY) -m bench.estimator_accuracy
	$(PY) -m bench.store_bench
	$(PY) -m bench.startup_bench
	$(PY) -m bench.continuity
	$(PY) -m bench.masking_bench
	$(PY) -m bench.recall_bench
	$(PY) -m bench.scale_bench
	$(PY) -m bench.split_turn_bench
	$(PY) -m bench.replay_cost
	$(PY) -m bench.docs_report

bench-peers: $(STAMP)
	$(PY) -m bench.peers.frameworks_oa_pa
	$(PY) -m bench.peers.run
	$(PY) -m bench.docs_report
