# The two commands a new user needs (see README): `make demo` and `make test`.
# Both create the virtual environment in .venv and install what they need first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench bench-core

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/contextfold demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m bench.run_all
