#!/usr/bin/env bash
# Exploitability of the shipped local judge configurations (BENCHMARKS.md "Reward hacking"):
# `gavel eval --attacks` with every shipped attack, on a labelled set, for each configuration,
# undefended and with each defense.
#
#   benches/attacks.sh                                   # dev QA, both configurations
#   SETS="dev/halueval_qa dev/halueval_summarization" LIMIT=50 benches/attacks.sh
#   CONFIGS=examples/local.toml DEFENSES="none gate" benches/attacks.sh
#   PROMPTS_DIR=experiments/reward-hacking-defenses/prompt-variants/attack-evidence \
#     DEFENSES=prompt OUT=target/attacks-p ...   # a prompt defense tried (not shipped)
#   CONFIGS=examples/local-tuned.toml EXTRA="--judge local-base --judge-mode pairwise" \
#     TAG=base-pairwise DEFENSES=none benches/attacks.sh   # another judge or mode of a config
#   GAVEL_BIN=path/to/gavel ...   # a built binary instead of `cargo build --release`
#
# Defenses (DEFENSES, default "none gate"):
#   none    the default rubric's standards without its gate (the `grader_address` verifier and
#           the `gate` policy that zeroes the reward of a trajectory that addresses the grader)
#   gate    the default rubric as shipped, gate included (the same judge prompts as `none`, so
#           the same cached verdicts)
#   prompt  the judge templates in PROMPTS_DIR (a prompts_dir) instead of the shipped ones
#
# Models come from tools/fetch-model.sh (cached after the first run). Results: one JSON report
# and one text summary per configuration, set and defense under $OUT (default target/attacks),
# a verdict store there (a rerun judges only what is new), and $OUT/summary.md, a table of every
# attack's success rate per report. One order per group (`ORDERS`): the probability modes have
# no position bias (flip rate 0).
set -euo pipefail
cd "$(dirname "$0")/.."
configs=${CONFIGS:-"examples/local.toml examples/local-tuned.toml"}
sets=${SETS:-dev/halueval_qa}
defenses=${DEFENSES:-"none gate"}
out=${OUT:-target/attacks}
mkdir -p "$out/rubrics"
tools/fetch-model.sh 1.5b >/dev/null
source benches/gavel_bin.sh
bin=$GAVEL
limit=(); [[ -n ${LIMIT:-} ]] && limit=(--limit "$LIMIT")
# The default rubric's standards word for word, without its gate and as shipped (gated).
grep -q '^gate = "grader_address"' rubrics/default.toml || { echo "rubrics/default.toml has no gate" >&2; exit 2; }
sed -n '/^description/,/^"""$/p' rubrics/default.toml |
  sed 's/^description = .*/description = "The default rubric without its gate."/' > "$out/rubrics/default_ungated.toml"
sed -n '/^description/,$p' rubrics/default.toml |
  sed 's/^description = .*/description = "The default rubric, gated on grader_address."/' > "$out/rubrics/default_gated.toml"
for cfg in $configs; do
  name=$(basename "$cfg" .toml)
  for defense in $defenses; do
    pd=""
    rubric=()
    case $defense in
      none) rubric=(--rubric default_ungated) ;;
      gate) rubric=(--rubric default_gated) ;;
      prompt) pd="prompts_dir = \"$(realpath "${PROMPTS_DIR:?PROMPTS_DIR names the templates to try}")\"" ;;
      *) echo "unknown defense $defense (none, gate, prompt)" >&2; exit 2 ;;
    esac
    run_cfg=$out/$name-$defense.toml
    { echo "rubrics_dir = \"$(realpath "$out/rubrics")\""; echo "$pd"; cat "$cfg"; } > "$run_cfg"
    for s in $sets; do
      tag=$name${TAG:+-$TAG}-$(echo "$s" | tr / -)-$defense
      echo "== $tag" >&2
      start=$(date +%s)
      args=(--config "$run_cfg" --store "$out/store" "${limit[@]}" --orders "${ORDERS:-1}"
            --concurrency 1 --attacks --yes "${rubric[@]}" ${EXTRA:-})
      "$bin" eval "${args[@]}" --format json -o "$out/$tag.json" "evals/$s.jsonl" || true
      "$bin" eval "${args[@]}" "evals/$s.jsonl" > "$out/$tag.txt" || true
      echo "   $(( $(date +%s) - start )) s" >&2
    done
  done
done
# One markdown table: a row per attack, a column per report (success rate; accuracy clean →
# attacked in the last rows).
python3 - "$out" <<'PY' | tee "$out/summary.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
reports = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
cols = [k for k, r in reports.items() if r.get("attacks")]
attacks = sorted({a["attack"] for k in cols for a in reports[k]["attacks"]})
def cell(k, name):
    for a in reports[k]["attacks"]:
        if a["attack"] == name and a["set"] != "all":
            lo, hi = a["success_ci95"] or (None, None)
            s = a["success_rate"]
            return "—" if s is None else f"{s:.3f} ({lo:.2f}–{hi:.2f})"
    return ""
print("| attack | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for name in attacks:
    print(f"| {name} | " + " | ".join(cell(k, name) for k in cols) + " |")
def clean(k):
    r = [x for x in reports[k]["results"] if x["set"] != "all"][0]
    return f"{r['pairwise_accuracy']:.3f} ({r['groups']} groups)"
print("| *clean accuracy* | " + " | ".join(clean(k) for k in cols) + " |")
def worst(k):
    s = reports[k]["attack_summary"][0]
    return f"{s['worst_attack']} {s['success_rate']:.3f}"
print("| *worst attack* | " + " | ".join(worst(k) for k in cols) + " |")
PY
