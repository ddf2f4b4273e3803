#!/usr/bin/env bash
# Usage: bash scripts/setup.sh [EXTRAS]
# Creates .venv and installs the project with the given extras. Idempotent and quick when
# nothing changed: pip runs only when pyproject.toml or the extras differ from the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.kbplatform-installed"
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1) ${extras}"
if [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
  exit 0
fi
log=".venv/pip-install.log"
echo "installing the project into .venv (${extras:-no extras}; log: $log)…"
# pip's and setuptools' own warnings go to the log; a failure shows it.
if ! .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras:+[$extras]}" \
    >"$log" 2>&1; then
  cat "$log" >&2
  echo "set-up failed: the pip output is above (and in $log)" >&2
  exit 1
fi
echo "$wanted" > "$stamp"
