#!/usr/bin/env bash
# One command for a newcomer: set up, then run the platform on one machine with the embedded
# defaults (SQLite, Milvus 2.5's engine serving var/milvus.db, a worker with a folder as its
# broker, gunicorn) at http://127.0.0.1:8000 and import knowledge_base/ (kbplatform/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export KB_DEMO_STARTED="$(date +%s)"
bash scripts/setup.sh
exec .venv/bin/python -m kbplatform.demo "$@"
