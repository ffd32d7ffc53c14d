#!/usr/bin/env bash
# Does a policy learn from gavel's rewards? (README; NOTEBOOK.md next to this script has every
# run). The RULER experiment at small scale, on the CPU, 127.0.0.1 only:
#
#   experiments/policy-from-judge/learn_from_judge.sh                       # the full run, under target/learn-from-judge
#   STEPS=2 TEST_N=8 WORK=target/lfj-smoke experiments/policy-from-judge/learn_from_judge.sh   # a smoke run of every stage
#   GAVEL_BIN=target/release/gavel experiments/policy-from-judge/learn_from_judge.sh           # a binary already built
#
# It reruns end to end and resumes: every stage whose output exists is skipped, and a training
# run that stopped continues from its last checkpoint (`--resume`). Stages:
#   base      greedy answers of the untrained policy to the held-out test questions
#   trained   online GRPO on policy_qa/train.jsonl (next to this script), rewarded by gavel's local judge only
#             (no gold answer anywhere in the reward), then its greedy answers
#   control   the same run with --shuffle-rewards (each group's judge scores permuted within the
#             group: a reward with no information), then its greedy answers
#   score     score_policy_answers.py (next to this script): each policy's answers against HaluEval's right
#             answers (normalised containment; token F1 >= 0.5 beside it), trained - base and
#             control - base with paired bootstrap 95 % intervals
# Policy: the 0.5B test model (POLICY_MODEL, default tools/fetch-model.sh 0.5b), LoRA.
# Judge: the 1.5B test model with its shipped adapter (adapters/judge-qwen2.5-coder-1.5b), in
# JUDGE_MODE (default pointwise: pairwise asks n(n-1) prompts a group, 56 for 8 completions).
#
# Choosing a reward (README: choose on dev, report test once per shipped configuration):
#   SPLIT=dev        answers and scores policy_qa/dev.jsonl instead of policy_qa/test.jsonl
#   SPLIT=dev_more TEST_N=400
#                    the larger dev set (400 questions, about +-0.05 on a difference, where dev's
#                    100 give about +-0.10): what to choose on
#   CONTROL=0        skips the control run (a dev run compares trained with base only)
#   LENGTH_TARGET=80 LENGTH_LIMIT=200 [LENGTH_WEIGHT=1]
#                    merges a length verifier (characters; 1.0 up to the target, falling to 0.0 at
#                    the limit) into the training reward beside the judge (weights: judge
#                    JUDGE_WEIGHT, length LENGTH_WEIGHT): the rubric's "one short sentence" made
#                    verifiable. Still no gold answer in the reward.
#   RUBRIC_FILE=experiments/policy-from-judge/policy_qa_correct.md
#                    the training tasks' rubric text from this file instead of the one
#                    policy_qa/train.jsonl carries (the rubric is the reward function's
#                    author's to write; still no gold answer in it)
#   REFERENCE=judge  the training tasks' rubric gets `reference = "judge"`: the judge answers each
#                    question itself first (once per question, stored) and grades every answer
#                    against its own (README "Reference-guided judging"); still no gold answer
#   REFERENCE_INSTRUCTION="Reply with the answer alone."
#                    with REFERENCE=judge: the rubric's `reference_instruction`, the system message
#                    the judge answers each question under in place of the task's own
#   REFERENCE_F1=1   with REFERENCE=judge: also merges a `reference_f1` verifier (token F1 of the
#                    answer against the judge's own answer) into the reward, at this weight beside
#                    the judge (1) and the length verifier; the judge's answer, never the gold one
#   REFERENCE_RECALL=2
#                    with REFERENCE=judge: the same with a `reference_recall` verifier (the share
#                    of the judge's answer's words the answer says: a sentence around the judge's
#                    answer scores as the bare answer does)
#   JUDGE_WEIGHT=0   the judge's verdict's weight in the training reward (default 1). At 0 the
#                    judge gives no verdict at all (it is not asked): with REFERENCE=judge and
#                    REFERENCE_RECALL or REFERENCE_F1 the reward is then the length verifier plus
#                    the answer's agreement with the judge's own answer, which the judge still
#                    writes once per question. This drops RULER's relative verdict; the judge's
#                    answer is still the only knowledge in the reward (no gold answer)
#   TRAIN_SETS="train train_more"
#                    the training prompts: these files of policy_qa/, one after another
#                    (default: train, its 400 prompts; train_more has 1,600 more, drawn after
#                    every other file)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"

