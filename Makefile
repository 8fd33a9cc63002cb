# One set-up path for README, CI and developers.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lint demo bench

setup: $(BIN)/saguaro

$(BIN)/saguaro: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# pin the local CPU wheel: an unpinned torch pulls a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[exec,dev,hf]' torch==2.13.0
	touch $(BIN)/saguaro

# two workers, one test file each at a time (module fixtures run once): the suite is CPU-bound and single-
# threaded, so a 2-core box runs it in about half the time; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2

test: setup
	$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadfile

lint: setup
	$(BIN)/ruff check .

demo: setup
	# the deep pair: its draft step costs ~1/12 of a verification, like a 1B draft beside a 70B TP4 target
	$(BIN)/saguaro autotune --target saguaro_exec/assets/tiny/target-deep --out out/autotune

bench: setup
	$(BIN)/python bench/bench_sim.py
