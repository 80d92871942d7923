# Two commands do all set-up (README.md):
#   make run    create the venv, migrate the SQLite file, start the server
#   make test   create the venv, install the test browser, run every test on
#               SQLite, then the database-facing ones on a throwaway PostgreSQL
#   make test-fast  the in-process tests only, while working (under a minute)
#   make test-ha    PostgreSQL failover under Patroni and etcd (a few minutes)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast test-big test-ha etcd test-setup checks bench docs clean debian chromium azurite promtool systemd-analyze legacy-sdk

# One install for the server, its test tools, PostgreSQL's driver (the
# `postgres` extra, for the second pass of `make test`) and the client, by uv
# (docs/decisions/0023), or by pip where uv cannot be had. The venv is made
# without pip (venv's own pip install is most of its time) and uv is fetched
# by the system's pip into .venv/uv; uv then installs pip too, for whoever
# wants .venv/bin/pip. Where the system has no pip, a venv with pip fetches uv.
INSTALL_ARGS := -e '.[test,postgres]' -e './client[aio]' pip
$(BIN)/.installed: pyproject.toml client/pyproject.toml
	{ { $(PYTHON) -m venv --clear --without-pip $(VENV) && \
	    $(PYTHON) -m pip install -q --disable-pip-version-check --target $(VENV)/uv uv 2>/dev/null && \
	    ln -sf ../uv/bin/uv $(BIN)/uv; } || \
	  { $(PYTHON) -m venv --clear $(VENV) && $(BIN)/pip install -q --disable-pip-version-check uv; } } && \
	  UV_LINK_MODE=copy $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python $(INSTALL_ARGS) || \
	{ $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q --disable-pip-version-check $(INSTALL_ARGS); }
	touch $@

run: $(BIN)/.installed
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py leasehold_setup
	exec $(BIN)/python -m config.serve

# Debian's packages the tests need, installed if missing, in one apt run:
# Chromium's headless shell (the admin's browser tests: Chromium's own
# engine and layout without the desktop browser's windows and UI,
# docs/development/tests.md), promtool (the alert rules in
# docs/deploy/, from the prometheus package), systemd-analyze (the unit
# file's check, from the systemd package), ss (a Unix socket's queue, read
# by the worker supervision tests; iproute2) and nginx (the reverse proxy of
# docs/guide/tls.md, run by tests/processes/test_nginx_proxy.py).
debian:
	@pkgs=""; \
	command -v chromium-headless-shell >/dev/null 2>&1 || pkgs="$$pkgs chromium-headless-shell"; \
	command -v promtool >/dev/null 2>&1 || pkgs="$$pkgs prometheus"; \
	command -v systemd-analyze >/dev/null 2>&1 || pkgs="$$pkgs systemd"; \
	command -v ss >/dev/null 2>&1 || pkgs="$$pkgs iproute2"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || pkgs="$$pkgs nginx"; \
	[ -z "$$pkgs" ] || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; }
chromium promtool systemd-analyze: debian

# The client tests and the bench run against Azurite too, and the SAS tests
# drive the JavaScript SDK (@azure/storage-blob). npm installs bench/package.json
# once per machine and content into the user's cache (about 55,000 files:
# most of a clean clone's set-up), and bench/node_modules links to it
# (docs/decisions/0023); where that cache cannot be written, into bench/ itself.
NODE_DEPS := $(shell cksum < bench/package.json | cut -d' ' -f1)
AZURITE_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/leasehold/node-$(NODE_DEPS)
NPM_INSTALL := npm install --no-audit --no-fund --no-package-lock --loglevel=error
azurite:
	@{ test -e bench/node_modules/azurite && test -e bench/node_modules/@azure/storage-blob; } || { \
	  { mkdir -p $(dir $(AZURITE_CACHE)) 2>/dev/null && \
	    { test -e $(AZURITE_CACHE)/node_modules/azurite || { \
	      tmp=$$(mktemp -d $(AZURITE_CACHE).XXXXXX) && cp bench/package.json $$tmp/ && \
	      (cd $$tmp && $(NPM_INSTALL)) && { mv -T $$tmp $(AZURITE_CACHE) 2>/dev/null || rm -rf $$tmp; }; }; } && \
	    rm -rf bench/node_modules && ln -s $(AZURITE_CACHE)/node_modules bench/node_modules; } || \
	  (cd bench && $(NPM_INSTALL)); }

