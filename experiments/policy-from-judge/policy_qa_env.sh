# Sourced (from the repository root, as $ROOT) by the policy QA benchmarks: learn_from_judge.sh,
# judge_signal.sh and judge_on_policy.sh. The models, the gavel binary and the judge's config,
# each overridable from the environment.
POLICY_MODEL="${POLICY_MODEL:-$(tools/fetch-model.sh 0.5b)}"
JUDGE_MODEL="${JUDGE_MODEL:-$(tools/fetch-model.sh 1.5b)}"
JUDGE_ADAPTER="${JUDGE_ADAPTER:-$ROOT/adapters/judge-qwen2.5-coder-1.5b}"
source benches/gavel_bin.sh

# judge_config FILE MODE ADAPTER: a scorer config with one local judge, `policy-judge`, on the
# 1.5B in MODE (pointwise, pairwise), with ADAPTER (a folder, or `none`); the rubric comes with
# each group.
judge_config() {
    {
        echo 'default_judge = "policy-judge"'
        echo
        echo '[judges.policy-judge]'
        echo 'backend = "local"'
        echo "model_path = \"$JUDGE_MODEL\""
        if [[ "$3" != none ]]; then echo "adapter = \"$3\""; fi
        echo 'device = "cpu"'
        echo "mode = \"$2\""
    } > "$1"
}
