#!/usr/bin/env bash
# Usage: bash scripts/bench_stages.sh SUITE [QUERIES] [EMBEDDER]
# The retrieval graph's stage combinations on one BEIR suite, each through `manage.py
# evaluate --set ...` (depth 100, the relevance gate off), printed as a markdown table:
# quality and the lookup's latency. Run inside the virtualenv (. .venv/bin/activate).
set -euo pipefail
cd "$(dirname "$0")/.."
suite="${1:?usage: bash scripts/bench_stages.sh SUITE [QUERIES] [EMBEDDER]}"
queries="${2:-300}"
embedder="${3:-use}"

run() {  # label, then evaluate's arguments
  local label="$1"; shift
  python manage.py evaluate --suite "$suite" --queries "$queries" --embedder "$embedder" \
    --json "$@" 2>/dev/null | python -c '
import json, sys
r = json.load(sys.stdin)
cells = [sys.argv[1]] + ["%.3f" % r[k] for k in ("ndcg@10", "recall@100", "mrr@10")]
cells += [str(r["latency_p50_ms"]), str(r["latency_p95_ms"])]
print("| " + " | ".join(cells) + " |")' "$label"
}

parallel=(--set retrieval_execution_mode=PARALLEL --set enabled_retrievers=VECTOR,BM25)
transform=(--set enable_query_transform=true --set query_transform_strategy)
echo "| stages (\`evaluate --set ...\`) | nDCG@10 | Recall@100 | MRR@10 | p50 ms | p95 ms |"
echo "|---|---|---|---|---|---|"
run "default: SIMPLE, HYBRID retriever (CONVEX, dense 0.3 : BM25 0.7)"
run "VECTOR alone (--mode dense)" --mode dense
run "BM25 alone (--mode bm25)" --mode bm25
run "HYBRID execution: Milvus hybrid_search, RRF k=5" --mode milvus_hybrid
run "HYBRID execution, RRF k=60" --mode milvus_hybrid --set rrf_k=60
run "PARALLEL VECTOR+BM25, RANK" "${parallel[@]}" --set aggregation_strategy=RANK
run "PARALLEL VECTOR+BM25, MERGE" "${parallel[@]}" --set aggregation_strategy=MERGE
run "PARALLEL VECTOR+BM25, DEDUPLICATE" "${parallel[@]}" --set aggregation_strategy=DEDUPLICATE
run "SEQUENTIAL BM25 then VECTOR, quality 0.7" --set retrieval_execution_mode=SEQUENTIAL \
  --set enabled_retrievers=BM25,VECTOR --set aggregation_strategy=RANK
for strategy in REWRITE EXPAND DECOMPOSE MULTI_QUERY; do
  run "query transform $strategy" "${transform[@]}=$strategy"
done
run "quality assessment + correction (0.7, 2 retries)" --set enable_quality_assessment=true \
  --set enable_correction=true
run "neighbours ADJACENT ±1" --set neighbour_expansion=ADJACENT
