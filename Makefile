# Every target sets itself up: on a fresh clone `make run` and `make test` just work.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run workers test lint typecheck proto proto-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/weft server

# The order example's worker processes: its decider, a runner for `orders` and
# one for the card charges on `pci`. Ctrl-C reaches all three; each drains, then exits.
workers: $(STAMP)
	$(BIN)/weft decider examples.order & \
	$(BIN)/weft runner --task-list orders examples.order & \
	$(BIN)/weft runner --task-list pci --identity pci-runner examples.order & \
	wait

test: $(STAMP)
	$(BIN)/python scripts/gen_proto.py --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

proto-check: $(STAMP)
	$(BIN)/python scripts/gen_proto.py --check

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
