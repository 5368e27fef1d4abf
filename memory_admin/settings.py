"""Settings for the memory governance dashboard.

Everything production needs comes from environment variables (DATABASE_URL, CELERY_BROKER_URL,
CACHE_URL, SECRET_KEY, ALLOWED_HOSTS, DEBUG). With none set, the embedded defaults run on one machine
with no server to install: SQLite (WAL) under var/, kombu's filesystem broker served by a real Celery
worker, and a file-based cache shared by the web and worker processes.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from memory_admin.env import envbool, envint, envlist, envstr
from memory_admin.lib.source_settings import parse_origin, parse_secret_bindings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", True)
# Under DEBUG, Django answers an unknown URL, a 404 and a failure with its technical pages (the URL configuration,
# a traceback). `make run` is what people meet first, so they get the product's pages in both modes
# (memory_admin/http_errors.py, ProductErrorPagesMiddleware); DEBUG_TECHNICAL_ERRORS=1 brings Django's back for
# a developer. Tracebacks are in the console either way.
DEBUG_TECHNICAL_ERRORS = envbool("DEBUG_TECHNICAL_ERRORS", False)
SECRET_KEY = envstr("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-set-SECRET_KEY-in-production"
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    # Login lockout (failed sign-ins per account and per address); see docs/operations.md "Throttling and lockout".
    "axes",
    "memory_admin.accounts",
    "memory_admin.memory",
    "memory_admin.derived",
    "memory_admin.dashboard",
    "memory_admin.ops",
    "memory_admin.mcp",
    "memory_admin.conformance",
    # Row-level security on PostgreSQL: each tenant table's forced policy, applied after every migrate.
    "memory_admin.rls",
    "deletion",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The Content Security Policy (SECURE_CSP, "Production profile" below) goes on every answer.
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The product's 400/404/500 pages under DEBUG too (make run), in place of Django's technical pages.
    "memory_admin.http_errors.ProductErrorPagesMiddleware",
    # NUL and control characters in a URL are refused before a session, a view or a query sees them.
    "memory_admin.http_errors.RejectControlCharactersMiddleware",
    # A body framed by Transfer-Encoding instead of Content-Length is a 411, never read as empty.
    "memory_admin.http_errors.LengthRequiredMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The tenant every query of the request acts for under row-level security (accounts/tenancy.py).
    "memory_admin.dashboard.middleware.TenantContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "memory_admin.dashboard.middleware.TenantTimezoneMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a sign-in refused for a lockout into the lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memory_admin.urls"
WSGI_APPLICATION = "memory_admin.wsgi.application"
AUTH_USER_MODEL = "accounts.Principal"
# django-axes first: it refuses a locked-out account or address before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "dashboard:login"
# Every password a person sets goes through these (accounts.services.ensure_principal); only the demo
# seeding bypasses them, explicitly, for its documented password.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
_sqlite_path = VAR_DIR / "db.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{_sqlite_path}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server and the worker read while one writes; IMMEDIATE takes the write lock
    # at BEGIN so two writers queue up instead of failing half-way through a transaction. secure_delete: a deleted
    # row's bytes are overwritten with zeros (docs/deletion.md, "Sealed values (crypto-shredding)": what stays in the files).
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
else:
    # PostgreSQL. DB_SERVER_SIDE_BINDING=1 sends values apart from the SQL text (psycopg's server-side
    # binding) instead of merging them into it; DB_PREPARE_THRESHOLD=N then has psycopg prepare a statement
    # after N runs on a connection, so the server plans it once (0.3-0.5 ms a read here). Both are off by
    # default, as in Django: prepared statements need connections that persist (DB_CONN_MAX_AGE) and a pooler
    # in transaction mode that tracks them (PgBouncer >= 1.21, max_prepared_statements), and server-side
    # binding refuses SQL whose placeholders PostgreSQL cannot type. N >= 1: with 0 every statement is prepared
    # on first use, and PostgreSQL refuses to prepare the multi-statement DDL of Django's migrations.
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": envbool("DB_SERVER_SIDE_BINDING", False)}
    if envstr("DB_PREPARE_THRESHOLD", "").strip():
        if not DATABASES["default"]["OPTIONS"]["server_side_binding"]:
            raise ImproperlyConfigured(
                "DB_PREPARE_THRESHOLD needs DB_SERVER_SIDE_BINDING=1 (psycopg prepares nothing else)"
            )
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = envint("DB_PREPARE_THRESHOLD", 5, minimum=1)
# The hot reads compiled once per process (memory_admin/lib/prepared.py: the record list's pages, the as-of lookup)
# are also prepared on the server, whatever the binding, so that PostgreSQL plans each once per connection:
# planning the list's statement costs 1.5-2 ms, running it 0.3-0.6 ms. On by default when connections persist
# (DB_CONN_MAX_AGE != 0; a connection per request would prepare for nothing). A pooler in transaction mode must
# track protocol-level prepared statements (PgBouncer >= 1.21 with max_prepared_statements); DB_PREPARED_READS=0
# turns it off. SQLite ignores it.
PREPARED_READS = envbool("DB_PREPARED_READS", DATABASES["default"].get("CONN_MAX_AGE", 0) != 0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# PostgreSQL, two roles (docs/deploying.md and its "Row-level security"): `migrate` runs as the owner of the tables
# (DATABASE_URL naming the owner), and when DATABASE_APP_ROLE names the role the web app and the workers
# connect as, it grants that role DML on the tables and sequences (memory_admin/rls/policies.py). The app role
# must own nothing and bypass nothing, so the tenant policies hold for it. DATABASE_APP_ROLE_TRUNCATE adds
# TRUNCATE, for the test suite's flushes only.
DATABASE_APP_ROLE = envstr("DATABASE_APP_ROLE", "")
DATABASE_APP_ROLE_TRUNCATE = envbool("DATABASE_APP_ROLE_TRUNCATE", False)
# `manage.py backup`/`restore` (pg_dump, pg_restore) log in as this role when set (the owner: the app role
# cannot dump what row-level security hides from it); else as DATABASE_URL's.
BACKUP_DATABASE_USER = envstr("BACKUP_DATABASE_USER", "")
BACKUP_DATABASE_PASSWORD = envstr("BACKUP_DATABASE_PASSWORD", "")


# --- Cache ------------------------------------------------------------------------------------
CACHE_SOCKET_TIMEOUT_MS = envint("CACHE_SOCKET_TIMEOUT_MS", 500, minimum=1)


def _cache_from_url(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    if parsed.scheme in {"redis", "rediss"}:
        # A cache server that is down or hung costs a request at most this long per call, then the product
        # degrades (lib/outages.py: throttles fail open, cached answers miss) instead of waiting.
        timeout = CACHE_SOCKET_TIMEOUT_MS / 1000
        return {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": timeout, "SOCKET_TIMEOUT": timeout},
        }
    if parsed.scheme == "locmem":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if parsed.scheme == "file":
        return {
            "BACKEND": "memory_admin.lib.filecache.FileCache",
            "LOCATION": parsed.path,
        }
    raise ImproperlyConfigured(f"CACHE_URL={url!r}: use redis://, rediss://, locmem:// or file:///path")


CACHES = {
    "default": {
        **_cache_from_url(envstr("CACHE_URL", f"file://{VAR_DIR / 'cache'}")),
        "KEY_PREFIX": envstr("CACHE_KEY_PREFIX", ""),
    }
}

# --- Celery -----------------------------------------------------------------------------------
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue_dir = VAR_DIR / "broker" / "queue"
    _processed_dir = VAR_DIR / "broker" / "processed"
    _control_dir = VAR_DIR / "broker" / "control"
    for _folder in (_queue_dir, _processed_dir, _control_dir):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(_processed_dir),
        "control_folder": str(_control_dir),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # A message taken by a worker that then died (kill -9, a lost machine) is handed out again after this many
    # seconds (kombu's default is an hour). It must exceed the longest task's run time, or a task still running
    # is started a second time; the deletion does not wait for it (its lease and the resume sweep, below).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 900, minimum=60)}
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_TASK_DEFAULT_QUEUE", "memory_admin")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "settle-valid-time-transitions": {
        "task": "memory_admin.memory.tasks.settle_valid_time_transitions",
        "schedule": 60.0,
    },
    "reconcile-deletions": {
        "task": "deletion.tasks.reconcile_deletions",
        "schedule": envint("DELETION_RECONCILE_SECONDS", 60),
    },
    # A deletion store whose worker died mid-purge (its lease not renewed) is sent to a live worker.
    "resume-abandoned-deletion-stores": {
        "task": "deletion.tasks.resume_abandoned_stores",
        "schedule": envint("DELETION_RESUME_SECONDS", 5, minimum=1),
    },
    "sweep-due-rechecks": {
        "task": "memory_admin.memory.tasks.sweep_due_rechecks",
        "schedule": envint("RECHECK_SWEEP_SECONDS", 60),
    },
    "checkpoint-audit-chains": {
        "task": "memory_admin.memory.tasks.checkpoint_audit_chains",
        "schedule": 60.0 * envint("AUDIT_CHECKPOINT_MINUTES", 60, minimum=1),
    },
}
CELERY_TIMEZONE = "UTC"
# First pause (seconds) before retrying an unreachable canonical source; it doubles each retry.
RECHECK_RETRY_DELAY = float(envint("RECHECK_RETRY_DELAY_MS", 2000)) / 1000

# --- Canonical sources (http_json) -------------------------------------------------------------
# Policies are written by tenant admins, and an admin is not the operator: a policy may name only the
# secret variables the operator listed (exact names, or a prefix ending in `*`), and in production
# the server refuses to fetch loopback, private, link-local and metadata addresses.
SOURCE_SECRET_ENV_ALLOWLIST = envlist("SOURCE_SECRET_ENV_ALLOWLIST", ["SOURCE_SECRET_*"])
# Decided here from the DEBUG variable, not from settings.DEBUG at request time (the test runner
# turns that off): `make run` keeps a newcomer's canonical source on 127.0.0.1 working.
SOURCE_ALLOW_PRIVATE_NETWORKS = envbool("SOURCE_ALLOW_PRIVATE_NETWORKS", DEBUG)
# Host names (exact) and networks (CIDR) the operator trusts even when they are internal.
# Origins (exact): `scheme://host:port`, or a bare host for its ports 80 (http) and 443 (https) only.
SOURCE_ALLOWED_HOSTS = [h.lower() for h in envlist("SOURCE_ALLOWED_HOSTS", [])]
for _entry in SOURCE_ALLOWED_HOSTS:
    try:
        parse_origin(_entry)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"SOURCE_ALLOWED_HOSTS: {_exc}") from None
# Where each allowed secret may be sent: the tenants (slugs) and URL prefixes (scheme, host, port, path) it is
# bound to, as JSON (docs/canonical-sources.md). A secret named by no binding is sent nowhere.
try:
    SOURCE_SECRET_BINDINGS = parse_secret_bindings(envstr("SOURCE_SECRET_BINDINGS", "{}"))
except ValueError as _exc:
    raise ImproperlyConfigured(f"SOURCE_SECRET_BINDINGS {_exc}") from None
SOURCE_ALLOWED_NETWORKS = envlist("SOURCE_ALLOWED_NETWORKS", [])
SOURCE_MAX_RESPONSE_BYTES = envint("SOURCE_MAX_RESPONSE_BYTES", 1024 * 1024)
for _network in SOURCE_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"SOURCE_ALLOWED_NETWORKS: {_network!r} is not a network like 10.2.0.0/16") from None
for _name in SOURCE_SECRET_ENV_ALLOWLIST:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", _name):
        # A bare `*` would hand every server secret to every admin: refuse it with the malformed names.
        raise ImproperlyConfigured(f"SOURCE_SECRET_ENV_ALLOWLIST: {_name!r} is not a variable name or NAME_PREFIX_*")
if SOURCE_MAX_RESPONSE_BYTES < 1:
    raise ImproperlyConfigured("SOURCE_MAX_RESPONSE_BYTES must be positive")

# --- Internationalisation ---------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Static files -----------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where `collectstatic` gathers the files whitenoise serves (with DEBUG=0 it serves only what is there).
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(VAR_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# --- Vector index (LanceDB, embedded on local or shared disk) -----------------------------------
VECTOR_INDEX_PATH = envstr("VECTOR_INDEX_PATH", str(VAR_DIR / "vectors"))
# The search embedder (memory_admin/derived/embedding.py, docs/retrieval.md): multilingual (two small models whose
# scores are averaged), e5, use, or hashing (lexical, no model). One that cannot load falls back to hashing, said
# on the overview and in every search answer.
EMBEDDER = envstr("EMBEDDER", "multilingual")
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "")  # a sentence-transformers model available offline (overrides)
EMBEDDING_DIM = envint("EMBEDDING_DIM", 256)
# ANN index: built by the task build_vector_ann_index once the table has this many rows (exact scans
# below it), with scalar indexes on the filter columns; searches probe NPROBES partitions (all of them
# only when a narrow filter leaves fewer than k rows there) and re-rank REFINE_FACTOR x k candidates
# exactly. INDEX_TYPE IVF_SQ (8-bit scalar quantisation) or IVF_PQ (product quantisation: 8x smaller,
# slower to build, coarser). PARTITIONS 0: about sqrt(rows); SUB_VECTORS 0 (PQ): 8 dimensions each.
# 10,000: at the default embedder's 896 dimensions an exact scan costs about 0.1 s at 10k rows and 1 s at 100k
# (make bench-retrieval-scale), the index 7 ms at 100k with recall@10 1.000.
VECTOR_ANN_MIN_ROWS = envint("VECTOR_ANN_MIN_ROWS", 10_000, minimum=1)
VECTOR_ANN_INDEX_TYPE = envstr("VECTOR_ANN_INDEX_TYPE", "IVF_SQ").strip().upper()
if VECTOR_ANN_INDEX_TYPE not in ("IVF_SQ", "IVF_PQ"):
    raise ImproperlyConfigured(f"VECTOR_ANN_INDEX_TYPE={VECTOR_ANN_INDEX_TYPE!r} is not IVF_SQ or IVF_PQ")
VECTOR_ANN_NPROBES = envint("VECTOR_ANN_NPROBES", 10, minimum=1)
VECTOR_ANN_REFINE_FACTOR = envint("VECTOR_ANN_REFINE_FACTOR", 10, minimum=1)
VECTOR_ANN_PARTITIONS = envint("VECTOR_ANN_PARTITIONS", 0, minimum=0)
VECTOR_ANN_SUB_VECTORS = envint("VECTOR_ANN_SUB_VECTORS", 0, minimum=0)
# After a large import (memory/planner_stats.py): a batch of this many assertions or more queues a refresh of the
# planner's statistics, which analyzes the records and audit tables once this many rows changed since their last
# analysis (PostgreSQL; the autovacuum daemon would get there too, but a minute or more later).
STATS_REFRESH_BATCH_MIN = envint("STATS_REFRESH_BATCH_MIN", 500, minimum=1)
STATS_REFRESH_MIN_ROWS = envint("STATS_REFRESH_MIN_ROWS", 10_000, minimum=1000)
# Cached fact answers live this long at most (they are evicted at once when a base changes).
FACT_CACHE_SECONDS = envint("FACT_CACHE_SECONDS", 300)
# A dispute's resolution can be undone (the dispute reopened, the answer before it restored) for this long.
DISPUTE_UNDO_MINUTES = envint("DISPUTE_UNDO_MINUTES", 10, minimum=0)

# --- Audit chain (memory.audit_chain, docs/security.md "Audit chain") -------------------------------
# A signed checkpoint of a tenant's audit chain every this many events, and at the first event this many minutes
# after the last checkpoint (the periodic task `checkpoint-audit-chains` signs the idle tenants' ends).
AUDIT_CHECKPOINT_EVERY = envint("AUDIT_CHECKPOINT_EVERY", 1000, minimum=1)
AUDIT_CHECKPOINT_MINUTES = envint("AUDIT_CHECKPOINT_MINUTES", 60, minimum=1)

# --- Deletion -------------------------------------------------------------------------------------
# Crypto-shredding (docs/deletion.md, "Sealed values (crypto-shredding)"): values, and texts written about them, stored sealed under a
# per-fact data key kept in a key store apart from the database (KEYSTORE_PATH, KEYSTORE_KEK; lib.keystore). On by
# default on both backends; SEALING=0 writes new values in clear (reads still open sealed ones).
SEALING_ENABLED = envbool("SEALING", True)

BACKUP_DIR = Path(envstr("BACKUP_DIR", str(VAR_DIR / "backups")))
BACKUP_RETENTION_DAYS = envint("BACKUP_RETENTION_DAYS", 35)
# Fault drills only: the purge task pauses this long between purging and verifying a store (only the store
# DELETION_DRILL_STORE names, when set).
DELETION_DRILL_PAUSE_SECONDS = envint("DELETION_DRILL_PAUSE_SECONDS", 0)
DELETION_DRILL_STORE = envstr("DELETION_DRILL_STORE", "")
# A worker purging a store holds it for this long and renews the lease every third of it while it works; a
# store whose worker died is taken over once the lease has run out (the resume sweep runs every
# DELETION_RESUME_SECONDS): within DELETION_LEASE_SECONDS + DELETION_RESUME_SECONDS of the death.
DELETION_LEASE_SECONDS = envint("DELETION_LEASE_SECONDS", 10, minimum=1)

# --- Request limits ---------------------------------------------------------------------------
# A body larger than this is refused with 413 before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024)
MEMORY_VALUE_MAX_BYTES = envint("MEMORY_VALUE_MAX_BYTES", 16 * 1024)

# --- Throttling and lockout -------------------------------------------------------------------
# The client address of a request (throttles, lockout) is REMOTE_ADDR. Behind N reverse proxies that each
# append to X-Forwarded-For, set TRUSTED_PROXY_COUNT=N and the N-th address from the right is used; with 0
# (the default) the header is ignored, since any client can write it.
TRUSTED_PROXY_COUNT = envint("TRUSTED_PROXY_COUNT", 0)
if TRUSTED_PROXY_COUNT < 0:
    raise ImproperlyConfigured("TRUSTED_PROXY_COUNT must be 0 or more")
AXES_HANDLER = "memory_admin.accounts.lockout.LockoutHandler"
AXES_CLIENT_IP_CALLABLE = "memory_admin.lib.throttling.client_address"
AXES_LOCKOUT_CALLABLE = "memory_admin.accounts.lockout.lockout_response"
# Counted per account (any address) and per address (any account); either limit locks that sign-in out.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5)
LOGIN_ADDRESS_FAILURE_LIMIT = envint("LOGIN_ADDRESS_FAILURE_LIMIT", 20)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15))
# A try while locked out is refused without pushing the end of the lockout further away.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A successful sign-in does not wipe the failures counted: it would also wipe its address's count, and anyone
# with one valid login could then guess at other accounts from that address without limit.
AXES_RESET_ON_SUCCESS = False
AXES_VERBOSE = False  # no banner on every manage.py command (commands' output is read by scripts)
if AXES_FAILURE_LIMIT < 1 or LOGIN_ADDRESS_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("LOGIN_FAILURE_LIMIT and LOGIN_ADDRESS_FAILURE_LIMIT must be positive")

# --- API --------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "memory_admin.accounts.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["memory_admin.accounts.permissions.IsTenantMember"],
    "DEFAULT_PAGINATION_CLASS": "memory_admin.lib.pagination.NewestFirstCursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "memory_admin.lib.api_errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "memory_admin.lib.schema.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_PARSER_CLASSES": ["memory_admin.lib.parsers.LimitedJSONParser"],
    # Per principal+token and per client address, in the scope of each view (memory_admin/lib/throttling.py):
    # 429 `throttled` with Retry-After. Rates are read on every request, so an override applies at once.
    "DEFAULT_THROTTLE_CLASSES": [
        "memory_admin.lib.throttling.TokenRateThrottle",
        "memory_admin.lib.throttling.AddressRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "reads": envstr("API_THROTTLE_READS", "1200/min"),
        "writes": envstr("API_THROTTLE_WRITES", "600/min"),
        "search": envstr("API_THROTTLE_SEARCH", "300/min"),
        "source_test": envstr("API_THROTTLE_SOURCE_TEST", "30/min"),
        "reads_by_address": envstr("API_THROTTLE_READS_PER_ADDRESS", "6000/min"),
        "writes_by_address": envstr("API_THROTTLE_WRITES_PER_ADDRESS", "3000/min"),
        "search_by_address": envstr("API_THROTTLE_SEARCH_PER_ADDRESS", "1200/min"),
        "source_test_by_address": envstr("API_THROTTLE_SOURCE_TEST_PER_ADDRESS", "120/min"),
    },
    # The client address is REMOTE_ADDR; X-Forwarded-For is believed only behind this many trusted proxies.
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
}
for _scope, _rate in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"].items():  # type: ignore[attr-defined]
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _rate):
        raise ImproperlyConfigured(f"throttle rate {_scope}={_rate!r}: use a number per s, min, hour or day (600/min)")
SPECTACULAR_SETTINGS = {
    "TITLE": "Memory governance API",
    "DESCRIPTION": "System of record for what agents remember: facts, their history and freshness.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Fields of the same name with different choices get a name each (else drf-spectacular warns in
    # `check --deploy` and picks a hashed name such as Status944Enum).
    "ENUM_NAME_OVERRIDES": {
        "RecordStatusEnum": "memory_admin.memory.models.MemoryRecord.Status",
        "RecheckOutcomeEnum": "memory_admin.memory.models.RecheckAttempt.Result",
        "TokenStateEnum": "memory_admin.accounts.models.ApiToken.State",
        "ExpiryRequestStatusEnum": "memory_admin.memory.models.ExpiryRequest.Status",
    },
}

# --- Logging: what the product itself logs (docs/operations.md "What is logged") -------------------------------
# Request lines lose their query strings (a subject id or a search text sits there), django.request
# records lose the request object (a handler could render its GET/POST/META), exceptions keep their
# frames and type but not their message (a database error quotes the row), and the worker logs no task
# arguments or results. LOG_EXCEPTION_MESSAGES=1 logs exception messages while debugging.
_CONTENT_FREE = ["content_free"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "content_free": {
            "()": "memory_admin.logging_filters.ContentFreeRecords",
            "exception_messages": envbool("LOG_EXCEPTION_MESSAGES", False),
        }
    },
    "formatters": {
        "content_free": {
            "()": "memory_admin.logging_filters.ContentFreeFormatter",
            "exception_messages": envbool("LOG_EXCEPTION_MESSAGES", False),
        },
        # Django's own format for runserver's request lines, restated because configuring the logger
        # below replaces the handler Django's defaults gave it.
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        },
    },
    "handlers": {
        # Every other record the web processes write is rendered the same way, without changing the record
        # (the worker's own handlers replace this one: Celery's loggers carry the filter, below).
        "console": {"class": "logging.StreamHandler", "formatter": "content_free"},
        "django.server": {"class": "logging.StreamHandler", "formatter": "django.server"},
    },
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False, "filters": _CONTENT_FREE},
        "django.request": {"filters": _CONTENT_FREE},
        "django.security": {"filters": _CONTENT_FREE},
        "celery.app.trace": {"filters": _CONTENT_FREE},
        "celery.worker.strategy": {"filters": _CONTENT_FREE},
        "celery.worker.request": {"filters": _CONTENT_FREE},
    },
}

# --- Production profile (docs/deploying.md) ----------------------------------------------------------
# DEBUG=0 is the one switch: cookies only over https, HSTS, and plain http redirected to https. Each
# setting can still be overridden by its variable. `make run` (DEBUG on) keeps plain http on loopback.
# The Content Security Policy is the same in both, so the pages and the browser tests run under the
# policy production sends.
_PRODUCTION = not DEBUG
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", _PRODUCTION)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", _PRODUCTION)
# No script reads the CSRF cookie: forms carry the token, htmx sends it in a header (base.html).
CSRF_COOKIE_HTTPONLY = True
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", _PRODUCTION)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000 if _PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", True)
# Only when the operator says a proxy in front terminates TLS and sets this header (and strips it from
# what clients send): e.g. SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO. Trusting it without such a
# proxy would let any client claim https.
_proxy_ssl_header = envstr("SECURE_PROXY_SSL_HEADER", "")
if _proxy_ssl_header:
    if not re.fullmatch(r"HTTP_[A-Z0-9_]+", _proxy_ssl_header):
        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER={_proxy_ssl_header!r}: name the header as Django sees it, e.g. HTTP_X_FORWARDED_PROTO"
        )
    SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https")
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Scripts and styles come from /static/ only: no inline script, no event-handler attribute, no style
# attribute. The few inline <style> blocks are allowed by their hash: the standalone error pages (they
# must render when static files are what failed), the printable deletion report (downloaded and opened
# on its own) and drf-spectacular's Swagger UI page. tests/ops/test_deploy_profile.py fails when a
# template's inline style no longer matches a hash here.
CSP_INLINE_STYLE_HASHES = [
    "'sha256-S01vsV5K2eLuDl0ebOEkG/+xZ7tQKh5HHFAf8l+IBGs='",  # templates/4xx.html, 500.html
    "'sha256-MMpT0iDxyjALd9PdfepImGX3DBfJPXZ4IlDWdPAgtn0='",  # drf_spectacular/swagger_ui.html
]
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, *CSP_INLINE_STYLE_HASHES],
    # The favicon is `data:,`; Swagger UI draws its icons from data: URLs.
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
