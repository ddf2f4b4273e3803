#!/usr/bin/env bash
# One command for the whole suite: set up, lint, type-check, then the tests twice:
#   1. integration: MariaDB, Redis, Milvus 2.5's own engine as a server and a real Celery
#      worker (the tests marked lite3 on a Milvus Lite 3.x server: aliases, partitions);
#   2. embedded defaults: SQLite, a Milvus Lite file (the same engine) and tasks in-process.
# A test that uses neither the database, Milvus nor the worker (marked pure by
# tests/conftest.py) is the same on both: only the second run runs it.
# Needs MariaDB on 127.0.0.1:3306 (root, no password) and Redis on 127.0.0.1:6379; installs
# the system packages it needs when run as root (otherwise it says which).
set -euo pipefail
cd "$(dirname "$0")/.."
# mysqlclient builds against libmariadb; the browser tests drive Debian's chromium.
bash scripts/system-packages.sh libmariadb-dev pkg-config gcc chromium fonts-wqy-zenhei tesseract-ocr tesseract-ocr-chi-sim tesseract-ocr-eng
bash scripts/setup.sh "mysql,dev"
# Milvus Lite 3.x, apart from the platform's milvus-lite 2.5.1, for the tests marked lite3.
bash scripts/milvus-lite3.sh
# The oldest openai release pyproject.toml admits, which a test runs the model clients with.
bash scripts/lower-bounds.sh
. .venv/bin/activate
# Nothing of the run is kept in the checkout: the type checker reads the settings, which
# generate the embedded defaults' secret key under KB_VAR_DIR (var/ here otherwise).
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The local model, for the test that runs it: llama-cpp-python built lean the first time (about
# 16 min on 2 cores; pip's cache keeps the wheel) and the pinned model in var/models/, which the
# demo shares (quick when they are there).
export KB_LOCAL_MODEL_DIR="$PWD/var/models"
KB_VAR_DIR="$tmp/lint" bash scripts/local-model.sh

ruff check .
KB_VAR_DIR="$tmp/lint" mypy kbplatform kbplatform_client datasets retrieval audit evaluation

run_pytest() {
  # pytest exits 5 when it ran no test: that is a failure here, not a success.
  set +e
  # The slowest tests named at the end, so that a run that grew slower says where.
  python -m pytest --durations=25 "$@"
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then echo "pytest ran no test" >&2; return 1; fi
  return "$code"
}

echo "== integration: MariaDB + Redis + Milvus 2.5's engine + Celery worker"
# No KB_VAR_DIR: the tests' own is a temporary folder (tests/var_dir.py), never var/ here.
DJANGO_SECRET_KEY="${DJANGO_SECRET_KEY:-test-only-$(python -c 'import secrets; print(secrets.token_urlsafe(40))')}" \
DATABASE_URL="${TEST_DATABASE_URL:-mysql://root:@127.0.0.1:3306/test}" \
REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/13}" \
CELERY_BROKER_URL="${TEST_BROKER_URL:-redis://127.0.0.1:6379/14}" \
CELERY_TASK_ALWAYS_EAGER=false \
MILVUS_URI="${TEST_MILVUS_URI:-http://127.0.0.1:19541}" \
KB_EMBEDDER="${TEST_EMBEDDER:-use}" \
  run_pytest -m "not embedded and not pure" "$@"

echo "== embedded defaults: SQLite + Milvus Lite file + eager tasks"
(
  unset REDIS_URL CELERY_BROKER_URL MILVUS_URI CELERY_TASK_ALWAYS_EAGER
  mkdir "$tmp/embedded"
  export DATABASE_URL="sqlite:///$tmp/embedded/kb.sqlite3" KB_VAR_DIR="$tmp/embedded"
  export KB_EMBEDDER="${TEST_EMBEDDER:-use}"
  # Every test but those that need a production-only service (marked integration); the pure
  # ones (tests/conftest.py) run only here.
  run_pytest -m "not integration" "$@"
)
