PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
# The tests drive the server with letta-client 1.7.0 (the lock file's) and 1.12.1 (this one's).
LETTA_CLIENT_1_12 := tests/letta-client-1.12.lock
# The tool that writes the lock file, pinned so that a regenerated file differs only by what changed.
UV := uv==0.13.8
PY_VERSION := 3.11

.PHONY: demo test test-fast test-quick lint format lock bench load submit sandbox rounds polling cost deadline letta-side migration wheel clean

# Debian packages by the command that shows they are there: bubblewrap isolates custom tools
# (the demo runs one), Chromium drives the dashboard's browser test.
DEMO_PACKAGES := bwrap=bubblewrap
TEST_PACKAGES := bwrap=bubblewrap chromium=chromium

# The development environment is the lock file's exact versions (checked by their hashes), then
# nightshift itself without dependencies: every machine and CI test the same set, while
# pyproject.toml keeps the ranges users install nightshift with. pip check fails when the lock no
# longer satisfies pyproject.toml (run make lock).
$(STAMP): $(LOCK) pyproject.toml $(LETTA_CLIENT_1_12)
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/pip check
	$(BIN)/pip install --quiet --require-hashes --no-deps --upgrade --target $(VENV)/letta-client-1.12 -r $(LETTA_CLIENT_1_12)
	touch $(STAMP)

# The lock file again, after a change to pyproject.toml's dependencies: the pins it already has
# stay where the ranges allow (ARGS="--upgrade" or "--upgrade-package NAME" moves them on). It
# holds the dev and otel extras for every platform, resolved for the oldest Python we support.
lock:
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet $(UV)
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra otel --python-version $(PY_VERSION) --universal \
		--generate-hashes --custom-compile-command "make lock" --output-file $(LOCK) --quiet $(ARGS)

demo: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/nightshift demo

# dist/nightshift-<version>-py3-none-any.whl, for pip to install where the checkout is not (with
# the otel extra or without; the dev extra is the checkout's). setuptools leaves its build folder
# in the checkout, whose files would go into the next wheel after their source is gone: it goes
# before and after.
wheel: $(STAMP)
	rm -rf build
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .
	rm -rf build
	@ls dist/nightshift-*.whl

# Every test, slow ones too (CI runs this), and the 40 slowest: where the suite's time goes.
# Python writes its bytecode even where the shell says not to: the suite starts a few hundred
# Python processes (servers, their pollers, the CLI), and each would compile the whole package
# again. Four workers on two cores: much of the suite waits on processes, servers and the
# database rather than computing, and two workers left the cores idle; more than four fight over
# them. (--dist loadscope would share a module's server between its tests, but its runs here
# ended with tests never run and no word of it.)
PYTEST_WORKERS := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -n 4
test: $(STAMP)
	@scripts/system-packages $(TEST_PACKAGES)
	$(PYTEST_WORKERS) -q --durations=40

# The unit tests alone (pure logic: no PostgreSQL, no browser, no server), in seconds.
test-fast: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Everything but the tests marked slow (chaos, the measuring scripts, the browser, and the few
# that take over about 20 s): the check to run before a commit; make test before a merge.
test-quick: $(STAMP)
	@scripts/system-packages $(TEST_PACKAGES)
	$(PYTEST_WORKERS) -q -m "not slow"

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

# What starting a run costs, black-box: from the POST until the provider has the batch.
submit: $(STAMP)
	$(BIN)/python -m benchmarks.submit $(ARGS)

# What a custom tool call costs in the tool sandbox, part by part, beside a bare fork's floor.
sandbox: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/python -m benchmarks.sandbox $(ARGS)

# Provider rounds per task, with and without several tool calls per turn (the README's table).
rounds: $(STAMP)
	@scripts/system-packages $(DEMO_PACKAGES)
	$(BIN)/python -m benchmarks.rounds $(ARGS)

# How soon a run's batches are found ended, and the polls it takes: a fixed interval beside the poll schedule.
polling: $(STAMP)
	$(BIN)/python -m benchmarks.polling $(ARGS)

# What a task costs under each cache policy and through the normal API (the README's table).
cost: $(STAMP)
	$(BIN)/python -m benchmarks.cost $(ARGS)

# How long a run with stragglers takes with and without a deadline, and what the take-over costs.
deadline: $(STAMP)
	$(BIN)/python -m benchmarks.deadline $(ARGS)

# Letta 0.7.14 starting (and resuming) a batch run, beside make submit on the same machine, from an
# environment of its own: its pins clash with ours. Plain letta pulls a fastapi that breaks it, its
# routes import orjson without declaring it, and its mcp fails under a newer pydantic.
LETTA_VENV := .venv-letta
$(LETTA_VENV)/.installed:
	test -d $(LETTA_VENV) || $(PY) -m venv $(LETTA_VENV)
	$(LETTA_VENV)/bin/pip install --quiet 'letta[server]==0.7.14' orjson 'pydantic<2.12'
	touch $@

letta-side: $(LETTA_VENV)/.installed
	$(LETTA_VENV)/bin/python benchmarks/letta_side.py $(ARGS)

clean:
	rm -rf $(VENV) $(LETTA_VENV) .pytest_cache .mypy_cache .ruff_cache build dist
