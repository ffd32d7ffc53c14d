#!/usr/bin/env bash
# Sweeps `gavel train judge` over learning rate, epochs and LoRA rank on one train and dev split,
# choosing on dev only: the frozen model's features are computed by the first run and read back
# by every other (`--features`), so each further point costs its optimizer steps and dev passes.
# Prints one line per point: the best dev figure, its step and dev loss, the dev figures per
# mode, and over the run's dev measurements the lowest figure and the mean of the second half
# (late_mean: where the run settles; a point whose figures swing has a high best by chance).
# Nothing here touches an eval set (BENCHMARKS.md "Judge adapters").
#
#   benches/judge_sweep.sh                                     # 0.5B, QA, pairwise
#   MODEL=1.5b TRAIN="halueval_qa halueval_summarization:80" DEV="halueval_qa:50" ...
#   LRS="3e-4 1e-3 3e-3" EPOCHS_LIST="3 6" RANKS="8 16" ...    # the grid (alpha = 2 × rank)
#   LAYERS_LIST="2 4 8" LRS=1e-3 EPOCHS_LIST=6 RANKS=16 ...   # K, the adapted top layers (default
#                                 # 4): each K's first point runs its own frozen pass
#   FEATURES=dir ...              # features kept by an earlier run on the same splits
#   GAVEL_BIN=path/to/gavel ...   # a built binary instead of `cargo build --release`
#
# SET:N takes a split's first N groups, as in benches/judge_adapter.sh. Each point's run is kept
# under $OUT/lr-LR_ep-E_r-R (with _k-K when K is not 4; default OUT=target/judge-sweep/$MODEL);
# a rerun resumes or skips finished points, and $OUT/sweep.tsv holds the table.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-0.5b}
train_sets=${TRAIN:-halueval_qa}
dev_sets=${DEV:-halueval_qa}
modes=${MODES:-pairwise}
out=${OUT:-target/judge-sweep/$model}
features=${FEATURES:-$out/features}
mkdir -p "$out" "$features"
source benches/gavel_bin.sh
bin=$GAVEL
path=$(tools/fetch-model.sh "$model")
join() { local IFS=,; echo "$*"; }
split_file() {
  local split=$1 set=${2%%:*} n=${2#*:}
  if [[ $2 == *:* ]]; then
    head -n "$n" "evals/$split/$set.jsonl" > "$out/$split-$set.jsonl"; echo "$out/$split-$set.jsonl"
  else
    echo "evals/$split/$set.jsonl"
  fi
}
train=(); dev=()
for s in $train_sets; do train+=("$(split_file train "$s")"); done
for s in $dev_sets; do dev+=("$(split_file dev "$s")"); done
printf 'lr\tepochs\trank\tbest_dev\tstep\tdev_loss\tdev_by_mode\tlate_mean\tmin_dev\tbase_dev\tseconds\tlayers\n' \
  > "$out/sweep.tsv"
for layers in ${LAYERS_LIST:-${LAYERS:-4}}; do
for lr in ${LRS:-3e-4 1e-3 3e-3}; do
  for epochs in ${EPOCHS_LIST:-3 6}; do
    for rank in ${RANKS:-8 16}; do
      run=$out/lr-${lr}_ep-${epochs}_r-$rank; [[ $layers != 4 ]] && run+=_k-$layers
      resume=(); [[ -d $run ]] && resume=(--resume)
      start=$SECONDS
      "$bin" train judge --model "$path" --scorer-config examples/gavel.toml \
        --train "$(join "${train[@]}")" --dev "$(join "${dev[@]}")" --mode "$(join $modes)" \
        --layers "$layers" --reach "${REACH:-verdict}" --epochs "$epochs" \
        --rank "$rank" --alpha "$((2 * rank))" --batch-size "${BATCH:-16}" \
        --learning-rate "$lr" --eval-every "${EVAL_EVERY:-10}" --features "$features" \
        --quiet -o "$run" "${resume[@]}" > "$run.log" 2>&1
      # The kept checkpoint's step and figures, from its own record.
      python3 - "$run" "$lr" "$epochs" "$rank" "$((SECONDS - start))" "$layers" >> "$out/sweep.tsv" <<'PY'
import json, sys
run, lr, epochs, rank, secs, layers = sys.argv[1:]
t = json.load(open(f"{run}/best/gavel_judge.json"))["training"]
f, b = t["dev_figures"], t["dev_base_figures"]
modes = " ".join(f"{m} {a:.3f}" for m, a in f["ranking"])
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
dev = [l["dev"]["mean_ranking"] for l in lines if l.get("dev")]
late = dev[len(dev) // 2:]
print(f"{lr}\t{epochs}\t{rank}\t{f['mean_ranking']:.3f}\t{t['step']}\t{f['loss']:.4f}\t{modes}"
      f"\t{sum(late) / len(late):.3f}\t{min(dev):.3f}\t{b['mean_ranking']:.3f}\t{secs}\t{layers}")
PY
      tail -n 1 "$out/sweep.tsv"
    done
  done
done
done
column -t -s $'\t' "$out/sweep.tsv"
