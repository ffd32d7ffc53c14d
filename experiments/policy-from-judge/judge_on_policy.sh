#!/usr/bin/env bash
# A local judge trained on the policy's own answers (NOTEBOOK.md next to this script, "What the
# reward knows about being right"). The 1.5B judge ranks the 0.5B policy's answers to
# the experiment's questions only a little better than chance (judge_signal.sh); this
# trains its pointwise verdict on answers of the same kind, to questions no policy run sees.
# CPU, 127.0.0.1 only; resumes (every output that exists is kept).
#
#   experiments/policy-from-judge/judge_on_policy.sh                     # under target/judge-on-policy
#   STAGE=sample experiments/policy-from-judge/judge_on_policy.sh        # only the samples and their labels
# LIMIT (default 200 of judge.jsonl's 400 questions) bounds the cost: the 1.5B's frozen pass
# takes about 1.7 s a pointwise example on 2 cores. The questions are sampled CHUNK (200) at a
# time, so a larger LIMIT keeps the chunks already sampled:
#   LIMIT=400 JUDGE_TRAIN=340 EPOCHS=4 LR=1e-3 WORK=target/jop-400 experiments/policy-from-judge/judge_on_policy.sh
#   LIMIT=4 JUDGE_TRAIN=2 EPOCHS=1 WORK=target/jop-smoke experiments/policy-from-judge/judge_on_policy.sh   # smoke
#
# 1. The untrained policy (POLICY_MODEL, default the 0.5B test model) samples GROUP_SIZE
#    completions (temperature 1, MAX_TOKENS) of every question of policy_qa/judge.jsonl
#    (never a policy's task, dev or test question). No judge is asked (a length verifier only).
# 2. Each completion is labelled by the containment check of score_policy_answers.py
#    (1: HaluEval's right answer occurs in it, else 0), as `gavel eval`'s labelled groups under
#    the experiment's rubric, keeping the groups with both right and wrong answers: those of the
#    first JUDGE_TRAIN questions train, the rest choose the checkpoint.
# 3. `gavel train judge --mode pointwise` on the 1.5B (JUDGE_MODEL): the adapter under adapter/.
#    Then measure it on the dev split's samples, never trained on:
#      experiments/policy-from-judge/judge_signal.sh "adapter=target/judge-on-policy/adapter/best"
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"

WORK="${WORK:-target/judge-on-policy}"
STAGE="${STAGE:-all}"
GROUP_SIZE="${GROUP_SIZE:-8}"
MAX_TOKENS="${MAX_TOKENS:-48}"
SEED="${SEED:-0}"
LIMIT="${LIMIT:-200}"
JUDGE_TRAIN="${JUDGE_TRAIN:-170}"
EPOCHS="${EPOCHS:-3}"
LR="${LR:-2e-4}"
source experiments/policy-from-judge/policy_qa_env.sh
QUESTIONS="$ROOT/experiments/policy-from-judge/policy_qa/judge.jsonl"
mkdir -p "$WORK"
WORK="$(realpath "$WORK")"
cd "$WORK"

# The questions as tasks the sampler scores with a length verifier alone: no judge is asked, and
# the reward of these samples is not what is used. Sampled CHUNK questions at a time (each chunk
# seeded with SEED, as one run of `gavel train sample`), so that a larger LIMIT keeps the chunks
# already sampled.
CHUNK="${CHUNK:-200}"
for ((start = 0; start < LIMIT; start += CHUNK)); do
    end=$((start + CHUNK < LIMIT ? start + CHUNK : LIMIT))
    chunk="samples-$(printf %04d "$start")-$(printf %04d "$end").scored"
    [[ -s "$chunk" ]] && continue
    python3 - "$QUESTIONS" "$start" "$end" > tasks.jsonl <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
for line in lines[int(sys.argv[2]) : int(sys.argv[3])]:
    print(json.dumps({
        "messages": json.loads(line)["messages"],
        "verifiers": [{"type": "length", "unit": "chars", "target": 120, "limit": 600}],
        "policy": {"type": "weighted", "weights": {"length": 1.0}},
    }))
PY
    "$GAVEL" train --model "$POLICY_MODEL" --tasks tasks.jsonl --quiet --store store-samples \
        --group-size "$GROUP_SIZE" --temperature 1 --max-tokens "$MAX_TOKENS" \
        --prompts-per-step 4 --seed "$SEED" sample --output "$chunk.tmp"
    mv "$chunk.tmp" "$chunk"
done
for ((start = 0; start < LIMIT; start += CHUNK)); do
    end=$((start + CHUNK < LIMIT ? start + CHUNK : LIMIT))
    cat "samples-$(printf %04d "$start")-$(printf %04d "$end").scored"
done > samples.scored

# Labelled groups: the experiment's rubric, the completions, containment labels.
python3 - "$ROOT/experiments/policy-from-judge" "$QUESTIONS" samples.scored "$JUDGE_TRAIN" "$LIMIT" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from score_policy_answers import contains_answer
rubric = json.load(open(sys.argv[1] + "/policy_qa/row_ids.json"))["prompt"]["rubric"]
questions = [json.loads(l) for l in open(sys.argv[2]) if l.strip()][: int(sys.argv[5])]
groups = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
assert len(groups) == len(questions), (len(groups), len(questions))
n_train = int(sys.argv[4])
right = total = mixed = 0
with open("train.jsonl", "w") as tr, open("dev.jsonl", "w") as dv:
    for k, (g, q) in enumerate(zip(groups, questions)):
        trs = g["trajectories"]
        labels = [int(contains_answer(t["messages"][-1].get("content") or "", q["answer"]))
                  for t in trs]
        right, total, mixed = right + sum(labels), total + len(labels), mixed + (0 < sum(labels) < len(labels))
        if not 0 < sum(labels) < len(labels):
            continue  # all right or all wrong: nothing to rank (`gavel eval`'s files refuse it)
        line = {"id": q["id"], "set": "policy_qa_judge", "rubric": rubric,
                "trajectories": trs, "labels": labels}
        (tr if k < n_train else dv).write(json.dumps(line) + "\n")
print(f"labelled: {len(groups)} questions ({n_train} train, {len(groups) - n_train} dev), "
      f"{total} completions, {right / total:.3f} right; the {mixed} groups with both right "
      f"and wrong answers are kept")
PY
[[ "$STAGE" == sample ]] && exit 0

if [[ ! -d adapter/best ]]; then
    resume=()
    compgen -G "adapter/checkpoint-*" > /dev/null && resume=(--resume)
    "$GAVEL" train judge --model "$JUDGE_MODEL" --train train.jsonl --dev dev.jsonl \
        --mode pointwise --epochs "$EPOCHS" --learning-rate "$LR" --seed "$SEED" \
        --quiet --output adapter "${resume[@]}"
fi
echo "adapter: $WORK/adapter/best"