# The database-facing modules (marked also_postgres, whole or the tests that
# reach the database: docs/development/tests.md), run a second time on
# PostgreSQL: a throwaway cluster tests/pg_cluster.py starts (installing
# Debian's postgresql package if missing) and removes. The rest (the pure state
# machine, SQLite's own machinery, the browser, the admin's scale data) is not
# repeated there, nor are the tests that need PostgreSQL whatever the run's
# database (marked postgres: several instances, a failover, the database's
# clock): they share a throwaway cluster of the run's (tests/pg_cluster.py) and
# mostly wait on it, so they run in the first pass, among its computing tests
# (docs/development/tests.md).
#
# In a full run (no PYTEST_ARGS, the default PG_TESTS) the pass is given the
# modules that name the marker, not the whole tests/ folder: its workers then
# import those modules alone (about 2 CPU-s less collection each, the same
# tests selected: docs/decisions/0046).
PG_DEFAULT := -m "also_postgres and not postgres"
PG_TESTS ?= $(PG_DEFAULT)
PG_MODULES = $(if $(FULL_RUN),$(shell grep -rl --include='test_*.py' also_postgres tests | sort))

# The SQLite pass: two workers more than the cores, since about half of its
# test time is spent waiting (server processes starting and stopping,
# real-time lease expiry on Azurite, the browser), and work stealing, since a
# few tests take tens of seconds and the default split left one worker idle
# for that long at the end. The PostgreSQL pass, which runs after it, one
# worker a core: its server takes the spare CPU there (docs/development/tests.md).
CORES := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
TEST_WORKERS ?= $(shell echo $$(( $(CORES) + 2 )))
PG_WORKERS ?= $(CORES)

# The legacy Python SDK (azure-storage-blob 1.x, x-ms-version 2018-03-28), which
# third-party lease clients still use, beside the venv and not in it (it shares
# the azure.storage.blob package name): tests/azure/test_azure_legacy_sdk.py
# runs it in a process of its own.
LEGACY_SDK := $(VENV)/legacy-sdk
LEGACY_PINS := azure-storage-blob==1.5.0 azure-storage-common==1.4.2 azure-common==1.1.28
$(LEGACY_SDK)/.installed: $(BIN)/.installed
	rm -rf $(LEGACY_SDK)
	{ test -x $(BIN)/uv && $(BIN)/uv pip install -q --python $(BIN)/python --target $(LEGACY_SDK) $(LEGACY_PINS); } || \
	  $(BIN)/python -m pip install -q --disable-pip-version-check --target $(LEGACY_SDK) $(LEGACY_PINS)
	touch $@
legacy-sdk: $(LEGACY_SDK)/.installed

# What the tests need, the independent parts side by side (the venv, npm,
# apt): on a clean clone that is most of a minute otherwise.
test-setup: $(BIN)/.installed debian azurite legacy-sdk

# The checks that need no server: the docs site, the linter, the type
# checker, the alert rules and their unit tests.
#
# mypy keeps its cache in the user's cache, as npm does, so that a clean clone
# on the same machine checks warm: it trusts a cached module only while the
# source's hash is the same. Where that cache cannot be written, .mypy_cache.
MYPY_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/leasehold/mypy
checks: $(BIN)/.installed debian
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/ruff check --quiet .
	MYPY_CACHE_DIR=$$(mkdir -p $(MYPY_CACHE) 2>/dev/null && echo $(MYPY_CACHE) || echo .mypy_cache) $(BIN)/mypy
	promtool check rules docs/deploy/prometheus-rules.yml >/dev/null
	promtool test rules docs/deploy/prometheus-rules.test.yml >/dev/null

# A full run (no PYTEST_ARGS, the default PG_TESTS) fails if either pass
# selected no test (pytest exits 5), and, by LEASEHOLD_FULL_RUN
# (tests/skips.py), if a test is skipped for a reason the docs do not justify.
# A PYTEST_ARGS subset without database-facing tests leaves the PostgreSQL pass
# empty, which is fine; a run in which neither pass selected anything is not.
# -rs prints every skip's reason.
#
# The SQLite pass, then the PostgreSQL pass, each printing as it goes; the
# checks run beside the SQLite pass, their output kept in .venv/ and printed
# only if they failed. One pass at a time, not side by side: no slower, and
# less CPU (docs/development/tests.md).
#
# Bytecode is written even where the environment asks Python not to: without
# it every test process compiles our modules and pytest rewrites the
# asserts of hypothesis's and schemathesis's modules anew, which doubles each
# worker's start (docs/development/tests.md).
FULL_RUN = $(if $(strip $(PYTEST_ARGS))$(subst $(PG_DEFAULT),,$(PG_TESTS)),,1)
test: export PYTHONDONTWRITEBYTECODE =
test: export LEASEHOLD_FULL_RUN = $(FULL_RUN)
test:
	$(MAKE) --no-print-directory -j3 test-setup
	set +e; empty=$(if $(FULL_RUN),0,5); \
	$(MAKE) --no-print-directory checks > $(VENV)/checks.log 2>&1 & checks=$$!; \
	$(BIN)/pytest -q -rs --durations=25 -n $(TEST_WORKERS) --dist worksteal -m "not big and not ha" $(PYTEST_ARGS); a=$$?; \
	echo "==== the PostgreSQL pass"; \
	$(BIN)/python tests/pg_cluster.py $(BIN)/pytest -q -rs --durations=25 -n $(PG_WORKERS) $(PG_TESTS) $(PG_MODULES) $(PYTEST_ARGS); b=$$?; \
	wait $$checks; c=$$?; \
	[ $$c -eq 0 ] || { cat $(VENV)/checks.log; echo "make test: the checks failed"; exit $$c; }; \
	[ $$a -eq 0 ] || [ $$a -eq $$empty ] || { [ $$a -ne 5 ] || echo "make test: the SQLite pass selected no test"; exit $$a; }; \
	[ $$b -eq 0 ] || [ $$b -eq $$empty ] || { [ $$b -ne 5 ] || echo "make test: the PostgreSQL pass selected no test"; exit $$b; }; \
	[ $$a -eq 0 ] || [ $$b -eq 0 ] || { echo "make test: no test selected"; exit 5; }

