#!/usr/bin/env bash
# The cascade benchmark (BENCHMARKS.md "Cascades"): thresholds chosen by `gavel eval
# --calibrate` on dev rows, then each cascade evaluated on eval rows beside its last stage alone.
#
#   benches/cascade.sh                      # every part, into target/cascade/, then the tables
#   PARTS="calibrate qa" benches/cascade.sh # some parts
#
# Parts:
#   calibrate  the 0.5B and the 1.5B (each with its shipped adapter, pairwise) on the 100 dev QA
#              groups, at α in $ALPHAS (δ 0.1): calibrate-ALPHA.json
#   qa         the 0.5B → 1.5B cascade at α = $ALPHA and the 1.5B alone on the 200 QA eval groups
#   dialogue   the same on the 100 dialogue groups (out of domain; the QA threshold, as a user
#              without labelled rows of their own would run it)
#   frontier   the 1.5B → simulated frontier cascade (benches/sim_frontier.py: answers from the
#              labels, wrong on $ERROR_RATE of the groups) at every α, beside the simulation alone,
#              on the QA eval groups: frontier calls and accuracy against α
#   unit       both local judges rescore the 40 dev gavel_answers groups (3 or 4 trajectories
#              each), and benches/cascade_unit.py replays the cascade escalating whole groups
#              or single trajectories: unit.md
#
# Every verdict is cached in one store ($OUT/store): a part run again, or a cascade whose stages
# were judged before, costs no judge call for what is cached. Needs the release binary
# (cargo build --release) and python3; fetches the two models (tools/fetch-model.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-target/cascade}
gavel=${GAVEL:-target/release/gavel}
parts=${PARTS:-calibrate qa dialogue frontier unit}
alphas=${ALPHAS:-0.05 0.1 0.15}
alpha=${ALPHA:-0.1}
error_rate=${ERROR_RATE:-0.05}
port=${PORT:-8766}
mkdir -p "$out"
tools/fetch-model.sh 0.5b >/dev/null
tools/fetch-model.sh 1.5b >/dev/null
export SIM_FRONTIER_KEY=unused

# The judges: the two local ones and the simulated frontier on $port. (Paths in a config are
# read from its folder: the copy names the adapters by their absolute path.)
sed -e "s/8766/$port/" -e "s|adapter = \"adapters/|adapter = \"$PWD/adapters/|" \
  benches/cascade.toml >"$out/base.toml"

# threshold FILE JUDGE: the threshold --calibrate chose for JUDGE, or nothing.
threshold() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
for c in report.get("calibration", []):
    if c["judge"] == sys.argv[2] and c["thresholds"]:
        print(c["thresholds"][0])
EOF
}

# cascade NAME FIRST THRESHOLD LAST: a config with the cascade NAME added.
cascade() {
  { cat "$out/base.toml"; printf '\n[judges."%s"]\nbackend = "cascade"\nstages = ["%s", "%s"]\nthresholds = [%s]\n' "$1" "$2" "$4" "$3"; } \
    >"$out/$1.toml"
}

eval_rows() { # CONFIG FILE LIMIT JSON JUDGE...
  local config=$1 file=$2 limit=$3 json=$4; shift 4
  local judges=(); for j in "$@"; do judges+=(--judge "$j"); done
  "$gavel" eval --config "$config" --store "$out/store" --limit "$limit" --orders 2 \
    --concurrency 1 "${judges[@]}" --format json -o "$json" "$file"
  "$gavel" eval --config "$config" --store "$out/store" --limit "$limit" --orders 2 \
    --concurrency 1 "${judges[@]}" "$file" >"${json%.json}.txt"
}

for part in $parts; do
  case $part in
    calibrate)
      for a in $alphas; do
        "$gavel" eval --config "$out/base.toml" --store "$out/store" --orders 2 --concurrency 1 \
          --judge small-tuned --judge large-tuned --calibrate --alpha "$a" --delta 0.1 \
          --format json -o "$out/calibrate-$a.json" evals/dev/halueval_qa.jsonl
      done ;;
    qa|dialogue)
      t=$(threshold "$out/calibrate-$alpha.json" small-tuned)
      [[ -n $t ]] || { echo "cascade: no threshold for small-tuned at α $alpha" >&2; exit 1; }
      cascade small-then-large small-tuned "$t" large-tuned
      if [[ $part == qa ]]; then file=evals/halueval_qa.jsonl n=200; else file=evals/halueval_dialogue.jsonl n=100; fi
      eval_rows "$out/small-then-large.toml" "$file" "$n" "$out/$part.json" small-then-large large-tuned ;;
    frontier)
      python3 benches/sim_frontier.py --port "$port" --error-rate "$error_rate" \
        evals/halueval_qa.jsonl evals/dev/halueval_qa.jsonl &
      sim=$!; trap 'kill $sim 2>/dev/null || true' EXIT
      sleep 1
      for a in $alphas; do
        t=$(threshold "$out/calibrate-$a.json" large-tuned)
        [[ -n $t ]] || { echo "cascade: no threshold for large-tuned at α $a; skipped" >&2; continue; }
        cascade "large-then-sim-$a" large-tuned "$t" sim-frontier
        eval_rows "$out/large-then-sim-$a.toml" evals/halueval_qa.jsonl 200 \
          "$out/frontier-$a.json" "large-then-sim-$a" sim-frontier large-tuned
      done
      kill $sim; trap - EXIT ;;
    unit)
      for j in small-tuned large-tuned; do
        "$gavel" rescore --config "$out/base.toml" --store "$out/store" --judge "$j" \
          --concurrency 1 --progress none -o "$out/unit-$j.jsonl" evals/dev/gavel_answers.jsonl
      done
      python3 benches/cascade_unit.py "$out/unit-small-tuned.jsonl" "$out/unit-large-tuned.jsonl" \
        | tee "$out/unit.md" ;;
    *) echo "cascade: unknown part '$part'" >&2; exit 2 ;;
  esac
done
python3 benches/cascade_tables.py "$out"
