# One entry point for developers and CI: `make demo`, `make test`.
# Everything installs into .venv on first use, so a fresh machine needs only python3.
# `make demo` installs only what the demo needs (the package and its tiktoken extra);
# `make test` (and lint, typecheck, unit, bench) install the whole dev toolchain.
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(PY):
	python3 -m venv $(VENV)

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[tiktoken]'
	touch $(DEMO_STAMP)

# CPU torch goes in first: the embeddings extra (in dev) would otherwise pull the CUDA
# builds. These machines' pip finds the CPU wheel in its find-links; elsewhere add
# --index-url https://download.pytorch.org/whl/cpu to that line.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/contextwright demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(VENV)/bin/pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/bench_heuristic.py
	$(PY) bench/bench_build.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
