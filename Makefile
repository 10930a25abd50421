# Two commands matter: `make demo` and `make test`. Both build .venv first:
# the demo with only what it needs (the `demo` extra: the core and the viewer),
# the tests with everything they exercise (the `test` extra), and the browser
# the viewer's browser tests drive (scripts/browser-setup.sh says what it does).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
PHOENIX_VENV := .venv-phoenix

.PHONY: demo test lint typecheck unit coverage e2e reliability bench browser clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing loopscribe and its viewer into $(VENV) (the demo extra)"
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing loopscribe with every extra the tests exercise into $(VENV) (the test extra)"
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(DEMO_STAMP)

browser:
	@sh scripts/browser-setup.sh

demo: $(DEMO_STAMP)
	$(BIN)/python examples/quickstart.py
	@echo "loopscribe is installed in $(VENV): run it as $(BIN)/loopscribe, or type"
	@echo "'source $(BIN)/activate' once and then just 'loopscribe --help'."

lint: $(STAMP)
	@stray=$$(git ls-files --cached --others --exclude-standard 2>/dev/null | grep -E '\.(orig|rej|bak|swp)$$'); \
	if [ -n "$$stray" ]; then echo "stray files (merge or editor leftovers), remove them: $$stray"; exit 1; fi
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# One pytest worker per core, at most four.
UNIT := --ignore=tests/e2e --ignore=tests/reliability -n auto --maxprocesses=4

unit: $(STAMP)
	$(BIN)/pytest $(UNIT)

# The unit suite again, measuring which lines and branches it runs.
coverage: $(STAMP)
	$(BIN)/pytest $(UNIT) --cov --cov-report=term:skip-covered

# lint, typecheck and unit are independent: run side by side, output kept per target.
# mypy and ruff keep their caches (.mypy_cache, .ruff_cache), so a second run is quick.
test: $(STAMP) browser
	@$(MAKE) --no-print-directory --output-sync=target -j3 lint typecheck unit

# End to end against real trace backends: Arize Phoenix (in its own venv), and
# Jaeger v2 fed by the OpenTelemetry Collector running collector-config/, both
# built from their Go modules (needs Go; cached outside the repository, so only
# the first run builds).
e2e: $(STAMP)
	PYTHON=$(PYTHON) bash scripts/e2e-setup.sh $(PHOENIX_VENV)
	@set -e; programs="$$(bash scripts/build-otel-programs.sh)"; \
	echo "e2e: Jaeger and Collector: $$(echo $$programs)"; \
	LOOPSCRIBE_PHOENIX=$(PHOENIX_VENV)/bin/phoenix \
	LOOPSCRIBE_JAEGER="$$(echo "$$programs" | sed -n 1p)" \
	LOOPSCRIBE_OTELCOL="$$(echo "$$programs" | sed -n 2p)" \
	$(BIN)/pytest tests/e2e

# Speed and memory targets (not tests): each prints ratios against a baseline
# measured in the same run.
# Faults, load and collector outages; the crash loop at 1,000 kills; the
# reader under atheris for a bounded minute.
reliability: $(STAMP)
	LOOPSCRIBE_FUZZ_EXAMPLES=10000 $(BIN)/pytest tests/reliability
	LOOPSCRIBE_CRASH_KILLS=1000 $(BIN)/pytest tests/test_crash.py
	$(BIN)/python fuzz/read_fuzzer.py -max_total_time=60

bench: $(STAMP)
	$(BIN)/python benchmarks/record.py
	$(BIN)/python benchmarks/read.py
	$(BIN)/python benchmarks/bridge.py
	$(BIN)/python benchmarks/workspace.py
	$(BIN)/python benchmarks/importers.py
	$(BIN)/python benchmarks/store.py
	$(BIN)/python benchmarks/viewer.py
	$(BIN)/python benchmarks/follow.py
	$(BIN)/python benchmarks/redact.py
	$(BIN)/python benchmarks/claude_agent_sdk_store.py
	$(BIN)/python benchmarks/growth.py
	$(BIN)/python benchmarks/intake.py
	$(BIN)/python benchmarks/instrument.py
	$(BIN)/python benchmarks/stats_cost.py
	$(BIN)/python benchmarks/collector_down.py

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .mypy_cache .pytest_cache .ruff_cache
