# Every target sets itself up: on a fresh clone `make run` and `make test` just work.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run ui workers test browser lint typecheck proto proto-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/weft server

# The web UI beside `make run`: http://127.0.0.1:7401 (README "Web UI").
ui: $(STAMP)
	$(BIN)/weft ui

# The order example's worker processes: its decider, a runner for `orders` and
# one for the card charges on `pci`. Ctrl-C reaches all three; each drains, then exits.
workers: $(STAMP)
	$(BIN)/weft decider examples.order & \
	$(BIN)/weft runner --task-list orders examples.order & \
	$(BIN)/weft runner --task-list pci --identity pci-runner examples.order & \
	wait

# Debian's chromium for the web UI's browser tests (quiet when it is there).
browser:
	sh scripts/install_browser.sh

test: $(STAMP) browser
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

# The benchmark (bench/README.md), never part of `make test`. Its extra (DBOS,
# the peer it is compared with) goes into the same .venv. QUICK=1: the short set.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

.PHONY: bench
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(if $(QUICK),--quick)

# Weft under kill -9 (chaos/__init__.py): a few hundred workflows on SQLite, on
# PostgreSQL and on two nodes, with servers, deciders, runners (and PostgreSQL,
# when a cluster of its own can be made) killed at random; then every history is
# checked. Never part of `make test` (its short version is). MINUTES=10 by default.
.PHONY: chaos
chaos: $(STAMP)
	$(BIN)/python -m chaos $(if $(MINUTES),--minutes $(MINUTES))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
