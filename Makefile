# Two commands from a fresh clone: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the project with its test extras first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check streamanon scheduler tests simulations
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check streamanon scheduler tests simulations

demo: $(STAMP)
	$(BIN)/streamanon demo --dir demo-output

bench: $(STAMP)
	$(BIN)/python simulations/bench_mdav.py

clean:
	rm -rf $(VENV) demo-output .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
