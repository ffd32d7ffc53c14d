#!/usr/bin/env bash
# A base judge and its tuned judge (the shipped verdict adapter) on one loaded model, against
# the same two judges each on a model of its own: `gavel eval --judge base --judge tuned` over
# the first LIMIT groups of SET, both judges in each mode of MODES, two orders, concurrency 1.
# Reports wall time and peak memory (/usr/bin/time) per layout and mode, and the eval reports
# (BENCHMARKS.md, "Judges sharing one model").
#
#   benches/shared_model.sh                                   # 1.5B, 20 QA groups, both modes
#   MODEL=0.5b SET=halueval_dialogue LIMIT=50 MODES=pairwise benches/shared_model.sh
#   GAVEL_BIN=path/to/gavel ...                               # a built binary
#
# The separate layout names the same model file by two paths, the second a symbolic link (judges
# share a model only when their `model_path` is the same path), so nothing else differs. Every run starts from an
# empty verdict store. Results under $OUT (default target/shared-model/$MODEL): summary.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-1.5b}
set_name=${SET:-halueval_qa}
limit=${LIMIT:-20}
modes=${MODES:-"pairwise pointwise"}
out=${OUT:-target/shared-model/$model}
rm -rf "$out"; mkdir -p "$out"
source benches/gavel_bin.sh
bin=$GAVEL
path=$(tools/fetch-model.sh "$model")
mkdir -p "$out/link"; ln -s "$path" "$out/link/$(basename "$path")"
other=$(realpath -s "$out/link/$(basename "$path")")   # the same file, by another path
adapter=$(realpath "adapters/judge-qwen2.5-coder-$model")
printf 'layout\tmode\twall_s\tpeak_rss_mb\tjudge\tpairwise_acc\ts_per_group\tprompt_tokens\tcached_prompt_tokens\n' > "$out/summary.tsv"
for mode in $modes; do
  for layout in shared separate; do
    tuned_path=$path; [[ $layout == separate ]] && tuned_path=$other
    dir=$out/$layout-$mode; mkdir -p "$dir"
    cat > "$dir/judges.toml" <<TOML
default_judge = "base"
[judges.base]
backend = "local"
model_path = "$path"
max_explanation_bytes = 0
deadline_s = 3600
mode = "$mode"
[judges.tuned]
backend = "local"
model_path = "$tuned_path"
adapter = "$adapter"
max_explanation_bytes = 0
deadline_s = 3600
mode = "$mode"
TOML
    start=$(date +%s.%N)
    /usr/bin/time -v "$bin" eval --config "$dir/judges.toml" --store "$dir/store" --limit "$limit" \
      --orders 2 --judge base --judge tuned --concurrency 1 --format json -o "$dir/report.json" \
      "evals/$set_name.jsonl" 2> "$dir/time.log" || true
    end=$(date +%s.%N)
    rss=$(awk '/Maximum resident set size/ {print int($6/1024)}' "$dir/time.log")
    wall=$(echo "$end - $start" | bc)
    # One line per judge: its accuracy, seconds per group and prompt tokens (all prefilled or
    # reused), from the report's result over every set.
    python3 - "$dir/report.json" "$layout" "$mode" "$wall" "$rss" >> "$out/summary.tsv" <<'PY'
import json, sys
path, layout, mode, wall, rss = sys.argv[1:]
seen = set()
for r in json.load(open(path))["results"]:
    if r["judge"] in seen:
        continue
    seen.add(r["judge"])
    u = r["usage"]
    print("\t".join([layout, mode, "%.1f" % float(wall), rss, r["judge"],
        "%.3f" % r["pairwise_accuracy"], "%.2f" % r["seconds_per_group"],
        str(u["prompt_tokens"]), str(u["cached_prompt_tokens"])]))
PY
  done
done
column -t "$out/summary.tsv"
