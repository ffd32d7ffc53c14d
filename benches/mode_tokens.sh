#!/usr/bin/env bash
# Judge prompt tokens per group by judging mode (BENCHMARKS.md "Prompt tokens per group by
# mode"): `gavel render` (no judge call) of every group of benches/data/groups.jsonl in
# listwise, pointwise and pairwise mode. For each: the tokens of every prompt the mode asks
# (`prompt_tokens_asked`: what a server without a prefix cache prefills) and what a server with
# one prefills (`prompt_tokens_after_prefix_cache`: the prompts' shared start once), counted with
# `o200k_base` and OpenAI's message framing.
#
#   benches/mode_tokens.sh
#   GAVEL_BIN=path/to/gavel benches/mode_tokens.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/gavel_bin.sh
out=${OUT:-target/mode-tokens}
mkdir -p "$out"
for mode in listwise pointwise pairwise; do
  python3 -c 'import json, sys
for line in open("benches/data/groups.jsonl"):
    g = json.loads(line)
    g.pop("kind"); g.pop("id")
    g["judge_mode"] = sys.argv[1]
    print(json.dumps(g))' "$mode" |
    OPENAI_BASE_URL=http://127.0.0.1:9/v1 GAVEL_JUDGE_MODEL=any "$GAVEL" render --format json - \
      > "$out/$mode.jsonl"
done
python3 - "$out" <<'PY'
import json, sys, pathlib, collections
out = pathlib.Path(sys.argv[1])
kinds = [json.loads(l)["kind"] for l in open("benches/data/groups.jsonl")]
sizes = [len(json.loads(l)["trajectories"]) for l in open("benches/data/groups.jsonl")]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for mode in ["listwise", "pointwise", "pairwise"]:
    for kind, r in zip(kinds, map(json.loads, open(out / f"{mode}.jsonl"))):
        rows[kind][mode].append((r.get("prompts_asked", 1), r["prompt_tokens_asked"],
                                 r["prompt_tokens_after_prefix_cache"]))
mean = lambda xs: sum(xs) / len(xs)
print("| kind | groups | n | listwise | pointwise: prompts | tokens | after prefix cache "
      "| pairwise: prompts | tokens | after prefix cache |")
print("|---|---|---|---|---|---|---|---|---|---|")
for kind in dict.fromkeys(kinds):
    n = mean([s for k, s in zip(kinds, sizes) if k == kind])
    l, p, q = (rows[kind][m] for m in ["listwise", "pointwise", "pairwise"])
    cells = [f"{mean([x[1] for x in l]):,.0f}"]
    for xs in (p, q):
        cells += [f"{mean([x[0] for x in xs]):.1f}", f"{mean([x[1] for x in xs]):,.0f}",
                  f"{mean([x[2] for x in xs]):,.0f}"]
    print(f"| {kind} | {len(l)} | {n:.1f} | " + " | ".join(cells) + " |")
PY
