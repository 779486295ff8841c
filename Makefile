# The two README commands: `make quickstart` (the main job on the embedded default) and `make test`.
# Both set up everything they need on a fresh machine: a virtual environment, torch first (the pinned
# CPU wheel by default; override TORCH_SPEC for a CUDA build), then the package with its extras.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.neoembed-installed
RUN_DIR ?= runs/quickstart

.PHONY: setup quickstart test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[serve,embedded,dev]"
	touch $(STAMP)

quickstart: setup
	$(VENV)/bin/neoembed quickstart --run-dir $(RUN_DIR)

lint: setup
	$(VENV)/bin/ruff check neoembed tests
	$(VENV)/bin/ruff format --check neoembed tests

test: lint
	$(VENV)/bin/pytest -q

clean:
	rm -rf $(VENV) runs
