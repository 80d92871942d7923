# Two commands do all set-up (README.md):
#   make run    create the venv, migrate the SQLite file, start the server
#   make test   create the venv, install the test browser, run every test
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench clean chromium azurite

$(BIN)/.installed: pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q -e './client[aio]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py leasehold_setup
	@echo "Leasehold on http://$${LEASEHOLD_BIND:-127.0.0.1:10000}  (admin: /admin/)"
	exec $(BIN)/python -m config.serve

# The admin's browser test needs Debian's Chromium; install it if missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The client tests run against Azurite too: install it from npm into
# bench/node_modules (as the bench does) when missing.
azurite:
	@test -d bench/node_modules/azurite || \
	  (cd bench && npm install --no-audit --no-fund --no-package-lock --loglevel=error)

test: $(BIN)/.installed chromium azurite
	$(BIN)/pytest -q $(PYTEST_ARGS)

# Leasehold vs Azurite side by side on loopback (bench/README.md). Installs
# Azurite from npm into bench/node_modules when missing. BENCH_ARGS="--soak"
# for the 5-minute memory run; "--help" for the rest.
bench: $(BIN)/.installed
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var
