#!/usr/bin/env bash
# Usage: bash scripts/lower-bounds.sh [DIR]
# The oldest openai release pyproject.toml admits (with what that release needs and the newer
# ones do not), unpacked into DIR (default .lower-bounds) for tests/retrieval/test_openai_range.py,
# which runs the chat and embedding clients with it on the path. Quick when it is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.lower-bounds}"
lower="$(python3 - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(re.match(r"openai>=([0-9.]+)", d).group(1) for d in deps if d.startswith("openai")))
PY
)"
[ -f "$dir/openai-$lower.dist-info/METADATA" ] && exit 0
rm -rf "$dir"
echo "unpacking openai $lower, the oldest release pyproject.toml admits, into $dir…"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" \
  "openai==$lower" "distro>=1.7,<2" "tqdm>4"