WORK="${WORK:-target/learn-from-judge}"
STEPS="${STEPS:-100}"
PROMPTS_PER_STEP="${PROMPTS_PER_STEP:-4}"
GROUP_SIZE="${GROUP_SIZE:-8}"
MAX_TOKENS="${MAX_TOKENS:-48}"
LEARNING_RATE="${LEARNING_RATE:-2e-5}"
SAVE_EVERY="${SAVE_EVERY:-10}"
TEST_N="${TEST_N:-200}"
SEED="${SEED:-0}"
SPLIT="${SPLIT:-test}"
CONTROL="${CONTROL:-1}"
LENGTH_TARGET="${LENGTH_TARGET:-}"
LENGTH_LIMIT="${LENGTH_LIMIT:-}"
LENGTH_WEIGHT="${LENGTH_WEIGHT:-1}"
RUBRIC_FILE="${RUBRIC_FILE:-}"
REFERENCE="${REFERENCE:-}"
REFERENCE_F1="${REFERENCE_F1:-}"
REFERENCE_RECALL="${REFERENCE_RECALL:-}"
JUDGE_WEIGHT="${JUDGE_WEIGHT:-1}"
TRAIN_SETS="${TRAIN_SETS:-train}"
for set_name in $TRAIN_SETS; do
    case "$set_name" in
        train | train_more) ;;
        *) echo "learn_from_judge.sh: TRAIN_SETS names train and train_more, not $set_name" >&2; exit 2 ;;
    esac
done
REFERENCE_INSTRUCTION="${REFERENCE_INSTRUCTION:-}"
if [[ -n "$REFERENCE_INSTRUCTION" && "$REFERENCE" != judge ]]; then
    echo "learn_from_judge.sh: REFERENCE_INSTRUCTION is what the judge answers under: set REFERENCE=judge" >&2
    exit 2
fi
if [[ -n "$REFERENCE_F1$REFERENCE_RECALL" && "$REFERENCE" != judge ]]; then
    echo "learn_from_judge.sh: REFERENCE_F1 and REFERENCE_RECALL compare with the judge's own answer: set REFERENCE=judge" >&2
    exit 2
fi
if ! python3 -c 'import sys; assert float(sys.argv[1]) >= 0' "$JUDGE_WEIGHT" 2> /dev/null; then
    echo "learn_from_judge.sh: JUDGE_WEIGHT is a number >= 0, not $JUDGE_WEIGHT" >&2
    exit 2
fi
if [[ "$(python3 -c 'import sys; print(float(sys.argv[1]) == 0)' "$JUDGE_WEIGHT")" == True \
      && -z "$REFERENCE_F1$REFERENCE_RECALL" ]]; then
    echo "learn_from_judge.sh: JUDGE_WEIGHT=0 leaves only the length in the reward: set REFERENCE=judge and REFERENCE_RECALL or REFERENCE_F1" >&2
    exit 2
fi
if [[ -n "$REFERENCE" && "$REFERENCE" != judge ]]; then
    echo "learn_from_judge.sh: REFERENCE is \"judge\" or unset, not $REFERENCE" >&2
    exit 2
fi
if [[ -n "$RUBRIC_FILE" && ! -s "$RUBRIC_FILE" ]]; then
    echo "learn_from_judge.sh: RUBRIC_FILE $RUBRIC_FILE is missing or empty" >&2
    exit 2
