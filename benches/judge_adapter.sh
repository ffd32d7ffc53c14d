#!/usr/bin/env bash
# Trains a judge adapter for a local test model with `gavel train judge` on the labelled train
# split, chooses on the dev split, then measures base and adapter side by side with
# `gavel eval --judge base --judge tuned` on eval sets never trained or tuned on
# (BENCHMARKS.md "Judge adapters").
#
#   benches/judge_adapter.sh                          # 0.5B, QA + summarization, both modes
#   MODEL=1.5b benches/judge_adapter.sh
#   TRAIN="halueval_qa" LAYERS=4 EPOCHS=3 LR=1e-3 RANK=8 ALPHA=16 benches/judge_adapter.sh
#   REACH=all ...                 # adapters at every position (default: the verdict position)
#   EVAL_SETS="halueval_qa halueval_dialogue" LIMIT=100 benches/judge_adapter.sh
#   DEV_LIMIT=50 ...              # choose on the first 50 groups of each dev split
#   TRAIN="halueval_qa halueval_summarization:80 gavel_answers:24" \
#     DEV="halueval_qa:50 halueval_summarization:25 gavel_answers:12" MODES=pairwise ...
#                                 # SET:N takes a split's first N groups
#   FEATURES=dir ...              # the frozen model's features kept by an earlier run or sweep
#   GAVEL_BIN=path/to/gavel ...   # a built binary instead of `cargo build --release`
#
# Results under $OUT (default target/judge-adapter/$MODEL): the training run (metrics.jsonl,
# checkpoints, best/), train.log with /usr/bin/time's peak memory, and one eval report per set
# and mode. A rerun resumes the training run and judges only what is not in the store yet.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-0.5b}
train_sets=${TRAIN:-"halueval_qa halueval_summarization"}
eval_sets=${EVAL_SETS:-"halueval_qa halueval_summarization halueval_dialogue"}
modes=${MODES:-"pointwise pairwise"}
out=${OUT:-target/judge-adapter/$model}
mkdir -p "$out"
source benches/gavel_bin.sh
bin=$GAVEL
path=$(tools/fetch-model.sh "$model")
join() { local IFS=,; echo "$*"; }
# SET or SET:N (the split's first N groups, copied under $out) -> the file to train or choose on.
split_file() {
  local split=$1 set=${2%%:*} n=${2#*:}
  if [[ $2 == *:* ]]; then
    head -n "$n" "evals/$split/$set.jsonl" > "$out/$split-$set.jsonl"; echo "$out/$split-$set.jsonl"
  else
    echo "evals/$split/$set.jsonl"
  fi
}
dev_sets=${DEV:-}
if [[ -z $dev_sets ]]; then   # the train sets' dev splits, their first DEV_LIMIT groups if set
  for s in $train_sets; do dev_sets+=" ${s%%:*}${DEV_LIMIT:+:$DEV_LIMIT}"; done
fi
train=(); dev=()
for s in $train_sets; do train+=("$(split_file train "$s")"); done
for s in $dev_sets; do dev+=("$(split_file dev "$s")"); done
resume=(); [[ -d $out/run ]] && resume=(--resume)
/usr/bin/time -v "$bin" train judge --model "$path" --scorer-config examples/gavel.toml \
  --train "$(join "${train[@]}")" --dev "$(join "${dev[@]}")" \
  --mode "$(join $modes)" --layers "${LAYERS:-4}" --reach "${REACH:-verdict}" --epochs "${EPOCHS:-3}" \
  --batch-size "${BATCH:-16}" --learning-rate "${LR:-2e-4}" --eval-every "${EVAL_EVERY:-20}" \
  --rank "${RANK:-8}" --alpha "${ALPHA:-16}" ${FEATURES:+--features "$FEATURES"} \
  -o "$out/run" "${resume[@]}" 2>&1 | tee "$out/train.log"
cat > "$out/judges.toml" <<TOML
default_judge = "base"
[judges.base]
backend = "local"
model_path = "$path"
max_explanation_bytes = 0
deadline_s = 3600
[judges.tuned]
backend = "local"
model_path = "$path"
adapter = "$(realpath "$out/run/best")"
max_explanation_bytes = 0
deadline_s = 3600
TOML
# An adapter trained for one mode is refused by a judge of the other: the tuned judge asks it.
if [[ $modes != *" "* ]]; then echo "mode = \"$modes\"" >> "$out/judges.toml"; fi
limit=(); [[ -n ${LIMIT:-} ]] && limit=(--limit "$LIMIT")
for s in $eval_sets; do
  for mode in $modes; do
    "$bin" eval --config "$out/judges.toml" --store "$out/store" "${limit[@]}" --orders 2 \
      --judge base --judge tuned --judge-mode "$mode" --concurrency 1 --format json \
      -o "$out/$s-$mode.json" "evals/$s.jsonl" || true
    "$bin" eval --config "$out/judges.toml" --store "$out/store" "${limit[@]}" --orders 2 \
      --judge base --judge tuned --judge-mode "$mode" --concurrency 1 \
      "evals/$s.jsonl" | tee "$out/$s-$mode.txt" || true
  done
done
