#!/usr/bin/env bash
# Usage: bash scripts/bench_engines.sh [WORKDIR] [ROUNDS] [SUITE_FOLDER...]
# Milvus Lite 3.x (scripts/milvus-lite3.sh) against Milvus 2.5's own engine, side by side on
# one machine: each engine served on 127.0.0.1 with a SQLite database of its own in WORKDIR
# (default: a temporary folder), the same commands alternating between them, USE. Prints a
# markdown table: each BEIR suite's nDCG@10 and p50 per retriever (default
# ../shared/eval/cmrc2018; a suite is indexed once per engine, SciFact's 5,183 documents in
# about 15 min on Milvus Lite 3.x), and the REST lookup over 10,000 chunks against its floor
# (`bench_lookup`), ROUNDS times. Run inside the virtualenv (. .venv/bin/activate).
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d)}"
rounds="${2:-2}"
suites=("${@:3}")
[ ${#suites[@]} -gt 0 ] || suites=(../shared/eval/cmrc2018)
bash scripts/milvus-lite3.sh
lib="$(python -c 'from kbplatform.processes import engine_lib; print(engine_lib())')"
declare -A ports=([lite]=19601 [engine]=19602)
mkdir -p "$work/lite" "$work/engine"
PYTHONPATH="$PWD/.milvus-lite3" python -c "from milvus_lite.cmdline import main; main()" server \
  --data-dir "$work/lite/milvus" --host 127.0.0.1 --port "${ports[lite]}" --max-workers 1 \
  > "$work/lite/server.log" 2>&1 &
lite=$!
env LD_LIBRARY_PATH="$lib" "$lib/milvus" "$work/engine/milvus.db" "127.0.0.1:${ports[engine]}" \
  ERROR > "$work/engine/server.log" 2>&1 &
engine=$!
# SIGTERM: a background shell's children ignore SIGINT, Milvus Lite's clean stop.
trap 'kill $lite $engine' EXIT

on() {  # engine, then a manage.py command
  local name="$1"; shift
  DATABASE_URL="sqlite:///$work/$name/kb.sqlite3" KB_VAR_DIR="$work/$name" \
    MILVUS_URI="http://127.0.0.1:${ports[$name]}" KB_EMBEDDER=use KB_LOCAL_MODEL=false \
    python manage.py "$@"
}
for name in lite engine; do
  python -c "from kbplatform.processes import wait_for_port; wait_for_port('127.0.0.1', ${ports[$name]})"
  on "$name" migrate -v0
done

echo "| measure | Milvus Lite 3.x | Milvus 2.5's engine |"
echo "|---|---|---|"
for suite in "${suites[@]}"; do
  for mode in hybrid bm25 dense; do
    cells=()
    for name in lite engine; do
      cells+=("$(on "$name" evaluate --suite "$suite" --embedder use \
        --mode "$mode" --queries 300 --json 2>/dev/null | python -c '
import json, sys
r = json.load(sys.stdin)
print("%.4f, p50 %s ms" % (r["ndcg@10"], r["latency_p50_ms"]))')")
    done
    echo "| $(basename "$suite") $mode: nDCG@10, p50 | ${cells[0]} | ${cells[1]} |"
  done
done
for round in $(seq 1 "$rounds"); do
  cells=()
  for name in lite engine; do
    cells+=("$(on "$name" bench_lookup --sizes 10000 --queries 100 --json 2>/dev/null | python -c '
import json, sys
r = json.load(sys.stdin)["lookup"][0]
print("%s ms (floor %s ms)" % (r["rest_p50_ms"], r["floor_p50_ms"]))')")
  done
  echo "| round $round, 10,000 chunks: REST lookup p50 (floor p50) | ${cells[0]} | ${cells[1]} |"
done
