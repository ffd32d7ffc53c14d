#!/usr/bin/env bash
# Judge quality of the local test models on every shipped labelled set (BENCHMARKS.md "Judge
# quality"): `gavel eval`, two orders, explanations off (the small models only copy the answer
# into them, and they cost decode time; scores do not depend on them).
#
#   benches/judge_quality.sh                            # both models, every set, listwise
#   MODELS=0.5b SETS=halueval_qa LIMIT=40 benches/judge_quality.sh
#   MODES="listwise pointwise pairwise" benches/judge_quality.sh
#   GAVEL_BIN=path/to/gavel ...   # a built binary instead of `cargo build --release`
#   PROMPTS_DIR=dir OUT=target/jq-variant ...   # templates to try (a prompts_dir), own OUT
#
# Models come from tools/fetch-model.sh (cached after the first run). Results: one JSON report
# and one text summary per model, set and mode under $OUT (default target/judge-quality), a
# verdict store there too (a rerun, or a larger LIMIT, judges only what is new), and
# $OUT/summary.md, the table of every report there.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${MODELS:-"0.5b 1.5b"}
sets=${SETS:-"halueval_qa halueval_summarization gavel_answers"}
modes=${MODES:-listwise}
out=${OUT:-target/judge-quality}
fetch=${FETCH:-tools/fetch-model.sh}
mkdir -p "$out"
source benches/gavel_bin.sh
bin=$GAVEL
limit=(); [[ -n ${LIMIT:-} ]] && limit=(--limit "$LIMIT")
for m in $models; do
  path=$("$fetch" "$m")
  cfg=$out/local-$m.toml
  # PROMPTS_DIR: judge templates to try instead of the shipped ones (a prompts_dir, e.g. a
  # leaner system message), measured before it ships.
  pd=""; [[ -n ${PROMPTS_DIR:-} ]] && pd="prompts_dir = \"$(realpath "$PROMPTS_DIR")\""
  cat > "$cfg" <<TOML
default_judge = "local-$m"
$pd
[judges."local-$m"]
backend = "local"
model_path = "$path"
max_explanation_bytes = 0
deadline_s = 3600
[server]
request_timeout_s = 3600
TOML
  for s in $sets; do
    for mode in $modes; do
      echo "== local-$m on $s, $mode" >&2
      start=$(date +%s)
      # gavel_answers carries a verifier that knows the truth, and the reward follows it: rank
      # the judge component there, which is what the set measures.
      score=reward; [[ $s == gavel_answers ]] && score=judge
      args=(--config "$cfg" --store "$out/store-$m" "${limit[@]}" --orders "${ORDERS:-2}"
            --judge-mode "$mode" --score "$score" --concurrency 1)
      "$bin" eval "${args[@]}" --format json -o "$out/$m-$s-$mode.json" "evals/$s.jsonl" || true
      "$bin" eval "${args[@]}" "evals/$s.jsonl" > "$out/$m-$s-$mode.txt" || true
      echo "   $(( $(date +%s) - start )) s" >&2
    done
  done
done
# One markdown table of every report in $OUT (the BENCHMARKS.md "Judge quality" table).
python3 - "$out" <<'PY' | tee "$out/summary.md"
import glob, json, os, sys
def f(x): return "—" if x is None else f"{x:.3f}"
print("| model | set | mode | groups | pairwise accuracy (95% CI) | top-1 | τ-b | flip rate | acc. better first · later | acc. better longer · shorter | prefer-longer rule | mean score best · worst | invalid |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for r in json.load(open(path))["results"]:
        ci = r["ci95"] or [None, None]
        p, l, c = r["position"], r["length"], r["calibration"]
        print(f'| {r["judge"]} | {r["set"]} | {r.get("judge_mode", "listwise")} | '
              f'{r["valid_groups"]}/{r["groups"]} | '
              f'{f(r["pairwise_accuracy"])} ({f(ci[0])}–{f(ci[1])}) | {f(r["top1_accuracy"])} | '
              f'{f(r["kendall_tau"])} | {f(p["flip_rate"])} | '
              f'{f(p["accuracy_better_first"])} · {f(p["accuracy_better_later"])} | '
              f'{f(l["accuracy_better_longer"])} · {f(l["accuracy_better_shorter"])} | '
              f'{f(l["prefer_longer"])} | {f(c["mean_best"])} · {f(c["mean_worst"])} | '
              f'{r["invalid"]} |')
PY
