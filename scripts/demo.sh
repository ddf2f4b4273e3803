#!/usr/bin/env bash
# One command for a newcomer: set up, import knowledge_base/, run the platform on
# embedded defaults (SQLite, a Milvus Lite file, tasks in-process) at http://127.0.0.1:8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
mkdir -p var
# A secret key and an admin password of the demo's own, generated once, never in the repo.
if [ ! -f var/demo.env ]; then
  python - > var/demo.env <<'PY'
import secrets
print(f"export DJANGO_SECRET_KEY={secrets.token_urlsafe(50)}")
print(f"export KB_DEMO_ADMIN_PASSWORD={secrets.token_urlsafe(12)}")
PY
  chmod 600 var/demo.env
fi
. var/demo.env
export CELERY_TASK_ALWAYS_EAGER=true
python manage.py migrate --no-input
python manage.py createcachetable
python manage.py import_knowledge knowledge_base --tenant demo --dataset runbooks
DJANGO_SUPERUSER_PASSWORD="$KB_DEMO_ADMIN_PASSWORD" \
  python manage.py createsuperuser --no-input --username admin --email admin@localhost 2>/dev/null || true
if [ ! -f var/demo-tool-key.txt ]; then
  python manage.py create_api_key --tenant demo --role tool --name demo | tail -n 1 \
    | awk '{print $NF}' > var/demo-tool-key.txt
  chmod 600 var/demo-tool-key.txt
fi
cat <<TXT

kbplatform runs at http://127.0.0.1:8000
  admin:    http://127.0.0.1:8000/admin/   user: admin   password: $KB_DEMO_ADMIN_PASSWORD
  tool key: $(cat var/demo-tool-key.txt)   (also in var/demo-tool-key.txt)
  try:      curl -s -X POST http://127.0.0.1:8000/api/tools/lookup_knowledge \\
              -H "Authorization: Bearer \$(cat var/demo-tool-key.txt)" \\
              -H 'Content-Type: application/json' -d '{"query": "Redis 内存满了怎么办"}'

TXT
# --noreload: one process, because a Milvus Lite file can be opened by one process only.
exec python manage.py runserver 127.0.0.1:8000 --noreload
