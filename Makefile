# Two commands from a fresh clone: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the project with its test extras first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install system-deps test lint demo bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# The PostgreSQL store tests need a server binary; as root on Debian, install it when missing.
system-deps:
	@if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's postgresql for the PostgreSQL store tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else \
	    echo "note: PostgreSQL is not installed and cannot be installed here; its store tests will be skipped"; \
	  fi; \
	fi

test: $(STAMP) system-deps
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
