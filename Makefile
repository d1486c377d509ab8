# Everything the project needs lives in .venv; torch is installed first, pinned to the CPU wheel.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  := torch==2.13.0
OUT    ?= runs/quick

.PHONY: bench test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

bench: install
	$(BIN)/emergence-bench sweep quick --out $(OUT) --workers 2
	$(BIN)/emergence-bench leaderboard $(OUT)

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
