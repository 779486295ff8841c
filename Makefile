# The two README commands: `make quickstart` (the main job on the embedded default) and `make test`.
# Both set up everything they need on a fresh machine: a virtual environment, torch first (the pinned
# CPU wheel by default; override TORCH_SPEC and TORCH_INDEX for a CUDA build), then the package with its
# extras at the exact versions of constraints.txt, the lock the test suite passed with.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
UV_SPEC ?= uv==0.13.9
EXTRAS := serve,embedded,dev
# The lock (empty: the newest releases pyproject.toml's ranges admit, as `make test-latest` installs).
LOCK ?= constraints.txt
STAMP := $(VENV)/.neoembed-installed
RUN_DIR ?= runs/quickstart
# Where the lock's resolver finds torch's CPU wheel (pip's find-links on this machine kind).
TORCH_WHEELS ?= /opt/wheels

.PHONY: setup quickstart test test-latest lock versions lint clean

setup: $(STAMP)

# torch goes in with pip, which finds the local CPU wheel (uv does not look there and would fetch a CUDA build);
# the package and its dependencies with uv, which resolves, downloads and installs in parallel (the whole
# set-up 134 s with pip, 62 s with uv, no caches: docs/benchmarks/quickstart.md), byte-compiling as pip does
# so the first commands do not; with pip where uv cannot be installed. Both read the same lock.
$(STAMP): pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)" $(TORCH_INDEX)
	if $(PY) -m pip install -q "$(UV_SPEC)"; then \
		$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) \
			$(if $(LOCK),--constraint $(LOCK)) -e ".[$(EXTRAS)]"; \
	else \
		$(PY) -m pip install -q --upgrade pip && \
		$(PY) -m pip install -q $(if $(LOCK),--constraint $(LOCK)) -e ".[$(EXTRAS)]"; \
	fi
	touch $(STAMP)

quickstart: setup
	$(VENV)/bin/neoembed quickstart --run-dir $(RUN_DIR)

# What a failing run needs to be read at once: the CPU's capability and the versions that matter.
versions: setup
	$(VENV)/bin/neoembed info

lint: setup
	$(VENV)/bin/ruff check neoembed tests scripts
	$(VENV)/bin/ruff format --check neoembed tests scripts
	$(VENV)/bin/mypy  # the package, faces resolved ([tool.mypy] in pyproject.toml)

test: lint versions
	$(VENV)/bin/pytest -q

# The suite against the newest releases pyproject.toml admits (torch stays TORCH_SPEC), in a venv of its
# own made anew each time, so a new release of a dependency is noticed on purpose, not by a user.
test-latest:
	rm -rf .venv-latest
	$(MAKE) test VENV=.venv-latest LOCK=

# Refresh the lock: resolve pyproject.toml's ranges anew for Python 3.11 on Linux x86_64. torch is left
# out of it (TORCH_SPEC installs it first) but resolved as the CPU wheel, so no CUDA packages enter.
# Run `make test` on the new lock before committing it (docs/development.md).
lock: setup
	$(PY) -m pip install -q "$(UV_SPEC)"
	echo "torch==2.13.0+cpu" > $(VENV)/torch-cpu.txt
	DS_BUILD_OPS=0 $(VENV)/bin/uv pip compile pyproject.toml --extra serve --extra embedded --extra dev \
		--extra deepspeed --extra tensorboard --upgrade \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		--find-links $(TORCH_WHEELS) --constraint $(VENV)/torch-cpu.txt --no-emit-package torch \
		--custom-compile-command "make lock" --output-file constraints.txt

clean:
	rm -rf $(VENV) .venv-latest runs
