# The two commands a newcomer needs: `make run` and `make test`. See README.md and docs/.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# One layer of the suite alone: `make test LAYER=memory` (or `make test-sqlite LAYER=memory`) runs tests/memory only.
# The layers are the folders of tests/ (accounts, memory, derived, deletion, api, dashboard, integrations,
# conformance, ops, lib; tests/README.md), so CI can run them side by side: each layer gets its own TEST_VAR
# (var/test-<layer>) and, under `make test`, its own PostgreSQL database (<name>_<layer>, so test_<name>_<layer>).
# Unset, the whole suite runs. PYTEST_ARGS still narrows it further (a file, -k, -x).
LAYER ?=
TEST_PATHS := $(if $(LAYER),tests/$(LAYER))
# Where a test run keeps its files (vector index, broker folders); give each parallel run its own.
TEST_VAR ?= $(CURDIR)/var/test$(if $(LAYER),-$(LAYER))
# Test processes (pytest-xdist) for `make test` and `make test-sqlite`; each gets its own test database, VAR_DIR
# subfolder, Celery queue and cache key prefix (tests/support/workers.py). TEST_WORKERS=0 runs in this one process.
TEST_WORKERS ?= 2

.PHONY: run test test-prepared test-sqlite smoke deploy-check lint bench bench-stores bench-load bench-mcp bench-onboarding bench-stale-stats bench-integrations bench-growth soak install clean

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || "$$(bin/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	@touch $(STAMP)

install: $(STAMP)

# Serves the dashboard with demo data on the embedded defaults (SQLite, filesystem broker, file cache).
run: $(STAMP)
	bin/run

# LAYER must name a folder of tests/ (a typo would otherwise run nothing, or everything).
check-layer = if [ -n "$(LAYER)" ] && [ ! -f "tests/$(LAYER)/__init__.py" ]; then \
	echo "LAYER=$(LAYER): no tests/$(LAYER)/; one of: $$(cd tests && ls -d */ | grep -v support | tr -d / | xargs)" >&2; \
	exit 2; fi;

# The whole suite against PostgreSQL, with Celery integration tests on a real worker and broker. The test
# database is created and migrated as the owner ($DATABASE_URL's role); the tests, the live servers and the
# workers then connect as the non-owner app role bin/ensure-app-role creates, under row-level security.
test: $(STAMP)
	@set -euo pipefail; \
	$(check-layer) \
	db_url=$$(bin/ensure-postgres); \
	if [ -n "$(LAYER)" ]; then db_url="$${db_url%%\?*}_$(LAYER)$${db_url#"$${db_url%%\?*}"}"; fi; \
	app_role=$$(bin/ensure-app-role "$$db_url"); \
	redis_url=$$(bin/ensure-redis); \
	bin/ensure-chromium; \
	echo "Testing against $$db_url as role $$app_role (redis: $${redis_url:-none})"; \
	broker=$${redis_url:+$$redis_url/15}; cache=$${redis_url:+$$redis_url/13}; \
	DATABASE_APP_ROLE="$$app_role" DATABASE_APP_ROLE_TRUNCATE=1 \
	DATABASE_URL="$$db_url" REDIS_URL="$$redis_url" CELERY_BROKER_URL="$${broker:-filesystem://}" \
	CACHE_URL="$${cache:-locmem://}" VECTOR_INDEX_PATH="$(TEST_VAR)/vectors" \
	CELERY_TASK_DEFAULT_QUEUE="tests-$$$$" CACHE_KEY_PREFIX="tests-$$$$" VAR_DIR="$(TEST_VAR)" $(PY) -m pytest -n $(TEST_WORKERS) $(TEST_PATHS) $(PYTEST_ARGS)