fi
[[ -n "$RUBRIC_FILE" ]] && RUBRIC_FILE="$(realpath "$RUBRIC_FILE")"
if [[ -n "$LENGTH_TARGET" && -z "$LENGTH_LIMIT" ]] || [[ -z "$LENGTH_TARGET" && -n "$LENGTH_LIMIT" ]]; then
    echo "learn_from_judge.sh: LENGTH_TARGET and LENGTH_LIMIT go together (e.g. 80 and 200)" >&2
    exit 2
fi
JUDGE_MODE="${JUDGE_MODE:-pointwise}"
source experiments/policy-from-judge/policy_qa_env.sh
mkdir -p "$WORK"
WORK="$(realpath "$WORK")"
cd "$WORK"

# The scorer: one local judge, the shipped adapter on the 1.5B; the rubric comes with each task.
judge_config judge.toml "$JUDGE_MODE" "$JUDGE_ADAPTER"

# The training tasks: the prompts and rubric as built (or RUBRIC_FILE's rubric), plus the length
# verifier when asked for.
python3 - "$ROOT" "$TRAIN_SETS" "$LENGTH_TARGET" "$LENGTH_LIMIT" "$LENGTH_WEIGHT" \
    "$RUBRIC_FILE" "$REFERENCE" "$REFERENCE_F1" "$REFERENCE_RECALL" "$REFERENCE_INSTRUCTION" \
    "$JUDGE_WEIGHT" > train_tasks.jsonl <<'PY'
import json, os, sys
(root, sets, target, limit, weight, rubric_file, reference, reference_f1, reference_recall,
 instruction, judge_weight) = sys.argv[1:]
rubric = None
if rubric_file:
    name = "policy_qa_" + os.path.splitext(os.path.basename(rubric_file))[0].removeprefix("policy_qa_")
    rubric = {"name": name, "text": open(rubric_file).read()}
lines = [l for name in sets.split() for l in open(f"{root}/experiments/policy-from-judge/policy_qa/{name}.jsonl")]
for line in lines:
    if not line.strip():
        continue
    task = json.loads(line)
    if rubric:
        task["rubric"] = rubric
    if reference:
        task["rubric"] = dict(task["rubric"], reference=reference)
    if instruction:
        task["rubric"]["reference_instruction"] = instruction
    # A judge weight of 0 leaves the judge out of the policy, so it is not asked for a verdict.
    verifiers, weights = [], {"judge": float(judge_weight)} if float(judge_weight) > 0 else {}
    if target:
        verifiers.append({"type": "length", "unit": "chars",
                          "target": int(target), "limit": int(limit)})
        weights["length"] = float(weight)
    if reference_f1:
        verifiers.append({"type": "reference_f1"})
        weights["reference_f1"] = float(reference_f1)
    if reference_recall:
        verifiers.append({"type": "reference_recall"})
        weights["reference_recall"] = float(reference_recall)
    if verifiers:
        task["verifiers"] = verifiers
        task["policy"] = {"type": "weighted", "weights": weights}
    print(json.dumps(task))
PY

# The held-out questions as tasks for `train sample`: the prompt alone, scored by a length
# verifier (no judge is asked; the reward of these samples is not what is measured).
python3 - "$ROOT/experiments/policy-from-judge/policy_qa/$SPLIT.jsonl" "$TEST_N" > test_tasks.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][: int(sys.argv[2])]
for r in rows:
    print(json.dumps({
        "messages": r["messages"],
        "verifiers": [{"type": "length", "unit": "chars", "target": 120, "limit": 600}],
        "policy": {"type": "weighted", "weights": {"length": 1.0}},
    }))
PY
python3 - "$ROOT/experiments/policy-from-judge/policy_qa/$SPLIT.jsonl" "$TEST_N" > test.jsonl <<'PY'
import sys
lines = [l for l in open(sys.argv[1]) if l.strip()][: int(sys.argv[2])]
sys.stdout.write("".join(lines))
PY

