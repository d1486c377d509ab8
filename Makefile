# Everything the project needs lives in .venv; torch is installed first, pinned to the CPU wheel.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
OUT    ?= runs/quick

.PHONY: bench report-screenshot test test-all install clean gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $@

install: $(VENV)/.installed

# A failed run is recorded, not fatal: the leaderboard and report are written either way.
bench: install
	$(BIN)/emergence-bench sweep quick --out $(OUT) --workers 2; status=$$?; \
	$(BIN)/emergence-bench leaderboard $(OUT) && $(BIN)/emergence-bench report $(OUT) && exit $$status

# The `make bench` report as a reader sees it, in headless Chromium: DIR/report.png (needs chromium).
report-screenshot: install
	$(BIN)/emergence-bench report $(OUT) --screenshot

# The fast suite, for the edit-test loop: every test not marked slow. test-all: every test.
test: install
	$(BIN)/python -m pytest -q -m "not slow"

test-all: install
	$(BIN)/python -m pytest -q --durations=15

# On a CUDA machine with the `kernels` extra: every GPU check in one call (.ci/gpu-check).
gpu-check:
	.ci/gpu-check

clean:
	rm -rf $(VENV) runs .pytest_cache