# The write, read and deletion paths again with prepared statements (docs/deploying.md, step 8): values sent
# apart from the SQL, and each statement prepared from its second run on a connection, so SQL PostgreSQL cannot
# type, or a plan that does not hold for the next tenant, fails here.
PREPARED_TESTS := tests/memory/test_cas_write_path.py tests/memory/test_cas_race.py \
	tests/memory/test_assert_fact_decision_order.py tests/memory/test_read_paths.py tests/memory/test_facts_current.py \
	tests/memory/test_as_of_both_axes.py tests/memory/test_future_effective.py \
	tests/memory/test_history_and_curation.py tests/memory/test_batch_onboarding.py \
	tests/memory/test_batch_set_based_writes.py tests/lib/test_rows_instances.py tests/deletion/test_four_stages.py \
	tests/deletion/test_set_based_acceptance.py tests/accounts/test_tenant_isolation.py tests/accounts/test_rls.py \
	tests/memory/test_stats.py tests/memory/test_counts_by_statement.py tests/memory/test_recheck_claim_due.py \
	tests/api/test_fuzzed_requests_match_schema.py tests/deletion/test_record_hide.py \
	tests/deletion/test_tombstone_lift.py tests/api/test_record_rows.py
test-prepared: $(STAMP)
	DB_SERVER_SIDE_BINDING=1 DB_PREPARE_THRESHOLD=1 $(MAKE) --no-print-directory test \
		PYTEST_ARGS="$(PYTEST_ARGS) $(PREPARED_TESTS)"

# The suite on the embedded defaults `make run` uses: SQLite (a file under TEST_VAR, so the worker process the
# celery tests start opens it too), the filesystem broker (folders under TEST_VAR) and a file cache. Tests
# marked postgres_only are skipped with their reason.
test-sqlite: $(STAMP)
	@set -euo pipefail; \
	$(check-layer) \
	bin/ensure-chromium; \
	rm -rf "$(TEST_VAR)/broker" "$(TEST_VAR)/cache" "$(TEST_VAR)/vectors" "$(TEST_VAR)"/gw*/{broker,cache,vectors}; \
	mkdir -p "$(TEST_VAR)"; \
	echo "Testing against SQLite in $(TEST_VAR) (broker: filesystem)"; \
	DATABASE_URL="sqlite:///$(TEST_VAR)/db.sqlite3" CELERY_BROKER_URL="filesystem://" \
	CACHE_URL="file://$(TEST_VAR)/cache" VECTOR_INDEX_PATH="$(TEST_VAR)/vectors" \
	CELERY_TASK_DEFAULT_QUEUE="tests-$$$$" CACHE_KEY_PREFIX="tests-$$$$" VAR_DIR="$(TEST_VAR)" $(PY) -m pytest -n $(TEST_WORKERS) $(TEST_PATHS) $(PYTEST_ARGS)

# The newcomer's path over HTTP: `bin/run` on a throwaway var/, every page as each demo human, the API,
# and a subject deletion followed to purge confirmation (bin/smoke.py).
smoke: $(STAMP)
	$(PY) bin/smoke.py

# docs/deploying.md run as written (its marked blocks, read from that page) on a throwaway database, roles and
# ports, then driven over HTTP: sign-in, two tenants, raw SQL as the app role, a recheck by beat, a deletion.
deploy-check: $(STAMP)
	$(PY) bin/deploy_check.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	DJANGO_SETTINGS_MODULE=memory_admin.settings $(VENV)/bin/lint-imports

# Benchmarks print figures; they never assert timings. BENCH_RECORDS scales the generated data.
bench: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench" $(PY) bench/run.py $(if $(BENCH_RECORDS),--records $(BENCH_RECORDS)) $(BENCH_ARGS)

# The growth curve: the same read and write figures at 1M, 10M and 30M records, one database each, generated once
# and kept (bench/growth.py, docs/scaling.md). ~30 GiB and ~1 h the first time; BENCH_ARGS="--measure-only" after.
bench-growth: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/postgres" nice -n 10 $(PY) bench/growth.py $(BENCH_ARGS)

# The scale-out soak under faults (bench/soak.py; issue 36, item 2): its own PostgreSQL cluster, Redis, two gunicorn
# instances behind a small proxy, two workers and beat on loopback; agents, an owner and compliance under load while a
# worker, Redis, PostgreSQL and a web instance fail in turn; then every acknowledged write checked in the database.
# At most 10 minutes; not in CI (too heavy). Its last line is the verdict; non-zero exit when anything is bad.
soak: $(STAMP)
	$(PY) bench/soak.py $(SOAK_ARGS)

