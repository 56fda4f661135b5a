#!/bin/bash
# The strategies' OpenAI-compatible backend against a real server: `transformers serve` with the embedded
# SmolLM2-135M (CPU, offline), then evaluate_strategy.py --endpoint on the first HumanEval problems with both
# APIs. Needs `pip install "transformers[serving]"` (fastapi, uvicorn). Usage: bench/endpoint_check.sh [N] [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}; PORT=${2:-8765}; PY=${PYTHON:-python}
OUT=${OUT_DIR:-runs/endpoint-check}
MODEL=$($PY -c "from cooprl.models.loading import resolve_model_path; print(resolve_model_path('offline:smollm2-135m-instruct'))")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
"$(dirname "$(command -v "$PY")")/transformers" serve --port "$PORT" --device cpu "$MODEL" > "$OUT.server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -sf "localhost:$PORT/health" > /dev/null && break; sleep 1; done
URL="http://localhost:$PORT/v1"
run() {   # strategy, api, extra overrides...
  local strategy=$1 api=$2; shift 2
  echo "== $strategy, $api API"
  $PY evaluate_strategy.py --strategy "$strategy" --config configs/magrpo_he_config.yaml --endpoint "$URL" \
    --endpoint-model "$MODEL" --endpoint-api "$api" --override dataset.name=humaneval "dataset.eval_split=test[:$N]" \
    output.base_dir="$OUT" "output.run_name=$strategy-$api" budget.max_new_tokens=128 "$@" 2>/dev/null | sed -n '/^results:/,$p'
}
run direct completions
run direct chat
run codet completions codet.num_codes=4 codet.num_test_samples=2
