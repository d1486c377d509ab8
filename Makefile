# Everything the project needs lives in .venv: torch first (pinned, the build TORCH names), then the
# suite. `make bench` installs only what the main job needs; `make test` adds the `dev` extra.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
OUT    ?= runs/quick
# TORCH=cpu (default): torch's CPU build (a local wheel where pip has one, else PyTorch's CPU index).
# TORCH=cuda: the CUDA build, PyPI's default on Linux (several GB). Choose it at the first install
# (or after `make clean`). Bytecode is not precompiled (--no-compile): Python writes it on first
# import, for the modules used, which keeps a fresh .venv about 240 MB smaller.
TORCH ?= cpu
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
PIP := $(BIN)/pip install --quiet --no-compile

.PHONY: bench report-screenshot test test-slow test-all typecheck lint install install-dev clean gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.torch: $(BIN)/python
ifeq ($(TORCH),cpu)
	$(PIP) torch==$(TORCH_VERSION)+cpu 2>/dev/null \
	  || $(PIP) torch==$(TORCH_VERSION)+cpu --extra-index-url $(TORCH_CPU_INDEX)
else ifeq ($(TORCH),cuda)
	$(PIP) torch==$(TORCH_VERSION)
else
	$(error TORCH must be cpu or cuda, got '$(TORCH)')
endif
	touch $@

$(VENV)/.installed: $(VENV)/.torch pyproject.toml
	$(PIP) -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) -e '.[dev]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# A failed run is recorded, not fatal: the leaderboard and report are written either way.
bench: install
	$(BIN)/emergence-bench sweep quick --out $(OUT) --workers 2; status=$$?; \
	$(BIN)/emergence-bench leaderboard $(OUT) && $(BIN)/emergence-bench report $(OUT) && exit $$status

# The `make bench` report as a reader sees it, in headless Chromium: DIR/report.png (needs chromium).
report-screenshot: install-dev
	$(BIN)/emergence-bench report $(OUT) --screenshot

# The fast suite, for a newcomer and the edit-test loop: every test not marked slow. test-slow: the
# rest; test-all: both (CI runs test and test-slow, so every test once).
test: install-dev
	$(BIN)/python -m pytest -q -m "not slow" --durations=25

test-slow: install-dev
	$(BIN)/python -m pytest -q -m slow --durations=25

test-all: test test-slow

# mypy over the installed namespace (pyproject's [tool.mypy]). It cannot follow pyproject's package-dir
# mapping (benchmark/ is emergence_bench, tasks/ is emergence_bench.tasks, ...), so .typecheck/ first lays
# that namespace out as links; its paths are those links.
typecheck: install-dev
	rm -rf .typecheck && mkdir -p .typecheck/emergence_bench
	ln -s $(CURDIR)/benchmark/* .typecheck/emergence_bench/
	ln -s $(CURDIR)/tasks $(CURDIR)/mixers $(CURDIR)/callbacks .typecheck/emergence_bench/
	$(BIN)/mypy

# ruff (pyproject's [tool.ruff]): pyflakes, import order, pycodestyle's non-layout errors and its line length
# (E501, at the project's width, 120), clean.
lint: install-dev
	$(BIN)/ruff check benchmark tasks mixers callbacks tests

# The GPU lease's call (docs/gpu.md): every GPU check in one call, on the device image (.ci/gpu-check).
gpu-check:
	.ci/gpu-check

clean:
	rm -rf $(VENV) runs .pytest_cache .whl .venv-torch-oldest .typecheck .mypy_cache

# ---- The GPU lease (docs/gpu.md): what its bare image lacks travels as wheels in .whl/ (ignored).
GPU_WHEELS := .whl

# cp312 manylinux wheels of .ci/gpu/wheels.txt, fetched once (again when that list changes).
$(GPU_WHEELS)/.complete: .ci/gpu/wheels.txt
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d $(GPU_WHEELS) -r .ci/gpu/wheels.txt
	touch $@

.PHONY: gpu-wheels device-call gpu-check-dry
gpu-wheels: $(GPU_WHEELS)/.complete

# The exact `device` tool call that runs .ci/gpu-check there, checked against the tool's limits.
device-call: gpu-wheels
	$(PYTHON) .ci/gpu/device_call.py

# .ci/gpu-check's steps on this CPU machine, from the same wheels, offline (CI runs it).
gpu-check-dry: install-dev gpu-wheels  # the dry run collects the gpu tests: pytest (dev)
	GPU_CHECK_DRY=1 GPU_CHECK_BUDGET_S=900 PYTHON=$(BIN)/python OUT=runs/gpu-check-dry .ci/gpu-check
