# Two commands for a newcomer: `make demo` and `make test`. Both install first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST_TIMEOUT ?= 300

.PHONY: install demo test test-fast test-slow lint typecheck tools bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py $(wildcard timetravel/*/_speedups*.[ch])
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# tmux drives the real TUI in the end-to-end tests; install it when it is missing.
tools:
	@command -v tmux >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq tmux >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq tmux >/dev/null; fi; }

# The demo: a 16-rank training job whose replicas drift apart after a bit flip at 984.8 ms (exit 1 is
# the expected failure; anything else means the demo seed needs re-finding: docs/scenarios/dp_training.md),
# recorded, then opened in the time-travel debugger (a summary instead when stdout is not a terminal).
# A recording is never replaced without --force (its branches would be lost): once the demo is
# recorded, `make demo` opens the recording it made (with your branches); `make demo FORCE=1` records
# it afresh.
DEMO_RECORDING := recordings/dp_training-demo.ttr
demo: install
	@if [ -e $(DEMO_RECORDING) ] && [ -z "$(FORCE)" ]; then \
	  echo "$(DEMO_RECORDING) exists: opening it (make demo FORCE=1 records it afresh)"; \
	else \
	  $(BIN)/timetravel run dp_training --set preset=demo --record $(DEMO_RECORDING) $(if $(FORCE),--force); \
	  test $$? -eq 1; \
	fi
	$(BIN)/timetravel tui $(DEMO_RECORDING)

lint: install
	$(BIN)/ruff check timetravel tests
	$(BIN)/ruff format --check timetravel tests

typecheck: install
	$(BIN)/mypy timetravel

# The whole suite: lint, types, fast tests, then a bounded selection of slow tests.
test: install tools lint typecheck
	$(BIN)/python -m pytest -q --timeout=$(PYTEST_TIMEOUT)
	TIMETRAVEL_SLOW=ci $(BIN)/python -m pytest -q -m slow --timeout=$(PYTEST_TIMEOUT)

test-fast: install
	$(BIN)/python -m pytest -q -x --timeout=$(PYTEST_TIMEOUT)

# The slow tests at full size (more seeds, bigger clusters): not part of CI.
test-slow: install
	TIMETRAVEL_SLOW=full $(BIN)/python -m pytest -q -m slow --timeout=3600

bench: install
	$(BIN)/timetravel bench kernel

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
