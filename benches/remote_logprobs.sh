#!/usr/bin/env bash
# Remote judges in the probability modes against a real server (BENCHMARKS.md "Remote
# probability modes"): llama-cpp-python's OpenAI-compatible server serves the 1.5B test GGUF on
# 127.0.0.1, and gavel judges through it as through any remote judge.
#
#   benches/remote_logprobs.sh                     # both parts below, first 20 QA eval groups
#   LIMIT=50 SETS="halueval_qa halueval_summarization" benches/remote_logprobs.sh
#   PARTS=agree benches/remote_logprobs.sh         # only the P(yes) comparison (PARTS=eval: only eval)
#   SERVE_ONLY=1 benches/remote_logprobs.sh        # only the server, until interrupted:
#       GAVEL_TEST_LLAMA_SERVER=http://127.0.0.1:8765/v1 cargo test --test llama_server
#   GAVEL_BIN=path/to/gavel ...                    # a built binary instead of `cargo build --release`
#
# Parts:
#   agree  the same pointwise prompts (the first LIMIT groups of each set) asked of the remote
#          judge and of the local judge on the same GGUF: |ΔP(yes)| per trajectory, median and
#          max (target: median ≤ 0.02; the two run different quantized kernels, not different
#          arithmetic), in $OUT/agree.txt
#   eval   `gavel eval` (two orders: accuracy, flip rate, seconds per group) of the remote judge
#          listwise, pointwise and pairwise beside the local judge pointwise, in $OUT/eval-*.txt
#
# llama-cpp-python is built into a throwaway virtualenv under target/ (about 10 minutes on 2
# cores, once). Releases before 0.3.36 return logprobs only with `logits_all`, so it is set. The
# server reuses the previous prompt's KV for the prefix they share, as vLLM's and SGLang's prefix
# caches do.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${GAVEL_TEST_MODEL_1_5B:-$(tools/fetch-model.sh 1.5b)}
venv=target/llama-venv
llama_version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
if ! "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$venv/bin/pip" install --quiet \
    "llama-cpp-python[server]==$llama_version"
fi
port=${PORT:-8765}
out=${OUT:-target/remote-logprobs}
limit=${LIMIT:-20}
sets=${SETS:-halueval_qa}
parts=${PARTS:-"agree eval"}
mkdir -p "$out"
url=http://127.0.0.1:$port/v1
"$venv/bin/python" -m llama_cpp.server --model "$model" --model_alias qwen2.5-coder-1.5b \
  --host 127.0.0.1 --port "$port" --n_ctx 8192 --logits_all true \
  --n_threads "$(nproc)" > "$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 180); do
  curl -sf "$url/models" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { cat "$out/server.log" >&2; exit 1; }
  sleep 1
done
echo "llama-cpp-python $llama_version serving $(basename "$model") at $url" >&2
if [[ -n ${SERVE_ONLY:-} ]]; then
  wait $server
  exit
fi
source benches/gavel_bin.sh
cat > "$out/gavel.toml" <<EOF
default_judge = "remote-pointwise"

[judges.local]
backend = "local"
model_path = "$model"
mode = "pointwise"

EOF
for mode in listwise pointwise pairwise; do
  cat >> "$out/gavel.toml" <<EOF
[judges.remote-$mode]
backend = "remote"
base_url = "$url"
model = "qwen2.5-coder-1.5b"
mode = "$mode"
timeout_s = 600
deadline_s = 1800
max_concurrency = 1

EOF
done
# Two stores: the comparison's verdicts must not make eval's timings cache hits.
run() { local store=$1; shift; "$GAVEL" "$@" --config "$out/gavel.toml" --store "$out/$store"; }
# Each set's first LIMIT groups as score requests (an eval line also carries its labels).
for s in $sets; do
  head -n "$limit" "evals/$s.jsonl" |
    python3 -c 'import json, sys
for line in sys.stdin:
    g = json.loads(line)
    print(json.dumps({"trajectories": g["trajectories"]}))' > "$out/$s.groups.jsonl"
done
if [[ " $parts " == *" agree "* ]]; then
  for s in $sets; do
    for judge in remote-pointwise local; do
      start=$(date +%s)
      run store-agree score --judge "$judge" "$out/$s.groups.jsonl" > "$out/$s.$judge.jsonl"
      echo "   $s $judge: $(( $(date +%s) - start )) s" >&2
    done
  done
  python3 - "$out" $sets <<'PY' | tee "$out/agree.txt"
import json, sys, statistics, pathlib
out = pathlib.Path(sys.argv[1])
def p_yes(path):
    return [s["components"]["judge"] for line in path.read_text().splitlines()
            for s in json.loads(line)["scores"]]
diffs = []
for s in sys.argv[2:]:
    remote = p_yes(out / f"{s}.remote-pointwise.jsonl")
    local = p_yes(out / f"{s}.local.jsonl")
    assert len(remote) == len(local), (s, len(remote), len(local))
    d = [abs(r - l) for r, l in zip(remote, local)]
    diffs += d
    print(f"{s}: {len(d)} trajectories, |ΔP(yes)| median {statistics.median(d):.4f}, "
          f"max {max(d):.4f}")
print(f"all: {len(diffs)} trajectories, |ΔP(yes)| median {statistics.median(diffs):.4f}, "
      f"max {max(diffs):.4f}, share within 0.02: {sum(x <= 0.02 for x in diffs) / len(diffs):.3f}")
PY
fi
if [[ " $parts " == *" eval "* ]]; then
  for s in $sets; do
    for judge in remote-listwise remote-pointwise remote-pairwise local; do
      start=$(date +%s)
      run store-eval eval --judge "$judge" --limit "$limit" --orders 2 --concurrency 1 --yes \
        --format json -o "$out/eval-$s-$judge.json" "evals/$s.jsonl"
      run store-eval eval --judge "$judge" --limit "$limit" --orders 2 --concurrency 1 --yes \
        "evals/$s.jsonl" > "$out/eval-$s-$judge.txt"
      echo "   eval $s $judge: $(( $(date +%s) - start )) s" >&2
    done
  done
  grep -H "accuracy\|flip\|per group" "$out"/eval-*.txt || true
fi
