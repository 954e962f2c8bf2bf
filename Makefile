PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint format bench load rounds migration clean

# Debian packages by the command that shows they are there: bubblewrap isolates custom tools
# (the demo runs one), Chromium drives the dashboard's browser test.
DEMO_PACKAGES := bwrap=bubblewrap
TEST_PACKAGES := bwrap=bubblewrap chromium=chromium

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/nightshift demo

test: $(STAMP)
	@scripts/system-packages $(TEST_PACKAGES)
	$(BIN)/pytest -q -n 2

# The unit tests alone (pure logic: no PostgreSQL, no browser, no server), in seconds.
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# The next Alembic revision, from what changed in store/tables.py: make migration NAME="what it does"
migration: $(STAMP)
	@test -n "$(NAME)" || { echo 'usage: make migration NAME="what it does"' >&2; exit 2; }
	$(BIN)/nightshift db revision -m "$(NAME)"

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/python -m benchmarks.bench $(ARGS)

# The API's latency under concurrent readers, without and with a batch run stepping (loopback only).
load: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/python -m benchmarks.load $(ARGS)

# Provider rounds per task, with and without several tool calls per turn (the README's table).
rounds: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/python -m benchmarks.rounds $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
