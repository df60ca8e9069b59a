# The two commands of the README: `make demo` and `make test`. Everything else is a helper of those.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPECDASH_VAR_DIR ?= $(CURDIR)/var

.PHONY: demo test lint install services clean

$(STAMP): requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

var/secret_key:
	mkdir -p var
	$(PY) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@

demo: install var/secret_key
	@redis-cli -u "$${REDIS_URL:-redis://127.0.0.1:6379/0}" ping >/dev/null 2>&1 || { echo "Redis is not answering at $${REDIS_URL:-redis://127.0.0.1:6379/0}; start it (see README)."; exit 1; }
	SECRET_KEY="$$(cat var/secret_key)" $(PY) manage.py demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy experiments workers dashboard simhost

# Tests run against PostgreSQL (the Celery worker subprocess must share the test database) and real Redis.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/specdash
test: install
	$(MAKE) --no-print-directory lint
	SECRET_KEY=test-only DATABASE_URL="$(TEST_DATABASE_URL)" REDIS_URL="$${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}" \
		$(VENV)/bin/pytest -q

clean:
	rm -rf var/simhost-work var/simhost-state