# The quick pass while working (tests/README.md): on SQLite, in this process,
# without server processes (tests/processes/, Azurite's tests/client/), the
# browser, PostgreSQL, or the slow scale and fuzz runs.
FAST_SKIP := -m "not processes and not browser and not postgres and not slow" \
	--ignore=tests/processes --ignore=tests/client
# One worker more than the cores of the machine it was chosen on (2): the tests
# wait on fsync about as much as they compute (docs/development/tests.md).
FAST_WORKERS ?= 3

test-fast: export PYTHONDONTWRITEBYTECODE =
test-fast: $(BIN)/.installed
	$(BIN)/pytest -q -n $(FAST_WORKERS) --dist worksteal $(FAST_SKIP) $(PYTEST_ARGS)

# The tests too big for make test's 5 minutes (marked big: a 1 GiB upload in
# the SDK's blocks, the server's memory watched), on SQLite.
test-big: $(BIN)/.installed
	$(BIN)/pytest -q -rs -m big $(PYTEST_ARGS)

# Failover without a human (docs/deploy/patroni.md): two PostgreSQL nodes
# under Patroni with etcd, two server instances, the primary killed, hung and
# switched over (marked ha; tests/processes/test_patroni_failover.py). etcd is
# Debian's etcd-server, installed if missing; Patroni goes into a venv of its
# own, .venv/ha, on Debian's Python: it runs as the user PostgreSQL runs as
# (postgres, under root), who cannot read root's own Python. Compiled to
# bytecode, as pip and Debian's package leave it: that user cannot write
# __pycache__ there, and Patroni starts every postmaster from a fresh Python
# that would compile its imports each time (seconds of a failover).
HA_PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo $(PYTHON))
PATRONI_REQ := patroni[psycopg3,etcd3]==4.1.5
$(VENV)/ha/.installed-compiled: $(BIN)/.installed
	{ $(BIN)/uv venv -q --allow-existing --python $(HA_PYTHON) $(VENV)/ha && \
	  UV_LINK_MODE=copy $(BIN)/uv pip install -q --compile-bytecode --python $(VENV)/ha/bin/python '$(PATRONI_REQ)'; } || \
	{ $(HA_PYTHON) -m venv --clear $(VENV)/ha && $(VENV)/ha/bin/pip install -q '$(PATRONI_REQ)'; }
	$(VENV)/ha/bin/python -m compileall -q $(VENV)/ha/lib >/dev/null
	touch $@

etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; }

test-ha: export PYTHONDONTWRITEBYTECODE =
test-ha: $(BIN)/.installed $(VENV)/ha/.installed-compiled etcd
	$(BIN)/pytest -q -rs -p no:randomly -m ha tests/processes/test_patroni_failover.py $(PYTEST_ARGS)

# Leasehold vs Azurite side by side on loopback (bench/README.md). Installs
# Azurite from npm into bench/node_modules when missing. BENCH_ARGS="--soak"
# for the 5-minute memory run; "--help" for the rest. Then Leasehold on
# SQLite against PostgreSQL with one and two instances, paired in one run
# (bench/pg_cycle.py, on a throwaway durable cluster; PG_BENCH_ARGS, e.g.
# "--rounds 5 --statements").
PG_BENCH_ARGS ?= --only sqlite,pg-1,pg-1-alone,pg-2
bench: $(BIN)/.installed azurite
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python bench/pg_cycle.py $(PG_BENCH_ARGS)

# The docs/ site (MkDocs) into var/site; `.venv/bin/mkdocs serve` to browse it while writing.
docs: $(BIN)/.installed
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) var