# Greedy answers of the policy (with adapter $2, or none) to the test questions, as
# {"id", "text"} lines in test order, into $1.
answers() {
    local out="$1" adapter="${2:-}"
    [[ -s "$out" ]] && return 0
    local extra=()
    [[ -n "$adapter" ]] && extra=(--init-adapter "$adapter")
    "$GAVEL" train --model "$POLICY_MODEL" --tasks test_tasks.jsonl --quiet \
        --scorer-config judge.toml --store store-eval \
        --group-size 1 --temperature 0 --max-tokens "$MAX_TOKENS" --prompts-per-step 8 \
        "${extra[@]}" sample --output "$out.scored"
    python3 - "$out.scored" test.jsonl > "$out.tmp" <<'PY'
import json, sys
groups = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tests = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(groups) == len(tests), (len(groups), len(tests))
for g, t in zip(groups, tests):
    text = g["trajectories"][0]["messages"][-1].get("content") or ""
    print(json.dumps({"id": t["id"], "text": text}))
PY
    mv "$out.tmp" "$out"
}

# Online GRPO into $1 (extra flags after it), resumed from its last checkpoint if it stopped.
train() {
    local dir="$1"; shift
    [[ -d "$dir/checkpoint-$STEPS" ]] && return 0
    local resume=()
    local last
    last="$(ls -d "$dir"/checkpoint-* 2>/dev/null | sort -t- -k2 -n | tail -1 || true)"
    [[ -n "$last" ]] && resume=(--resume "$last")
    "$GAVEL" train --model "$POLICY_MODEL" --tasks train_tasks.jsonl --quiet \
        --scorer-config judge.toml --store "store-$(basename "$dir")" \
        --steps "$STEPS" --prompts-per-step "$PROMPTS_PER_STEP" --group-size "$GROUP_SIZE" \
        --max-tokens "$MAX_TOKENS" --learning-rate "$LEARNING_RATE" --seed "$SEED" \
        --save-every "$SAVE_EVERY" --output-dir "$dir" "${resume[@]}" "$@"
}

start=$(date +%s)
answers answers-base.jsonl
train trained
answers answers-trained.jsonl "trained/checkpoint-$STEPS"
runs=(trained)
if [[ "$CONTROL" != 0 ]]; then
    train control --shuffle-rewards
    answers answers-control.jsonl "control/checkpoint-$STEPS"
    runs+=(control)
fi
files=(answers-base.jsonl)
for run in "${runs[@]}"; do files+=("answers-$run.jsonl"); done

python3 "$ROOT/experiments/policy-from-judge/score_policy_answers.py" --json --test test.jsonl "${files[@]}" > result.json
python3 "$ROOT/experiments/policy-from-judge/score_policy_answers.py" --test test.jsonl "${files[@]}" | tee result.txt

# Per-step cost of each run (metrics.jsonl): sampling, judging, backward.
for run in "${runs[@]}"; do
    python3 - "$run" "$run/metrics.jsonl" <<'PY'
import json, sys
m = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
# One line a step (a file from before resumed runs dropped their re-run steps: the last wins).
m = sorted({x["step"]: x for x in m if "step" in x and "reward_mean" in x}.values(), key=lambda x: x["step"])
mean = lambda k: sum(x.get(k, 0) for x in m) / max(len(m), 1)
print(f"{sys.argv[1]}: {len(m)} steps, per step {mean('seconds'):.1f} s = sampling "
      f"{mean('sample_seconds'):.1f} + judging {mean('score_seconds'):.1f} + backward "
      f"{mean('train_seconds'):.1f}; reward {m[0]['reward_mean']:.3f} -> {m[-1]['reward_mean']:.3f}")
PY
done | tee -a result.txt
echo "wall $(( $(date +%s) - start )) s (this invocation)" | tee -a result.txt
