#!/usr/bin/env bash
# How much the local judge's rewards say about correctness, in the groups the policy of
# learn_from_judge.sh trains on (NOTEBOOK.md next to this script, "What the reward knows about
# being right"). CPU, 127.0.0.1 only; resumes (every output that exists is kept).
#
#   experiments/policy-from-judge/judge_signal.sh                                   # the shipped configuration only
#   experiments/policy-from-judge/judge_signal.sh "adapter=none" "rubric=experiments/policy-from-judge/policy_qa_correct.md"   # two variants
#
# 1. The untrained policy (POLICY_MODEL, default the 0.5B test model) samples GROUP_SIZE
#    completions (temperature 1, MAX_TOKENS) of every question of policy_qa/$SPLIT.jsonl
#    (default dev), scored by the judge as learn_from_judge.sh's reward is (the 1.5B test model,
#    pointwise, its shipped adapter, the set's rubric): samples.scored.
# 2. Each argument is a variant: `key=value` pairs separated by spaces (quote the argument),
#    mode=pointwise|pairwise, adapter=none|PATH, rubric=FILE (the rubric's text, relative to
#    the repository), reference=judge (the rubric's `reference = "judge"`: the judge answers
#    each question first and grades against its own answer); unnamed keys as in step 1. The same samples are re-scored with it
#    (`gavel rescore`) into variant-N.out.
# 3. judge_signal.py: per reward, AUC (right ranked above wrong within a group, by the
#    gold answer's containment) and best-of-N.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"

WORK="${WORK:-target/judge-signal}"
SPLIT="${SPLIT:-dev}"
GROUP_SIZE="${GROUP_SIZE:-8}"
MAX_TOKENS="${MAX_TOKENS:-48}"
SEED="${SEED:-0}"
source experiments/policy-from-judge/policy_qa_env.sh
TEST="$ROOT/experiments/policy-from-judge/policy_qa/$SPLIT.jsonl"
mkdir -p "$WORK"
WORK="$(realpath "$WORK")"
cd "$WORK"

# The questions as tasks with the set's rubric (no answer in them).
python3 - "$TEST" "$ROOT/experiments/policy-from-judge/policy_qa/row_ids.json" > tasks.jsonl <<'PY'
import json, sys
rubric = json.load(open(sys.argv[2]))["prompt"]["rubric"]
for line in open(sys.argv[1]):
    if line.strip():
        print(json.dumps({"messages": json.loads(line)["messages"], "rubric": rubric}))
PY

if [[ ! -s samples.scored ]]; then
    judge_config judge.toml pointwise "$JUDGE_ADAPTER"
    "$GAVEL" train --model "$POLICY_MODEL" --tasks tasks.jsonl --quiet \
        --scorer-config judge.toml --store store-samples \
        --group-size "$GROUP_SIZE" --temperature 1 --max-tokens "$MAX_TOKENS" \
        --prompts-per-step 4 --seed "$SEED" sample --output samples.scored.tmp
    mv samples.scored.tmp samples.scored
fi

outputs=(samples.scored)
: > variants.txt
n=0
for variant in "$@"; do
    n=$((n + 1))
    mode=pointwise adapter="$JUDGE_ADAPTER" rubric="" reference=""
    for pair in $variant; do
        case "$pair" in
            reference=judge) reference=judge ;;
            mode=*) mode="${pair#mode=}" ;;
            adapter=none) adapter=none ;;
            adapter=*) adapter="$(cd "$ROOT" && realpath "${pair#adapter=}")" ;;
            rubric=*) rubric="$(cd "$ROOT" && realpath "${pair#rubric=}")" ;;
            *) echo "judge_signal.sh: $pair: expected mode=, adapter=, rubric= or reference=judge" >&2; exit 2 ;;
        esac
    done
    out="variant-$n.out"
    judge_config "variant-$n.toml" "$mode" "$adapter"
    python3 - samples.scored "$rubric" "$reference" > "variant-$n.jsonl" <<'PY'
import json, os, sys
rubric = None
if sys.argv[2]:
    name = os.path.splitext(os.path.basename(sys.argv[2]))[0]
    rubric = {"name": name, "text": open(sys.argv[2]).read()}
for line in open(sys.argv[1]):
    g = json.loads(line)
    r = dict(rubric or g["rubric"])
    if sys.argv[3]:
        r["reference"] = sys.argv[3]
    print(json.dumps({"rubric": r, "trajectories": g["trajectories"]}))
PY
    echo "variant-$n: $variant" | tee -a variants.txt
    "$GAVEL" rescore --config "variant-$n.toml" --store "store-variant-$n" --concurrency 2 \
        --output "$out" "variant-$n.jsonl" 2> "variant-$n.log"
    outputs+=("$out")
done

python3 "$ROOT/experiments/policy-from-judge/judge_signal.py" --test "$TEST" "${outputs[@]}" | tee result.txt
