# shardq developer commands.  Port ranges never overlap, so a cluster left running by one
# never collides with another:  tests 7100-7110, demo 7200-7205, benchmarks 7300-7305.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARDQ := $(VENV)/bin/shardq
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
TEST_ARGS ?= -m "not slow"
BENCH_URL := redis://127.0.0.1:7300
BENCH_STANDALONE_URL := redis://127.0.0.1:7310
LOADTEST_ARGS ?= --shardq-duration 45
BENCH_ARGS ?=

.PHONY: install redis-server lint test test-all demo bench bench-cluster-up bench-cluster-down loadtest clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server missing: installing it from Debian's packages"; \
	  $(SUDO) apt-get update && $(SUDO) apt-get install -y redis-server; }

lint: install
	$(VENV)/bin/ruff check shardq tests bench loadtest
	$(VENV)/bin/ruff format --check shardq tests bench loadtest
	$(VENV)/bin/mypy shardq

# The test session starts its own cluster (7100-7105) and standalone node (7110) and stops
# them at the end.
test: install redis-server lint
	$(PY) -m pytest $(TEST_ARGS)

test-all: TEST_ARGS :=
test-all: test

demo: install redis-server
	$(SHARDQ) demo --base-port 7200

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
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
