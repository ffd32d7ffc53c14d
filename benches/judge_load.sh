#!/usr/bin/env bash
# The local judge under a training loop's load, through the daemon (BENCHMARKS.md, "Local judge
# under load"): `gavel serve` with one local judge (pointwise), then distinct 4-trajectory RAG
# groups (examples/groups/rag_answer.json, the question marked per group) sent one after another
# and then all at once by a client on 127.0.0.1. Any gavel binary, so a build before a change and
# one after are measured alike. Prints one line per run: wall seconds, groups/s, mean and max
# latency, and the usage's prompt, cached and forward-pass totals.
#
#   benches/judge_load.sh                                 # 1.5B, 16 groups, concurrency 1 then 16
#   MODEL=0.5b LOAD_GROUPS=8 CONCURRENCY="1 4 8" benches/judge_load.sh
#   MAX_BATCH_TOKENS=0 benches/judge_load.sh              # each prompt alone
#   GAVEL_BIN=path/to/older/gavel benches/judge_load.sh   # another build (its config must parse)
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/gavel_bin.sh
bin=$GAVEL
path=$(tools/fetch-model.sh "${MODEL:-1.5b}")
out=${OUT:-target/judge-load}
mkdir -p "$out"
store=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{
  echo 'default_judge = "local"'
  echo '[judges.local]'
  echo 'backend = "local"'
  echo "model_path = \"$path\""
  echo 'mode = "pointwise"'
  echo 'max_explanation_bytes = 0'
  echo 'deadline_s = 3600'
  [[ -n ${MAX_BATCH_TOKENS:-} ]] && echo "max_batch_tokens = $MAX_BATCH_TOKENS"
  echo '[server]'
  echo "addr = \"127.0.0.1:$port\""
  echo 'request_timeout_s = 3600'
  echo '[store]'
  echo "path = \"$store\""
} > "$out/gavel.toml"
"$bin" serve --config "$out/gavel.toml" > "$out/serve.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; rm -rf "$store"' EXIT
python3 - "$port" "${LOAD_GROUPS:-16}" "${CONCURRENCY:-1 16}" <<'PY'
import json, sys, threading, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

port, n, levels = int(sys.argv[1]), int(sys.argv[2]), [int(c) for c in sys.argv[3].split()]
url = f"http://127.0.0.1:{port}"
example = json.load(open("examples/groups/rag_answer.json"))

def group(k):
    g = json.loads(json.dumps(example))
    for t in g["trajectories"]:
        for m in t["messages"]:
            if m["role"] == "user":
                m["content"] += f" (case {k})"
    return g

def post(body):
    t = time.time()
    req = urllib.request.Request(f"{url}/v1/score_group", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        usage = json.load(r)["usage"]
    return time.time() - t, usage

for _ in range(600):
    try:
        if urllib.request.urlopen(f"{url}/readyz", timeout=5).status == 200:
            break
    except Exception:
        time.sleep(1)
post(group(0))  # warm-up
k = 1
for c in levels:
    bodies = [group(k + i) for i in range(n)]
    k += n
    t = time.time()
    with ThreadPoolExecutor(c) as pool:
        done = list(pool.map(post, bodies))
    wall = time.time() - t
    lat = [d for d, _ in done]
    tot = lambda key: sum(u[key] for _, u in done)
    print(f"concurrency {c:3d}: {n} groups in {wall:7.1f} s, {n / wall:.3f} groups/s, latency mean "
          f"{sum(lat) / n:6.1f} s max {max(lat):6.1f} s; prompt {tot('prompt_tokens')}, cached "
          f"{tot('cached_prompt_tokens')}, forward passes {tot('forward_passes')}", flush=True)
PY
