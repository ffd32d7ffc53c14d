#!/usr/bin/env bash
# Judge quality of the local test models on every shipped labelled set (BENCHMARKS.md "Judge
# quality"): `gavel eval` in listwise mode, two orders, explanations off (the small models only
# copy the answer into them, and they cost decode time; scores do not depend on them).
#
#   benches/judge_quality.sh                 # both models, every set, every group
#   MODELS=0.5b LIMIT=40 benches/judge_quality.sh
#
# Models come from the shared fetch script (cached after the first run). Results: one JSON
# report and one text summary per model and set under $OUT (default target/judge-quality), and
# a verdict store there too, so a rerun is served from the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${MODELS:-"0.5b 1.5b"}
sets=${SETS:-"halueval_qa halueval_summarization gavel_answers"}
out=${OUT:-target/judge-quality}
fetch=${FETCH:-../shared/tools/fetch-test-model.sh}
[[ -x $fetch ]] || fetch=tools/fetch-test-model.sh
mkdir -p "$out"
cargo build --release --quiet
limit=(); [[ -n ${LIMIT:-} ]] && limit=(--limit "$LIMIT")
for m in $models; do
  path=$("$fetch" "$m")
  cfg=$out/local-$m.toml
  cat > "$cfg" <<TOML
default_judge = "local-$m"
[judges.local-$m]
backend = "local"
model_path = "$path"
max_explanation_bytes = 0
deadline_s = 3600
[server]
request_timeout_s = 3600
TOML
  for s in $sets; do
    echo "== local-$m on $s" >&2
    start=$(date +%s)
    target/release/gavel eval --config "$cfg" --store "$out/store-$m" "${limit[@]}" \
      --concurrency 1 --format json -o "$out/$m-$s.json" "evals/$s.jsonl" || true
    target/release/gavel eval --config "$cfg" --store "$out/store-$m" "${limit[@]}" \
      --concurrency 1 "evals/$s.jsonl" | tee "$out/$m-$s.txt" || true
    echo "   $(( $(date +%s) - start )) s" >&2
  done
done
