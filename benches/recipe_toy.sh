#!/usr/bin/env bash
# The four-stage recipe on the toy task (BENCHMARKS.md "Training: the four-stage recipe on the
# toy"): online GRPO from scratch against GRPO started from adapters made by the earlier stages.
#
#   benches/recipe_toy.sh                 # seeds 1..5, 100 GRPO steps, under target/recipe-toy
#   SEEDS="1 2 3" STEPS=50 benches/recipe_toy.sh
#   GAVEL_BIN=target/debug/gavel benches/recipe_toy.sh   # a binary already built
#
# For each seed, from the same untrained toy model (`gavel train toy --no-train`):
#   best-of-8   `train sample --group-size 8`: 8 completions of each of the 10 tasks, scored
#   select      `gavel select --best-of --min-reward 0.3`: each task's winner, if it is any good
#   sft         `train --sft` on the winners (SFT_STEPS steps)
#   offline     `train --offline` on the 8 scored samples, from the SFT adapter (OFFLINE_STEPS)
#   arms        online GRPO for STEPS steps: from scratch | from sft | from sft + offline |
#               from sft + offline with the difficulty filter (pass = reward >= 0.3)
# and prints, per arm, the mean reward over all 10 tasks (16 samples each, `train sample`, seed
# 1000) of the policy before its GRPO steps and after them, then the means over seeds. Everything
# runs on the CPU, 127.0.0.1 only (no judge: the toy's rewards are verifiers).
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS="${SEEDS:-1 2 3 4 5}"
STEPS="${STEPS:-100}"
SFT_STEPS="${SFT_STEPS:-40}"
OFFLINE_STEPS="${OFFLINE_STEPS:-20}"
WORK="${WORK:-target/recipe-toy}"

source benches/gavel_bin.sh
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

# Mean reward of 16 sampled completions of each of the 10 tasks (`train sample`), with an
# adapter (or none: the untrained model). The same measure for every arm and stage.
score() {
    local out="$1"; shift
    "$GAVEL" train --config "$cfg" --quiet "$@" sample --group-size 16 --seed 1000 --out "$out" 2>/dev/null
    python3 - "$out" <<'PY'
import json, sys
r = [x for l in open(sys.argv[1]) if l.strip() for x in json.loads(l)["rewards"]]
print(f"{sum(r) / len(r):.3f}")
PY
}

# The settings BENCHMARKS.md's figures were measured with: the toy's train.toml before it took a
# cosine schedule and dynamic sampling (issue 61), so every stage here trains as it did then.
PIN=(--schedule constant --dynamic-sampling-rounds 0)

printf '%-5s %-26s %-8s %-8s %s\n' seed arm start after steps | tee results.txt
for s in $SEEDS; do
    d="seed-$s"
    "$GAVEL" train toy --output-dir "$d" --seed "$s" --no-train 2>/dev/null
    cfg="$d/train.toml"
    "$GAVEL" train --config "$cfg" --quiet sample --group-size 8 --out "$d/best8.jsonl" 2>/dev/null
    "$GAVEL" select "$d/best8.jsonl" -o "$d/sft.jsonl" --best-of --min-reward 0.3 2>"$d/select.txt"
    "$GAVEL" train --config "$cfg" --quiet "${PIN[@]}" --sft "$d/sft.jsonl" --steps "$SFT_STEPS" \
        --output-dir "$d/sft" >/dev/null
    "$GAVEL" train --config "$cfg" --quiet "${PIN[@]}" --offline "$d/best8.jsonl" \
        --init-adapter "$d/sft/checkpoint-$SFT_STEPS" --steps "$OFFLINE_STEPS" \
        --output-dir "$d/offline" >/dev/null
    sft="$d/sft/checkpoint-$SFT_STEPS"
    off="$d/offline/checkpoint-$OFFLINE_STEPS"
    base=$(score "$d/eval-base.jsonl")
    at_sft=$(score "$d/eval-sft.jsonl" --init-adapter "$sft")
    at_off=$(score "$d/eval-offline.jsonl" --init-adapter "$off")
    run() {  # arm name, start score, extra flags
        local arm="$1" start="$2"; shift 2
        "$GAVEL" train --config "$cfg" --quiet "${PIN[@]}" --steps "$STEPS" --output-dir "$d/$arm" "$@" >/dev/null
        # The filter may end a run early (no task left in its band): its last checkpoint.
        local last after
        last=$(ls -d "$d/$arm"/checkpoint-* | sort -V | tail -1)
        after=$(score "$d/eval-$arm.jsonl" --init-adapter "$last")
        printf '%-5s %-26s %-8s %-8s %s\n' "$s" "$arm" "$start" "$after" "${last##*-}" | tee -a results.txt
    }
    run scratch "$base"
    run from-sft "$at_sft" --init-adapter "$sft"
    run from-sft+offline "$at_off" --init-adapter "$off"
    run from-sft+offline+filter "$at_off" --init-adapter "$off" --filter-pass-rate 0.1,0.9 \
        --filter-pass-threshold 0.3 --filter-resurvey-every 20
    sed -n 's/^/  /p' "$d/select.txt"
done

python3 - <<'PY'
import collections
rows = [l.split() for l in open("results.txt").read().splitlines()[1:]]
by = collections.defaultdict(list)
for seed, arm, start, after, steps in rows:
    by[arm].append((float(start), float(after)))
print("\nmean over seeds (reward before the GRPO steps, after them):")
for arm, v in by.items():
    n = len(v)
    print(f"  {arm:<26} {sum(a for a, _ in v) / n:.3f}  {sum(b for _, b in v) / n:.3f}  ({n} seeds)")
PY
