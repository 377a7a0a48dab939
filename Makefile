# Targets are the ones the README names. Everything runs from a project-local .venv built from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run fake-llm test lint soak bench docs systemd-check clean

$(BIN)/memgate: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@touch $@

$(VENV)/.dev: $(BIN)/memgate
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

run: $(BIN)/memgate
	$(BIN)/memgate chat

# The fake OpenAI-compatible server the tests use, to try memgate with no LLM (README, First run).
fake-llm: $(BIN)/memgate
	$(BIN)/python -m tests.fakes.llm --port 8000

# Synapse, the real homeserver the Matrix tests run against, pins many libraries of its own, so
# it gets a virtualenv of its own, built once and then kept (`make clean` removes it).
SYNAPSE_VENV := .venv-synapse
$(SYNAPSE_VENV)/.built:
	$(PYTHON) -m venv $(SYNAPSE_VENV)
	$(SYNAPSE_VENV)/bin/pip install --quiet 'matrix-synapse==1.163.2'
	@touch $@

# -n auto is one and a half workers a core (tests/conftest.py says why). The bytecode is written
# first because each test's child process would otherwise compile every module of ours again
# where PYTHONDONTWRITEBYTECODE is set (as in many containers).
test: lint $(SYNAPSE_VENV)/.built
	$(BIN)/python -m compileall -q gateway channels memory tests
	$(BIN)/python -m pytest -n auto

# One mypy run for the packages, tests/ and bench/ (two runs with different options would each
# invalidate the other's cache); pyproject.toml relaxes three of --strict's rules for bench/.
lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict gateway memory channels tests bench --exclude 'bench/\.venv-.*'

# The long runs: the crash test with 20 kills (make test runs 3), then bench.soak's 100 kills and
# 120 injected faults (together about 7 minutes).
soak: $(VENV)/.dev
	MEMGATE_CRASH_KILLS=20 $(BIN)/python -m pytest tests/resilience/test_crash.py
	$(BIN)/python -m bench.soak

bench: $(VENV)/.dev
	$(BIN)/python -m bench

# docs/configuration.md from the config models (a test fails while it is out of date).
docs: $(VENV)/.dev
	$(BIN)/python -m gateway.config.reference

# deploy/memgate.service under a real systemd in a Debian 12 container (root; prints
# "systemd-check skipped: <reason>" where the container cannot be had). See docs/service.md.
systemd-check:
	deploy/systemd-check/run.sh

clean:
	rm -rf $(VENV) $(SYNAPSE_VENV) build dist *.egg-info
