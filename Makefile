# The two commands of the README: `make demo` and `make test`. Everything else is a helper of those.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPECDASH_VAR_DIR ?= $(CURDIR)/var

.PHONY: demo test lint install system-packages services clean

PIP_INSTALL := -m pip install --quiet --disable-pip-version-check -r requirements.txt
# Finished virtualenvs are kept here, one per Python and requirements.txt (as a CI cache keeps them): a fresh clone
# on a machine that has built one links .venv to it instead of installing for two minutes. The newest three are
# kept. Set it empty to build .venv inside the clone; a clone whose .venv is a real directory keeps it.
VENV_CACHE ?= $(HOME)/.cache/specdash/venvs
# mypy's cache, shared the same way: it checks every file's hash, so a cache written by another clone is safe.
MYPY_CACHE ?= $(HOME)/.cache/specdash/mypy

$(STAMP): requirements.txt
	@set -e; \
	if [ -n "$(VENV_CACHE)" ] && { [ ! -e $(VENV) ] || [ -L $(VENV) ]; } && mkdir -p "$(VENV_CACHE)" 2>/dev/null; then \
		key=$$({ python3 -c 'import sys; print(sys.version)'; cat requirements.txt; } | sha256sum | cut -c1-16); \
		cached="$(VENV_CACHE)/$$key"; \
		( flock 9; \
		  if [ ! -f "$$cached/.installed" ]; then \
			echo "installing requirements.txt into $$cached"; rm -rf "$$cached"; \
			python3 -m venv "$$cached" && "$$cached/bin/python" $(PIP_INSTALL) && touch "$$cached/.installed"; \
			ls -1dt "$(VENV_CACHE)"/*/ | tail -n +4 | xargs -r rm -rf; \
		  fi ) 9> "$(VENV_CACHE)/.lock"; \
		ln -sfn "$$cached" $(VENV); \
	else \
		test -x $(PY) || python3 -m venv $(VENV); \
		$(PY) $(PIP_INSTALL); \
	fi
	touch $(STAMP)

install: $(STAMP)

# What the tests need from Debian: a real OpenSSH sshd (the "GPU host") and headless chromium (browser tests).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-packages:
	@need=(); [ -x /usr/sbin/sshd ] || need+=(openssh-server); command -v chromium >/dev/null || need+=(chromium); \
	if [ $${#need[@]} -gt 0 ]; then \
		echo "installing $${need[*]} from Debian"; \
		$(SUDO) apt-get update -q || true; \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q "$${need[@]}"; \
	fi

# PostgreSQL and Redis are started by this machine kind; start them if they are down.
services:
	@pg_isready -h 127.0.0.1 -p 5432 -q || $(SUDO) pg_ctlcluster --skip-systemctl-redirect "$$(ls /etc/postgresql)" main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || $(SUDO) redis-server --daemonize yes --bind 127.0.0.1 -::1 \
		--port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/specdash.log
	@for _ in $$(seq 1 30); do \
		pg_isready -h 127.0.0.1 -p 5432 -q && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0; sleep 1; \
	done; echo "PostgreSQL or Redis did not come up"; exit 1

# The demo's secret key, readable by its owner only. The settings read it when SECRET_KEY is unset, so
# `manage.py createsuperuser` and friends work in this checkout without exporting it.
SECRET_KEY_FILE := $(SPECDASH_VAR_DIR)/secret_key
$(SECRET_KEY_FILE):
	mkdir -p "$(@D)"
	umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(50))' > "$@.tmp" && mv "$@.tmp" "$@"

demo: install services $(SECRET_KEY_FILE)
	@chmod 600 "$(SECRET_KEY_FILE)"  # (one written by an older checkout was world-readable)
	@redis-cli -u "$${REDIS_URL:-redis://127.0.0.1:6379/0}" ping >/dev/null 2>&1 || { echo "Redis is not answering at $${REDIS_URL:-redis://127.0.0.1:6379/0}; start it (see README)."; exit 1; }
	$(PY) manage.py demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --cache-dir "$(MYPY_CACHE)" experiments workers dashboard simhost
	@# The benches are scripts a person runs, not the suite's: type-checked so that one the code moved under (a
	@# renamed helper of another bench) fails here rather than when somebody next runs it.
	MYPYPATH=bench $(VENV)/bin/mypy --cache-dir "$(MYPY_CACHE)" --explicit-package-bases bench

# Tests run against PostgreSQL (the Celery worker subprocess must share the test database) and real Redis, in
# TEST_WORKERS parallel processes: most of the suite's time is spent waiting on simulated servers, not on the CPU.
# Each worker has its own test database, sshd, Celery queue and channel prefix; idle workers take tests from busy
# ones. The ten slowest tests are printed at the end. Tests marked `alone` (an estimate of wall-clock time judged
# against the wall clock: no test can make that independent of three busy neighbours) run after, by themselves.
# PYTHONDONTWRITEBYTECODE (set by some shells and CI images) is dropped for the run: with it no process keeps the
# bytecode it compiles, so each of the hundreds the suite starts (Celery workers, web servers, every simulated
# server and scheduler rank, every benchmark client, each xdist worker's assertion rewriting) compiles the
# project's modules from source again: ~0.4 CPU-s per Django process, 8 per xdist worker's collection.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/specdash
TEST_WORKERS ?= 4
test: install system-packages services
	$(MAKE) --no-print-directory lint
	export SECRET_KEY=test-only DATABASE_URL="$(TEST_DATABASE_URL)" REDIS_URL="$${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}"; \
		env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=10 -m "not alone"; \
		parallel=$$?; \
		env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q -p no:xdist -m alone; \
		alone=$$?; \
		[ $$parallel -eq 0 ] && [ $$alone -eq 0 ]

clean:
	rm -rf var/simhost-work var/simhost-state
