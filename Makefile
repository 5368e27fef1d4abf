# The two commands a newcomer needs: `make run` and `make test`. See README.md.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-stores install clean

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || "$$(bin/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)

# Serves the dashboard with demo data on the embedded defaults (SQLite, filesystem broker, file cache).
run: $(STAMP)
	bin/run

# The whole suite against PostgreSQL, with Celery integration tests on a real worker and broker.
test: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	redis_url=$$(bin/ensure-redis); \
	bin/ensure-chromium; \
	echo "Testing against $$db_url (redis: $${redis_url:-none})"; \
	broker=$${redis_url:+$$redis_url/15}; cache=$${redis_url:+$$redis_url/13}; \
	DATABASE_URL="$$db_url" REDIS_URL="$$redis_url" CELERY_BROKER_URL="$${broker:-filesystem://}" \
	CACHE_URL="$${cache:-locmem://}" VECTOR_INDEX_PATH="$(CURDIR)/var/test/vectors" \
	CELERY_TASK_DEFAULT_QUEUE="tests-$$$$" CACHE_KEY_PREFIX="tests-$$$$" VAR_DIR="$(CURDIR)/var/test" $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .

# Benchmarks print figures; they never assert timings. BENCH_RECORDS scales the generated data.
bench: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench" $(PY) bench/run.py $(BENCH_ARGS)

# Derived stores and deletion figures: propagation, vector search, deleting a large subject.
bench-stores: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_stores" $(PY) bench/stores.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var
