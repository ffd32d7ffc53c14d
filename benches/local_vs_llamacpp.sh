#!/usr/bin/env bash
# The local judge (candle) against llama.cpp on the same GGUF, in the same run: prefill and
# decode tokens/s and time per group. Figures go to BENCHMARKS.md ("Local judge").
#
#   benches/local_vs_llamacpp.sh            # the 0.5B model from tools/fetch-model.sh
#   GAVEL_TEST_MODEL=/path/m.gguf benches/local_vs_llamacpp.sh
#
# llama-cpp-python is built into a throwaway virtualenv under target/ (minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${GAVEL_TEST_MODEL:-$(tools/fetch-model.sh 0.5b)}
venv=target/llama-venv
if ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet llama-cpp-python
fi
GAVEL_TEST_MODEL="$model" cargo bench --bench local_judge
"$venv/bin/python" benches/llamacpp_bench.py "$model" target/bench-local/prompt.txt target/bench-local/candle.json
