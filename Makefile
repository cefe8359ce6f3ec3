# Two commands from a fresh clone: `make demo` and `make test`. Each creates .venv when it is
# missing and installs the project with its test extras first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install system-deps test check docs lint demo bench clean

$(STAMP): pyproject.toml
	@echo "[set-up 1/2] creating $(VENV) (a few seconds)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "[set-up 2/2] installing streamanon and its dependencies into $(VENV) (1 to 4 minutes on a fresh machine; pip's own progress follows)"
	$(BIN)/python -m pip install --progress-bar on -e '.[test,docs]'
	@echo "[set-up] the risk extra (anonymeter's attacks in the report): anonymeter without its numpy < 1.27 and pyarrow < 22 pins, which would take numpy back to 1.26 (it runs on numpy 2: tests/test_attacks.py)"
	$(BIN)/python -m pip install --progress-bar on 'polars>=1.8'
	$(BIN)/python -m pip install --progress-bar on --no-deps 'anonymeter>=1.1'
	@echo "[set-up] compiling the numba kernels into numba's cache (about a minute once), so that the first run loads them instead of compiling them (python -m streamanon.warmup)"
	$(BIN)/python -m streamanon.warmup
	touch $(STAMP)
	@echo "[set-up] done: $(VENV) is ready"

install: $(STAMP)

# Debian packages the tests need, installed when missing (as root, with apt-get):
# postgresql (the PostgreSQL store tests), chromium (the dashboard browser test), prometheus
# (promtool, which checks deploy/prometheus.yml), a Java 17 runtime and Maven (Apache Kafka's
# broker, fetched from Maven Central by deploy/kafka/pom.xml: the Kafka integration tests).
SYSTEM_PACKAGES := postgresql:pg_ctl chromium:chromium prometheus:promtool \
	openjdk-17-jre-headless:java maven:mvn

system-deps:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
	  pkg=$${pair%%:*}; cmd=$${pair##*:}; \
	  if ! command -v $$cmd >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/$$cmd >/dev/null 2>&1; then \
	    missing="$$missing $$pkg"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "[set-up] installing Debian packages for the tests:$$missing (1 to 3 minutes; apt-get is quiet)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "error: the tests need the Debian packages$$missing; install them (as root: apt-get install$$missing)"; exit 1; \
	  fi; \
	fi

# The two suites run the same tests. `make test` runs all of them (CI runs it through .ci/run);
# `make check`, the fast inner loop, leaves out those that need a broker, PostgreSQL, a browser,
# a Dask cluster or a child process (the markers follow from the fixtures a test uses:
# tests/conftest.py) and the few marked `heavy` (seconds of computation each). Both run the
# doctests and ruff. PYTEST_ARGS passes options on.
FAST := not (kafka or postgres or browser or dask or process or heavy)
PYTEST_ARGS ?=
# The full suite waits on brokers, servers and child processes about half of the time, so it
# runs two workers a core; the fast suite computes, one a core.
# (nproc would follow OMP_NUM_THREADS, which a test run sets: count the usable cores instead)
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * len(os.sched_getaffinity(0)))')

test: $(STAMP) system-deps
	@echo "[test 1/5] ruff: style and import checks (seconds)"
	$(BIN)/ruff check streamanon scheduler tests simulations
	@echo "[test 2/5] Apache Kafka's broker, from Maven Central into .cache/ (once: seconds to a minute; nothing after)"
	$(BIN)/python -m simulations.apache_kafka fetch
	@echo "[test 3/5] the numba kernels into numba's cache (seconds: the set-up compiled them; again only what changed since), so that the test workers load them instead of each compiling them"
	$(BIN)/python -m streamanon.warmup
	@echo "[test 4/5] pytest: every test but the speed claims, the docs build and the doctests, $(TEST_WORKERS) workers (about 10 minutes on two cores)"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not measuring" $(PYTEST_ARGS)
	@echo "[test 5/5] pytest: the speed claims, alone on the machine (about two minutes: a claim measured beside other tests measures them too)"
	$(BIN)/python -m pytest -m measuring $(PYTEST_ARGS)

check: $(STAMP)
	@echo "[check 1/2] ruff: style and import checks (seconds)"
	$(BIN)/ruff check streamanon scheduler tests simulations
	@echo "[check 2/2] pytest: the fast suite, no broker, PostgreSQL, browser, Dask or child process (about 2 minutes on two cores)"
	$(BIN)/python -m pytest -n auto --dist worksteal -m "$(FAST)" $(PYTEST_ARGS)

# The documentation site (MkDocs), built as the tests build it: a warning is an error.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check streamanon scheduler tests simulations

# DEMO_ARGS and BENCH_ARGS pass options on, e.g. `make demo DEMO_ARGS="--linger 600"` or
# `make bench BENCH_ARGS="--sizes 5000,20000 --repeat 1"`; the tests run both targets this way.
DEMO_OUT ?= demo-output
DEMO_ARGS ?=
BENCH_OUT ?= simulations/results/bench_mdav.json
BENCH_ARGS ?=

demo: $(STAMP)
	@echo "[demo] streamanon demo: calibration first (seconds; the numba kernels were compiled at set-up), then about three minutes of survey"
	$(BIN)/streamanon demo --out $(DEMO_OUT) $(DEMO_ARGS)

bench: $(STAMP)
	$(BIN)/python -m simulations.bench_mdav --out $(BENCH_OUT) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
