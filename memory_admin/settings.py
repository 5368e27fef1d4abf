"""Settings for the memory governance dashboard.

Everything production needs comes from environment variables (DATABASE_URL, CELERY_BROKER_URL,
CACHE_URL, SECRET_KEY, ALLOWED_HOSTS, DEBUG). With none set, the embedded defaults run on one machine
with no server to install: SQLite (WAL) under var/, kombu's filesystem broker served by a real Celery
worker, and a file-based cache shared by the web and worker processes.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from memory_admin.env import envbool, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", True)
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
    "memory_admin.accounts",
    "memory_admin.memory",
    "memory_admin.derived",
    "memory_admin.dashboard",
    "deletion",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # NUL and control characters in a URL are refused before a session, a view or a query sees them.
    "memory_admin.http_errors.RejectControlCharactersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "memory_admin.dashboard.middleware.TenantTimezoneMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "memory_admin.urls"
WSGI_APPLICATION = "memory_admin.wsgi.application"
AUTH_USER_MODEL = "accounts.Principal"
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
    # at BEGIN so two writers queue up instead of failing half-way through a transaction.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# --- Cache ------------------------------------------------------------------------------------
def _cache_from_url(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    if parsed.scheme in {"redis", "rediss"}:
        return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
    if parsed.scheme == "locmem":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if parsed.scheme == "file":
        return {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
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
    "sweep-due-rechecks": {
        "task": "memory_admin.memory.tasks.sweep_due_rechecks",
        "schedule": envint("RECHECK_SWEEP_SECONDS", 60),
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
SOURCE_ALLOWED_HOSTS = [h.lower() for h in envlist("SOURCE_ALLOWED_HOSTS", [])]
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
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)

# --- Vector index (LanceDB, embedded on local or shared disk) -----------------------------------
VECTOR_INDEX_PATH = envstr("VECTOR_INDEX_PATH", str(VAR_DIR / "vectors"))
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "")  # a sentence-transformers model available offline
EMBEDDING_DIM = envint("EMBEDDING_DIM", 256)
# Cached fact answers live this long at most (they are evicted at once when a base changes).
FACT_CACHE_SECONDS = envint("FACT_CACHE_SECONDS", 300)

# --- Deletion -------------------------------------------------------------------------------------
BACKUP_DIR = Path(envstr("BACKUP_DIR", str(VAR_DIR / "backups")))
BACKUP_RETENTION_DAYS = envint("BACKUP_RETENTION_DAYS", 35)
# Fault drills only: the purge task pauses this long between purging and verifying a store.
DELETION_DRILL_PAUSE_SECONDS = envint("DELETION_DRILL_PAUSE_SECONDS", 0)
# A store row claimed by a worker that died is taken over after this long.
DELETION_LEASE_SECONDS = envint("DELETION_LEASE_SECONDS", 300)

# --- Request limits ---------------------------------------------------------------------------
# A body larger than this is refused with 413 before it is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024)
MEMORY_VALUE_MAX_BYTES = envint("MEMORY_VALUE_MAX_BYTES", 16 * 1024)

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
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Memory governance API",
    "DESCRIPTION": "System of record for what agents remember: facts, their history and freshness.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