# Derived stores and deletion figures: propagation, vector search, deleting a large subject.
bench-stores: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_stores" $(PY) bench/stores.py $(BENCH_ARGS)

# The agent's read path through gunicorn under a 16-client load, next to the stack's ceiling (bench/load.py).
bench-load: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench" $(PY) bench/load.py $(BENCH_ARGS)

# Bulk onboarding: facts/s through the batch door (new facts, supersessions) next to COPY (bench/onboarding.py).
bench-onboarding: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_onboarding" $(PY) bench/onboarding.py $(BENCH_ARGS)

# The audit chain's cost: one audited write chained vs unchained, the seal's CPU, bulk writes, and verifying the
# whole chain (bench/audit_chain.py, docs/security.md "Audit chain").
.PHONY: bench-audit
bench-audit: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_audit" $(PY) bench/audit_chain.py $(BENCH_ARGS)

# A read by memory_id for a tenant that has just imported into a large table, before and after the product's
# refresh of the planner's statistics (bench/stale_statistics.py; issue 36, item 4).
bench-stale-stats: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_stats" $(PY) bench/stale_statistics.py $(BENCH_ARGS)

# Answers rendered by their declared serializer fields vs the hand-built rows kept on hot paths, and what lib/rows.py
# and lib/prepared.py save against Django's own path, CPU only, no database (bench/serializers.py,
# docs/hand-built-rows.md).
.PHONY: bench-serializers
bench-serializers: $(STAMP)
	$(PY) bench/serializers.py $(BENCH_ARGS)

# What a decision receipt (signed, chained) costs the read for acting: with / without, alternating (bench/receipts.py).
.PHONY: bench-receipts
bench-receipts: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_receipts" $(PY) bench/receipts.py $(BENCH_ARGS)

# The MCP tool `recall` over Streamable HTTP next to the API call it wraps (bench/mcp_recall.py).
bench-mcp: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_mcp" $(PY) bench/mcp_recall.py $(BENCH_ARGS)

# GovernedStore.get and .search (k=10, 100k records) next to the API calls they wrap (bench/integrations.py).
bench-integrations: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_integrations" $(PY) bench/integrations.py $(BENCH_ARGS)

# What policing the link tables through their parents costs the write path, as the app role (bench/link_policies.py).
.PHONY: bench-rls
bench-rls: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	app_role=$$(bin/ensure-app-role "$$db_url"); \
	BENCH_APP_ROLE="$$app_role" DATABASE_URL="$${db_url%/*}/memory_admin_bench_rls" $(PY) bench/link_policies.py $(BENCH_ARGS)

# Sealed values (crypto-shredding): writes and reads with sealing on against off, as ratios (bench/sealing.py).
.PHONY: bench-sealing
bench-sealing: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_sealing" $(PY) bench/sealing.py $(BENCH_ARGS)

# Vector search at 1M vectors: ANN index build time, p50/p95 and recall@10 against the exact scan (bench/vectors.py).
.PHONY: bench-vectors
bench-vectors: $(STAMP)
	$(PY) bench/vectors.py $(BENCH_ARGS)

# Retrieval quality through GET /search/ for each embedder (recall@1/@5, MRR, stale-in-top-5), embedding cost and
# query latency, on its own PostgreSQL database (bench/retrieval.py, docs/retrieval.md).
.PHONY: bench-retrieval
bench-retrieval: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_retrieval" $(PY) bench/retrieval.py $(BENCH_ARGS)

# Search latency at 100k and 1M synthetic vectors of the default embedder's dimension: the index's search path beside
# the exact scan in the same run (bench/vectors.py), then GET /search/ end to end with the default embedder's index
# grown to 100k and 1M by synthetic filler facts (bench/retrieval.py --filler). About 30 minutes on 2 cores.
.PHONY: bench-retrieval-scale
bench-retrieval-scale: $(STAMP)
	@set -euo pipefail; \
	db_url=$$(bin/ensure-postgres); \
	$(PY) bench/vectors.py --vectors 100000 1000000 --queries 500 --exact-queries 20 --refine 10; \
	DATABASE_URL="$${db_url%/*}/memory_admin_bench_retrieval" $(PY) bench/retrieval.py --embedders multilingual \
		--throughput-texts 0 --filler 100000 1000000 $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var
